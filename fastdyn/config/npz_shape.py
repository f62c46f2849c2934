"""The shape of one array in an ``.npz`` archive, read from its ``.npy`` header without loading
the data (config rules that depend on a data file's sizes, e.g. a ``data.from_file``)."""

from __future__ import annotations

import zipfile
from typing import Any

import numpy as np


def read_npy_header(fh: Any) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from the ``.npy`` header at the start of the stream ``fh`` (a member of
    an .npz opened with ``zipfile``, or a file positioned there): only the header is read, not
    the array (ValueError for a header this numpy cannot read)."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    return tuple(int(k) for k in shape), dtype


def npz_array_shape(path: str, name: str) -> tuple[int, ...] | None:
    """Shape of array ``name`` in the archive at ``path``; None when the file, the member or its
    header cannot be read (the loader then reports the problem in its own one-line error)."""
    try:
        with zipfile.ZipFile(path) as z, z.open(f"{name}.npy") as fh:
            return read_npy_header(fh)[0]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
