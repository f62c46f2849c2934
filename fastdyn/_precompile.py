"""Compile named kernels for named signatures into numba's on-disk cache, without running them.

A model declares the kernels a run reaches last as (kernel, signature) pairs
(:class:`fastdyn.models.WarmupHooks` ``precompile``): the kernel by its dotted name
``"package.module:name"`` (an ``@njit(cache=True)`` dispatcher), the signature as numba's text of
its argument types, e.g. ``"(float64[::1], int64)"``: the types a call passes, in order (arrays
with their layout: ``float64[::1]`` C-contiguous, ``float64[:, ::1]`` 2-d C, ``float64[:]`` any).
``dispatcher.compile(argument types)`` compiles it and writes numba's cache index and data files;
a later process whose call passes those types loads it from there (numba keys a cached entry by
the tuple of argument types, so a signature with a return type, or other argument types, is a
different entry and the call compiles again).

A kernel built per model (a closure over the model's own ``@njit`` functions, as the generic
integrators of :mod:`fastdyn.drive.integrate_soa`) has no name of its own: its builder (a
module-level :class:`fastdyn.drive._kernel_cache.KernelBuilder`) names it with the dotted names of
its arguments, ``"package.module:builder[pkg.mod:f,pkg.mod:g,None,True]"`` (each argument a
module-level function or dispatcher, or None, True, False), and its one signature. Such a name is
rebuilt here through the same builder from the same functions, so numba's cache holds the entry
(under the same fingerprint) that the run's call loads. The ODE driver declares the generic
solver's kernel so, from the model's maths (:func:`fastdyn.drive.ode_maths.precompile`); a model
whose functions are not module-level has no such name, and nothing is declared for it.

``python -m fastdyn._precompile KERNEL SIGNATURE [KERNEL SIGNATURE …]`` does it in a process of
its own (``fastdyn simulate`` on a cold cache, ``fastdyn warmup``); it exits 0 when every pair
compiled, 2 with one line per failed pair on stderr otherwise. Importing ``fastdyn`` first points
numba at fastdyn's cache directory (:mod:`fastdyn._cache`), as in the run that loads the kernels.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

_LITERALS = {"None": None, "True": True, "False": False}


def _resolve(name: str, what: str) -> Any:
    """The object ``"package.module:attribute"`` names (ValueError saying what is wrong)."""
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{what} {name!r}: expected 'package.module:name'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{what} {name!r}: not found ({e})") from None


def built(name: str) -> tuple[Any, tuple[Any, ...]] | None:
    """(builder, arguments) of a built kernel's name ``"package.module:builder[arg, …]"``
    (module docstring), None for a plain dispatcher's name (ValueError for a bad one)."""
    head, sep, rest = name.partition("[")
    if not sep:
        return None
    if not rest.endswith("]"):
        raise ValueError(f"kernel {name!r}: expected 'package.module:builder[arg, …]'")
    builder = _resolve(head, "kernel")
    if not all(hasattr(builder, a) for a in ("cached", "signature", "name_for")):
        raise ValueError(f"kernel {name!r}: {head} is not a kernel builder")
    parts = [a.strip() for a in rest[:-1].split(",")] if rest[:-1].strip() else []
    args = tuple(_LITERALS[a] if a in _LITERALS else _resolve(a, "argument") for a in parts)
    return builder, args


def kernel(name: str) -> Any:
    """The dispatcher ``name`` names: ``"package.module:attribute"``, or a built kernel
    ``"package.module:builder[arg, …]"`` (built here: compiled, or loaded from numba's cache);
    ValueError saying what is wrong."""
    got = built(name)
    if got is not None:
        builder, args = got
        return builder(*args)
    obj = _resolve(name, "kernel")
    if not (hasattr(obj, "compile") and hasattr(obj, "py_func")):
        raise ValueError(f"kernel {name!r}: not a numba @njit dispatcher")
    return obj


def name_of(dispatcher: Any) -> str:
    """The dotted name (``"package.module:name"``) of a module-level dispatcher."""
    fn = dispatcher.py_func
    return f"{fn.__module__}:{fn.__qualname__}"


def signature_text(types: Sequence[Any]) -> str:
    """numba's text of the argument types ``types``, ``"(float64[:, ::1], int64)"``: the inverse
    of :func:`argument_types` for arrays (any layout, C or F) and scalars."""
    from numba.core import types as nt

    def one(t: Any) -> str:
        if isinstance(t, nt.Array):
            dims = [":"] * t.ndim
            if t.layout == "C":
                dims[-1] = "::1"
            elif t.layout == "F":
                dims[0] = "::1"
            return f"{t.dtype}[{', '.join(dims)}]"
        return "boolean" if t == nt.boolean else str(t)

    return "(" + ", ".join(one(t) for t in types) + ("," if len(types) == 1 else "") + ")"


