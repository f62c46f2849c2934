"""Appending rows to the streamed series: extend each one and write its new rows, C calls only.

One save of a trained run appends a row to every series (eight in ``bench/h5_append.py``). Through h5py's
low-level API each series costs ``set_extent``, ``get_space``, ``select_hyperslab`` and
``write``: ≈ 15 µs, most of it Python around the C calls (``bench/h5_append.py``).
:class:`Appender` prepares once what does not change between appends (the dataset ids, a row's
shape, the memory space of one row, the memory type, the chunk size) and makes the same five HDF5
calls per series through ctypes (:mod:`fastdyn.h5.libhdf5`): H5Dset_extent, H5Dget_space,
H5Sselect_hyperslab, H5Dwrite, H5Sclose. Where that library cannot be found it makes them through
h5py. Either way the file gets the same bytes; the flush is the caller's.
"""

from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from .libhdf5 import library, phil

_HSIZE = ctypes.POINTER(ctypes.c_uint64)
_HID = ctypes.c_int64
_H5P_DEFAULT = 0  # HDF5's H5P_DEFAULT: (hid_t)0
_SELECT_SET = int(h5py.h5s.SELECT_SET)


@functools.cache
def _calls() -> Any:
    """The five HDF5 functions with their C signatures, or None where the library is not found."""
    lib = library()
    if lib is None:
        return None
    try:
        sig = {
            "H5Dset_extent": ([_HID, _HSIZE], ctypes.c_int),
            "H5Dget_space": ([_HID], _HID),
            "H5Sselect_hyperslab": ([_HID, ctypes.c_int, _HSIZE, _HSIZE, _HSIZE, _HSIZE], ctypes.c_int),
            "H5Dwrite": ([_HID, _HID, _HID, _HID, _HID, ctypes.c_void_p], ctypes.c_int),
            "H5Sclose": ([_HID], ctypes.c_int),
        }  # fmt: skip
        for name, (args, res) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
    except AttributeError:
        return None
    return lib


@dataclass
class _Series:
    """What an append needs of one series, prepared once."""

    name: str
    ds: h5py.Dataset
    hid: int  # the dataset's HDF5 id (``ds`` keeps it open)
    trailing: tuple[int, ...]
    width: int  # elements in a row
    dtype: np.dtype
    mtype: h5py.h5t.TypeID  # the memory type of ``dtype``
    one_row: h5py.h5s.SpaceID  # the memory space of one row
    chunk_rows: int
    chunk_bytes: int
    dims: Any  # ctypes hsize_t[ndim]: the new extent
    start: Any  # ctypes hsize_t[ndim]: the first new row
    count: Any  # ctypes hsize_t[ndim]: the rows written


def _series(name: str, ds: h5py.Dataset) -> _Series:
    trailing = tuple(int(n) for n in ds.shape[1:])
    ndim = 1 + len(trailing)
    hs = ctypes.c_uint64 * ndim
    return _Series(
        name=name, ds=ds, hid=ds.id.id, trailing=trailing, width=math.prod(trailing), dtype=ds.dtype,
        mtype=h5py.h5t.py_create(ds.dtype), one_row=h5py.h5s.create_simple((1, *trailing)),
        chunk_rows=int(ds.chunks[0]), chunk_bytes=math.prod(ds.chunks) * ds.dtype.itemsize,
        dims=hs(0, *trailing), start=hs(), count=hs(1, *trailing),
    )  # fmt: skip


class Appender:
    """Appends rows to the series ``datasets`` (``{name: dataset}``, each growing along axis 0),
    through ctypes where the library is found (``direct``), else through h5py."""

    def __init__(self, datasets: dict[str, h5py.Dataset], direct: bool | None = None):
        self._series = [_series(n, ds) for n, ds in datasets.items()]
        self._lib = _calls() if direct is not False else None
        if direct and self._lib is None:
            raise RuntimeError("the HDF5 library h5py uses was not found")

    @property
    def direct(self) -> bool:
        """Whether the rows go through ctypes (else through h5py)."""
        return self._lib is not None

    def new_bytes(self, n0: int, n1: int) -> int:
        """Bytes of the chunks that rows [n0, n1) allocate (chunks not yet in the file)."""
        return sum(
            (-(-n1 // s.chunk_rows) + (n0 // -s.chunk_rows)) * s.chunk_bytes for s in self._series
        )

    def rows(self, data: dict[str, Any], k: int) -> list[np.ndarray]:
        """``data[name]`` of every series as ``k`` contiguous rows of its dtype (a row given
        once is repeated; ValueError for a shape that does not fit)."""
        out = []
        for s in self._series:
            a = np.asarray(data[s.name], dtype=s.dtype)
            if a.size != k * s.width or not a.flags.c_contiguous:
                shape = (k, *s.trailing)
                a = np.ascontiguousarray(np.broadcast_to(a.reshape(-1, *s.trailing), shape))
            out.append(a)
        return out

    def write(self, n0: int, n1: int, rows: list[np.ndarray]) -> None:
        """Extend every series to ``n1`` rows and write ``rows`` (from :meth:`rows`) as its rows
        [n0, n1). RuntimeError (or h5py's OSError) when HDF5 refuses a call."""
        if self._lib is None:
            self._write_h5py(n0, n1, rows)
            return
        lib, k = self._lib, n1 - n0
        with phil():
            for s, a in zip(self._series, rows, strict=True):
                s.dims[0] = n1
                if lib.H5Dset_extent(s.hid, s.dims) < 0:
                    raise RuntimeError(f"HDF5 could not extend /{s.name} to {n1} rows")
                fspace = lib.H5Dget_space(s.hid)
                if fspace < 0:
                    raise RuntimeError(f"HDF5 could not get the dataspace of /{s.name}")
                try:
                    s.start[0], s.count[0] = n0, k
                    mspace = s.one_row if k == 1 else h5py.h5s.create_simple((k, *s.trailing))
                    if (
                        lib.H5Sselect_hyperslab(fspace, _SELECT_SET, s.start, None, s.count, None)
                        < 0
                        or lib.H5Dwrite(
                            s.hid, s.mtype.id, mspace.id, fspace, _H5P_DEFAULT, a.ctypes.data
                        )
                        < 0
                    ):
                        raise RuntimeError(f"HDF5 could not write rows {n0}..{n1 - 1} of /{s.name}")
                finally:
                    lib.H5Sclose(fspace)

    def _write_h5py(self, n0: int, n1: int, rows: list[np.ndarray]) -> None:
        """The same calls through h5py's low-level API."""
        for s, a in zip(self._series, rows, strict=True):
            did = s.ds.id
            did.set_extent((n1, *s.trailing))
            fspace = did.get_space()
            fspace.select_hyperslab((n0,) + (0,) * len(s.trailing), (n1 - n0, *s.trailing))
            did.write(h5py.h5s.create_simple((n1 - n0, *s.trailing)), fspace, a)
