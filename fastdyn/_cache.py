"""Where numba keeps its compiled-kernel cache (imported by ``fastdyn/__init__.py`` before any
``@njit(cache=True)`` kernel is defined).

numba writes the cache beside the sources (``__pycache__``) when it can, else in the user's cache
directory; on a read-only install (a shared HPC site-packages, a container) with no writable HOME
it finds neither and every ``cache=True`` kernel fails at import ("no locator available"). Here,
when the package directory is not writable: ``FASTDYN_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/fastdyn/numba`` or ``~/.cache/fastdyn/numba`` if writable, else
``<tmp>/fastdyn-numba-<uid>``. An explicit ``NUMBA_CACHE_DIR`` is respected when writable.

A read-only ``NUMBA_CACHE_DIR`` (a cache filled once by ``fastdyn warmup`` on a shared file system,
then write-protected) would be ignored by numba, which then compiles every kernel again: here its
files are copied (those new or changed since the last copy) into a private writable directory
beside the candidates above, and numba is pointed there (docs/hpc.md).

numba checks a cached kernel against the stamp of the file that defines it only, not of the
files its callees come from: after ``git pull`` (or any edit) in a source checkout, a kernel
whose own file did not change would load machine code compiled from the old callees. So when the
kernels are cached beside the sources, a fingerprint of every source file (size and mtime) is
kept in ``fastdyn/__pycache__/fastdyn-sources.stamp``, and when it differs every cached kernel
of the package is dropped (the next run compiles them again).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK | os.X_OK)


def _candidates(suffix: str = "") -> list[Path]:
    out = []
    if os.environ.get("XDG_CACHE_HOME"):
        out.append(Path(os.environ["XDG_CACHE_HOME"]) / "fastdyn" / f"numba{suffix}")
    if os.environ.get("HOME"):
        out.append(Path(os.environ["HOME"]) / ".cache" / "fastdyn" / f"numba{suffix}")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    out.append(Path(tempfile.gettempdir()) / f"fastdyn-numba-{uid}{suffix}")
    return out


def private_copy(shared: Path) -> Path | None:
    """A writable copy of the read-only cache ``shared`` (files missing there, or of another size
    or older, are copied), or None when no candidate directory is writable."""
    import hashlib
    import shutil

    tag = hashlib.sha1(str(shared.resolve()).encode()).hexdigest()[:12]
    dest = next((d for d in _candidates(f"-shared-{tag}") if _writable(d)), None)
    if dest is None:
        return None
    try:
        for src in shared.rglob("*"):
            if not src.is_file():
                continue
            out = dest / src.relative_to(shared)
            st = src.stat()
            if out.exists():
                so = out.stat()
                if so.st_size == st.st_size and so.st_mtime >= st.st_mtime:
                    continue
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
    except OSError:
        pass  # a partial copy still serves what it holds; numba compiles the rest
    return dest


def sources_stamp(pkg: Path) -> str:
    """A fingerprint of the package's sources: relative path, size and mtime of every .py file."""
    import hashlib

    h = hashlib.sha1()
    for f in sorted(pkg.rglob("*.py")):
        st = f.stat()
        h.update(f"{f.relative_to(pkg)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def drop_stale_kernels(pkg: Path) -> int:
    """Delete the numba cache files (``*.nbi``, ``*.nbc``) under ``pkg``'s ``__pycache__``
    folders unless the sources' fingerprint equals the one stored with them (none stored: they
    may be stale too); then store the current one. Returns the number of files deleted."""
    stamp = pkg / "__pycache__" / "fastdyn-sources.stamp"
    now = sources_stamp(pkg)
    try:
        if stamp.read_text() == now:
            return 0
    except OSError:
        pass
    n = 0
    for f in pkg.rglob("__pycache__/*.nb[ic]"):
        try:
            f.unlink()
            n += 1
        except OSError:
            pass  # another process dropped it first
    try:
        stamp.parent.mkdir(exist_ok=True)
        tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}")
        tmp.write_text(now)
        os.replace(tmp, stamp)
    except OSError:
        pass
    return n


def cache_dir() -> Path | None:
    """The directory numba should cache in, or None to leave numba's own choice (beside the
    sources, which are writable, or an explicit, writable NUMBA_CACHE_DIR)."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        d = Path(given)
        if d.is_dir() and not os.access(d, os.W_OK | os.X_OK) and os.access(d, os.R_OK | os.X_OK):
            return private_copy(d)
        return None
    own = os.environ.get("FASTDYN_CACHE_DIR")
    if own:
        return Path(own)
    if os.access(Path(__file__).parent, os.W_OK):
        return None
    return next((d for d in _candidates() if _writable(d)), None)


def cache_is_empty() -> bool:
    """Whether numba's cache holds no compiled fastdyn kernel yet (no ``*.nbi`` index file where
    numba looks: ``NUMBA_CACHE_DIR`` when set, else the package's ``__pycache__`` folders): the
    run about to start compiles its kernels. False where nothing is compiled (JIT disabled)."""
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return False
    where = os.environ.get("NUMBA_CACHE_DIR")
    pattern = "*.nbi" if where else "__pycache__/*.nbi"
    root = Path(where) if where else Path(__file__).parent
    try:
        return next(root.rglob(pattern), None) is None
    except OSError:
        return False


_dir = cache_dir()
if _dir is None and not os.environ.get("NUMBA_CACHE_DIR"):  # numba caches beside the sources
    drop_stale_kernels(Path(__file__).parent)
if _dir is not None:
    os.environ["NUMBA_CACHE_DIR"] = str(_dir)  # read by numba at import (and by workers we spawn)
    try:
        import sys

        if "numba" in sys.modules:  # numba imported first: its config is already read
            sys.modules["numba"].config.CACHE_DIR = str(_dir)
    except AttributeError:
        pass


def has_cached(dispatcher: object) -> bool:
    """Whether numba's cache holds some compiled signature of ``dispatcher`` (an ``@njit(cache=
    True)`` kernel), read from its index file without compiling; True where that cannot be told
    (no cache, JIT disabled, another numba), so a caller that acts on a cold cache does nothing."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())  # type: ignore[attr-defined]
    except Exception:
        return True
