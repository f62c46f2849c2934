"""④ numba's on-disk cache for the generic integrators' kernels, one entry per model.

A kernel of :mod:`fastdyn.drive.integrate_soa` is a closure over the model's three ``@njit``
functions (through the task loop of :mod:`fastdyn.drive.soa_tasks`). numba keys a cached closure by
its bytecode and the pickle of its cells, and a dispatcher's pickle carries an id drawn afresh in
every process: with ``cache=True`` a new process never hits, and adds one more entry on every
start (numba 0.68, measured). Here the cells' pickle is replaced by a fingerprint of everything
numba compiles into the kernel from outside the kernel's own file (whose stamp numba checks
itself): walking from the kernel's code through its closure cells and the globals its code names,
every jitted function reached (its source file's contents, its name, its compile options), every
module attribute named, and the values numba freezes as compile-time constants (numbers, strings,
tuples, arrays). Each fingerprint has its own index and data file, so processes compiling
different models at the same time never share a file (numba numbers the data files of one index
without a lock).

A value the walk cannot name the same way in every process (an object whose repr holds an
address) gives no fingerprint, and that kernel is not cached: it compiles in each process, as
before. Like numba's own cache, and :mod:`fastdyn._cache` for fastdyn's sources, the check is
of source files: a model function that reads a file or a mutable object at compile time is not
followed.
"""

from __future__ import annotations

import hashlib
import inspect
import types as pytypes
from typing import Any

import numpy as np
from numba.core.caching import FunctionCache, IndexDataCacheFile

_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def fingerprint(py_func: Any, reached: list[Any] | None = None) -> str | None:
    """A hash of what numba compiles into ``py_func`` (a plain Python function about to be
    jitted) from outside its own file, or None when some part of it cannot be named stably
    (``reached``, if given, receives the Python functions of the jitted code walked)."""
    h = hashlib.sha256()
    files: dict[str, bytes] = {}
    seen: set[int] = set()
    todo: list[Any] = [py_func]

    def code_of(fn: Any) -> None:
        path = inspect.getsourcefile(fn) or fn.__code__.co_filename
        if path not in files:
            with open(path, "rb") as f:
                files[path] = hashlib.sha256(f.read()).digest()
        h.update(f"{fn.__module__}.{_qualname(fn)}".encode())
        h.update(files[path])

    def value(x: Any, names: set[str], depth: int = 0) -> bool:
        """Hash ``x`` (a global or cell value of jitted code); False when it cannot be named."""
        if isinstance(x, _PLAIN) or isinstance(x, np.generic):
            h.update(repr((type(x).__name__, x)).encode())
        elif isinstance(x, tuple):
            h.update(b"(")
            if not all(value(v, names, depth) for v in x):
                return False
            h.update(b")")
        elif isinstance(x, np.ndarray):
            h.update(repr((x.dtype.str, x.shape)).encode())
            h.update(np.ascontiguousarray(x).tobytes())
        elif hasattr(x, "py_func") and hasattr(x, "targetoptions"):  # a numba dispatcher
            h.update(repr(sorted(x.targetoptions.items())).encode())
            todo.append(x.py_func)
        elif isinstance(x, pytypes.ModuleType):
            h.update(f"module {x.__name__}".encode())
            if depth < 2:  # the attributes the code names (mod.f, mod.sub.f), as set now (a
                attrs = vars(x)  # module's __getattr__, a lazy import or a warning, is not run)
                for n in sorted(names):
                    if n in attrs and not value(attrs[n], names, depth + 1):
                        return False
        elif isinstance(x, pytypes.FunctionType):  # a Python function numba overloads (or a
            try:  # library's): by name and source file, where its overload is usually written
                code_of(x)
            except (OSError, TypeError):
                return False
        elif callable(x) and getattr(x, "__module__", None) and getattr(x, "__qualname__", None):
            h.update(f"{x.__module__}.{x.__qualname__}".encode())  # a builtin, a ufunc, a class
        else:
            r = repr(x)
            if " at 0x" in r:
                return False
            h.update(f"{type(x).__module__}.{type(x).__qualname__}:{r}".encode())
        return True

    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if reached is not None:
            reached.append(fn)
        try:
            code_of(fn)
        except (OSError, TypeError):
            return None
        codes, names = [fn.__code__], set()
        while codes:  # nested code objects (comprehensions, inner functions) name globals too
            c = codes.pop()
            names.update(c.co_names)
            codes.extend(k for k in c.co_consts if isinstance(k, pytypes.CodeType))
        for n in sorted(names):
            if n in fn.__globals__ and not value(fn.__globals__[n], names):
                return None
        for cell in fn.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # a cell not yet bound
                return None
            if not value(contents, names):
                return None
    return h.hexdigest()


def _qualname(fn: Any) -> str:
    """``fn``'s qualified name before :func:`_name_apart` (the fingerprint hashes that one)."""
    return getattr(fn, "_fastdyn_qualname", fn.__qualname__)


