"""Where numba keeps its compiled-kernel cache (imported by ``fastdyn/__init__.py`` before any
``@njit(cache=True)`` kernel is defined).

numba writes the cache beside the sources (``__pycache__``) when it can, else in the user's cache
directory; on a read-only install (a shared HPC site-packages, a container) with no writable HOME
it finds neither and every ``cache=True`` kernel fails at import ("no locator available"). Here,
when the package directory is not writable: ``FASTDYN_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/fastdyn/numba`` or ``~/.cache/fastdyn/numba`` if writable, else
``<tmp>/fastdyn-numba-<uid>``. An explicit ``NUMBA_CACHE_DIR`` is always respected.
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


def cache_dir() -> Path | None:
    """The directory numba should cache in, or None to leave numba's own choice (beside the
    sources, which are writable, or an explicit NUMBA_CACHE_DIR)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    own = os.environ.get("FASTDYN_CACHE_DIR")
    if own:
        return Path(own)
    if os.access(Path(__file__).parent, os.W_OK):
        return None
    candidates = []
    if os.environ.get("XDG_CACHE_HOME"):
        candidates.append(Path(os.environ["XDG_CACHE_HOME"]) / "fastdyn" / "numba")
    if os.environ.get("HOME"):
        candidates.append(Path(os.environ["HOME"]) / ".cache" / "fastdyn" / "numba")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    candidates.append(Path(tempfile.gettempdir()) / f"fastdyn-numba-{uid}")
    return next((d for d in candidates if _writable(d)), None)


_dir = cache_dir()
if _dir is not None:
    os.environ["NUMBA_CACHE_DIR"] = str(_dir)  # read by numba at import (and by workers we spawn)
    try:
        import sys

        if "numba" in sys.modules:  # numba imported first: its config is already read
            sys.modules["numba"].config.CACHE_DIR = str(_dir)
    except AttributeError:
        pass
