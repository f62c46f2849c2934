"""A series' last chunk torn by a kill: read its flushed rows after verifying them, and repair it.

Appending a row rewrites the series' last chunk in place, checksum (fletcher32) included. A kill
during that ``pwrite`` can leave it torn: Linux stops a write to a regular file between pages
when a fatal signal is pending, so the chunk holds the new bytes up to a page boundary and the
old bytes after it. The rows the file's extent covers were the same in both versions, but the
stored checksum (the chunk's last 4 bytes) no longer matches, and HDF5 refuses the whole chunk
(``filter returned failure during read``): every flushed row of that chunk would be lost.

Recovery is verified, not assumed. At the last flush the chunk held the ``k`` rows of the extent
and the fill value after them, and its checksum was that of those bytes. :func:`read_rows`
rebuilds that content from the raw chunk, has HDF5 itself compute its fletcher32 (an in-memory
file with the same chunk shape) and accepts it only when it equals the stored checksum. Any
other damage, a flipped bit in a flushed row included, still fails the read.
:func:`repair_torn` writes the verified chunk back, so plain readers and appends work again.
"""

from __future__ import annotations

import io
from typing import Any

import h5py
import numpy as np


def _last_chunk(ds: h5py.Dataset) -> tuple[int, int] | None:
    """(first row, rows of the extent) of the partly filled last chunk, when it can be torn."""
    if ds.chunks is None or not ds.fletcher32 or not ds.shape or ds.maxshape[0] is not None:
        return None
    if tuple(ds.chunks[1:]) != tuple(ds.shape[1:]):
        return None  # a chunk's rows are contiguous only when it spans the trailing axes
    rows, per = ds.shape[0], ds.chunks[0]
    if rows == 0 or rows % per == 0:
        return None  # a full chunk is never rewritten: the next row starts a new one
    start = (rows - 1) // per * per
    return start, rows - start


def _fletcher32(chunk: np.ndarray) -> bytes:
    """The 4 checksum bytes HDF5 appends to ``chunk`` (a whole chunk) with the fletcher32 filter."""
    with h5py.File(io.BytesIO(), "w") as f:
        ds = f.create_dataset("c", data=chunk, chunks=chunk.shape, fletcher32=True)
        return ds.id.read_direct_chunk((0,) * chunk.ndim)[1][-4:]


def _verified_chunk(ds: h5py.Dataset) -> tuple[tuple[int, ...], np.ndarray, bytes] | None:
    """The last chunk as of the last flush (offset, rows, raw bytes with checksum) when its raw
    bytes hold a torn rewrite of it; None when it is not torn that way."""
    where = _last_chunk(ds)
    if where is None:
        return None
    start, k = where
    offset = (start,) + (0,) * (ds.ndim - 1)
    try:
        mask, raw = ds.id.read_direct_chunk(offset)
    except (OSError, KeyError, ValueError):
        return None
    chunk = np.full(ds.chunks, ds.fillvalue, dtype=ds.dtype)
    row_bytes = chunk[0].nbytes if chunk.ndim > 1 else chunk.itemsize
    if mask != 0 or len(raw) != chunk.nbytes + 4:
        return None
    chunk[:k] = np.frombuffer(raw, dtype=ds.dtype, count=k * row_bytes // chunk.itemsize).reshape(
        (k, *ds.chunks[1:])
    )
    stored = bytes(raw[-4:])
    if _fletcher32(chunk) != stored:
        return None
    return offset, chunk[:k], chunk.tobytes() + stored


def read_rows(ds: h5py.Dataset) -> np.ndarray:
    """``ds[()]``; when the last chunk fails its checksum because a kill tore it, its flushed rows
    verified against the stored checksum (module docstring). Any other read error is raised."""
    try:
        return ds[()]
    except OSError:
        got = _verified_chunk(ds)
        if got is None:
            raise
        start = got[0][0]
        head = ds[:start] if start else np.empty((0, *ds.shape[1:]), ds.dtype)
        return np.concatenate([head, got[1]])


def repair_torn(f: h5py.File) -> list[str]:
    """Write back every verified torn last chunk of ``f`` (opened ``r+``, not in SWMR mode);
    returns the names of the series repaired."""
    fixed: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset) or _last_chunk(obj) is None:
            return
        start = _last_chunk(obj)[0]  # type: ignore[index]
        try:
            obj[start:]
        except OSError:
            got = _verified_chunk(obj)
            if got is not None:
                obj.id.write_direct_chunk(got[0], got[2])
                fixed.append(name)

    f.visititems(visit)
    return fixed