def argument_types(signature: str) -> tuple[Any, ...]:
    """The argument types of ``signature`` (numba's text, e.g. ``"(float64[::1], int64)"``), as
    the tuple a call with such arguments is cached under (ValueError for anything else)."""
    from numba.core import sigutils

    try:
        args, ret = sigutils.normalize_signature(signature)
    except Exception as e:  # noqa: BLE001 — numba raises several kinds for a bad text
        raise ValueError(f"signature {signature!r}: not a numba signature ({e})") from None
    if ret is not None:
        raise ValueError(
            f"signature {signature!r}: give the argument types only, '(t1, t2, …)': a call is "
            "cached under those, not under a signature with a return type"
        )
    return tuple(args)


def is_cached(dispatcher: Any, types: tuple[Any, ...]) -> bool:
    """Whether numba's cache index of ``dispatcher`` holds an entry for argument types ``types``
    compiled for this host (read without compiling); True where that cannot be told (no cache,
    JIT disabled, another numba), so that nothing is started on its account."""
    try:
        from numba.core.registry import cpu_target

        host = cpu_target.target_context.codegen().magic_tuple()
        index = dispatcher._cache._cache_file._load_index()
    except Exception:  # noqa: BLE001
        return True
    return any(key[0] == types and key[1] == host for key in index)


def pending(pairs: Iterable[tuple[Any, str]]) -> list[tuple[str, str]]:
    """The (dotted name, signature) of the ``pairs`` (a dispatcher or its dotted name, and a
    signature) that numba's cache does not hold yet, each once, in the order given."""
    out: list[tuple[str, str]] = []
    for k, sig in pairs:
        got = built(k) if isinstance(k, str) else None
        if got is not None:  # checked without building it
            _check_built(k, got[0], sig)
            if (k, sig) not in out and not got[0].cached(*got[1]):
                out.append((k, sig))
            continue
        d = kernel(k) if isinstance(k, str) else k
        pair = (name_of(d), sig)
        if pair not in out and not is_cached(d, argument_types(sig)):
            out.append(pair)
    return out


def _check_built(name: str, builder: Any, signature: str) -> None:
    """ValueError unless ``signature`` is the one the built kernel ``name`` is compiled for."""
    if argument_types(signature) != argument_types(builder.signature):
        raise ValueError(f"kernel {name!r}: built for {builder.signature}, not for {signature}")


def compile_pair(name: str, signature: str) -> Any:
    """Compile kernel ``name`` for the argument types ``signature`` (loaded from numba's cache
    where it holds them, else compiled and written there); returns the dispatcher. A built
    kernel is built for its one signature, which must be ``signature``."""
    got = built(name)
    if got is not None:
        _check_built(name, got[0], signature)
        return kernel(name)
    d = kernel(name)
    d.compile(argument_types(signature))
    return d


def command(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The command line that compiles ``pairs`` in a process of its own. ``-P``: the working
    directory is not put first on the path, so a ``fastdyn`` folder there (another checkout)
    cannot stand in for this one (it compiled that checkout's kernels, which this run then
    compiled again); :func:`environment` puts this one first instead."""
    return [sys.executable, "-P", "-m", "fastdyn._precompile", *(x for p in pairs for x in p)]


def environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the folder that holds this ``fastdyn`` package first on ``PYTHONPATH``, so the
    process of :func:`command` imports this package (a source checkout that is not installed
    included), whatever its working directory holds."""
    import fastdyn

    root = str(Path(fastdyn.__file__).resolve().parent.parent)
    rest = env.get("PYTHONPATH", "")
    return dict(env, PYTHONPATH=root + (os.pathsep + rest if rest else ""))


def main(argv: Sequence[str]) -> int:
    """Compile the (kernel, signature) pairs of ``argv``; 0 when all compiled, else 2."""
    if not argv or len(argv) % 2:
        print("usage: python -m fastdyn._precompile KERNEL SIGNATURE [KERNEL SIGNATURE …]", file=sys.stderr)  # fmt: skip
        return 2
    failed = 0
    for name, sig in zip(argv[::2], argv[1::2], strict=True):
        try:
            compile_pair(name, sig)
        except Exception as e:  # noqa: BLE001 — report the pair, go on with the others
            failed += 1
            print(f"fastdyn._precompile: {name} {sig}: {type(e).__name__}: {e}", file=sys.stderr)
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
