"""The shape of one array in an ``.npz`` archive, read from its ``.npy`` header without loading
the data (config rules that depend on a data file's sizes, e.g. ICL ``data.from_file``)."""

from __future__ import annotations

import zipfile

import numpy as np


def npz_array_shape(path: str, name: str) -> tuple[int, ...] | None:
    """Shape of array ``name`` in the archive at ``path``; None when the file, the member or its
    header cannot be read (the loader then reports the problem in its own one-line error)."""
    try:
        with zipfile.ZipFile(path) as z, z.open(f"{name}.npy") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, _ = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, _ = np.lib.format.read_array_header_2_0(fh)
            else:
                return None
            return tuple(int(k) for k in shape)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