def _name_apart(functions: list[Any], key: str) -> None:
    """Append the fingerprint to the qualified name of every closure among ``functions``.

    numba names a compiled function's symbol after its module, qualified name, argument types
    and a number counted per process. The closures of one builder (``rk_step.<locals>.step``)
    share module and qualified name across models, so two kernels compiled in different
    processes and loaded from the cache into one could define one symbol with two bodies, and
    the second model's kernel would call the first's (measured: a second plug-in's rk4 diverged
    after a first one ran in the same process). With the fingerprint in the name, a symbol's
    body is fixed by its name. Module-level functions are one body already."""
    for fn in functions:
        if "<locals>" in _qualname(fn):
            fn._fastdyn_qualname = _qualname(fn)
            fn.__qualname__ = f"{fn._fastdyn_qualname}[{key[:16]}]"


class ModelKernelCache(FunctionCache):
    """numba's cache for one kernel, keyed (and filed) by :func:`fingerprint`."""

    def __init__(self, py_func: Any, key: str) -> None:
        super().__init__(py_func)
        self._key = key
        self._cache_file = IndexDataCacheFile(
            cache_path=self._cache_path,
            filename_base=f"{self._impl.filename_base}.{key[:20]}",
            source_stamp=self._impl.locator.get_source_stamp(),
        )

    def _index_key(self, sig: Any, codegen: Any) -> tuple:
        code = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
        return (sig, codegen.magic_tuple(), (code, self._key))


def cache_of(py_func: Any) -> ModelKernelCache | None:
    """numba's cache of ``py_func`` under its fingerprint (None when it has none), its closures
    named apart (:func:`_name_apart`); RuntimeError or OSError when numba has no cache directory
    for it."""
    reached: list[Any] = []
    key = fingerprint(py_func, reached)
    if key is None:
        return None
    _name_apart(reached, key)
    return ModelKernelCache(py_func, key)


def jit_cached(py_func: Any, sig: Any, **flags: Any) -> Any:
    """``njit(sig, **flags)(py_func)``, the compiled code kept in numba's cache directory under
    the fingerprint of ``py_func`` (compiled as before, uncached, when it has none or numba has no
    cache directory for it)."""
    from numba import njit

    dispatcher = njit(**flags)(py_func)
    if not hasattr(dispatcher, "compile"):  # NUMBA_DISABLE_JIT: the Python function itself
        return dispatcher
    try:
        cache = cache_of(py_func)
    except (RuntimeError, OSError):  # no cache directory for it: compiled in this process only
        cache = None
    if cache is not None:
        dispatcher._cache = cache
    dispatcher.compile(sig)
    dispatcher.disable_compile()
    return dispatcher


def dotted(x: Any) -> str | None:
    """``"package.module:name"`` of a module-level function or ``@njit`` dispatcher (the object
    that name imports), the text of None, True or False, else None (no stable name)."""
    import importlib

    if x is None or isinstance(x, bool):
        return repr(x)
    fn = getattr(x, "py_func", x)
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qual or "<" in qual or "." in qual:
        return None
    try:
        found = getattr(importlib.import_module(module), qual)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qual}" if found is x else None


class KernelBuilder:
    """A kernel built per model: ``source(*args)`` is the plain Python function (a closure over
    the model's ``@njit`` functions ``args``) that :func:`jit_cached` compiles for its one
    signature ``sig`` and keeps in numba's cache under its fingerprint, once per process and
    ``args`` (``memo[(kind, *args)]``, ``kind`` the part of ``name`` after the colon).

    ``name`` is its own dotted name (``"package.module:attribute"``, the attribute this object
    is bound to); :meth:`name_for` names the kernel built for ``args``,
    ``"package.module:attribute[pkg.mod:f,…,None,True]"``, so that :mod:`fastdyn._precompile`
    rebuilds it in another process through this builder: the same fingerprint, so the cache
    entry that a run loads.
    """

    def __init__(self, name: str, source: Any, sig: Any, memo: dict, **flags: Any) -> None:
        self.name, self.source, self.sig, self.memo, self.flags = name, source, sig, memo, flags
        self.kind = name.partition(":")[2]

    def __call__(self, *args: Any) -> Any:
        """The kernel for ``args``: built (compiled, or loaded from numba's cache) at the first
        call of this process."""
        key = (self.kind, *args)
        if key not in self.memo:
            self.memo[key] = jit_cached(self.source(*args), self.sig, **self.flags)
        return self.memo[key]

    @property
    def signature(self) -> str:
        """numba's text of the argument types the kernel is compiled for."""
        from .._precompile import signature_text

        return signature_text(self.sig.args)

    def name_for(self, *args: Any) -> str | None:
        """The dotted name of the kernel for ``args`` (None when one has no stable name)."""
        names = [dotted(a) for a in args]
        return None if None in names else f"{self.name}[{','.join(names)}]"

    def cached(self, *args: Any) -> bool:
        """Whether the kernel for ``args`` is built in this process or held in numba's cache for
        this host (read without compiling); True where that cannot be told or it cannot be
        cached (no fingerprint, no cache directory), so that nothing is started on its account."""
        if (self.kind, *args) in self.memo:
            return True
        try:
            from numba.core.registry import cpu_target

            cache = cache_of(self.source(*args))
            if cache is None:
                return True
            host = cpu_target.target_context.codegen().magic_tuple()
            index = cache._cache_file._load_index()
        except Exception:  # noqa: BLE001 — an optimisation's check only
            return True
        return any(k[0] == self.sig and k[1] == host for k in index)
