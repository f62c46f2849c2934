"""⑤ h5: the on-disk format (layout), the streaming writer and the reader.

The names below are imported on first use, so ``fastdyn.h5.lock`` (the CLI's error handling)
does not load h5py.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["FileFormatError", "Run", "RunWriter", "load"]

_LAZY = {
    "FileFormatError": "fastdyn.h5.reader",
    "Run": "fastdyn.h5.reader",
    "load": "fastdyn.h5.reader",
    "RunWriter": "fastdyn.h5.writer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fastdyn.h5' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
