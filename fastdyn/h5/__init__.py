"""⑤ h5: the on-disk format (layout), the streaming writer and the reader.

The names below are imported on first use, so ``fastdyn.h5.lock`` (the CLI's error handling)
does not load h5py.
"""

from __future__ import annotations

from .._lazy import lazy_attributes

__all__ = ["FileFormatError", "Run", "RunWriter", "load"]

_LAZY = {
    "FileFormatError": "fastdyn.h5.reader",
    "Run": "fastdyn.h5.reader",
    "load": "fastdyn.h5.reader",
    "RunWriter": "fastdyn.h5.writer",
}


__getattr__, __dir__ = lazy_attributes("fastdyn.h5", globals(), _LAZY)
