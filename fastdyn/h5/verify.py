"""Checksums on the data of every dataset: what the writer records and what readers check.

Every array with at least one element is stored chunked with HDF5's Fletcher32 filter, written at
the start (static arrays, axes) or at the close (final weights, theory levels) alike: HDF5 checks
each chunk on every read, by any HDF5 reader. HDF5 allows no filter on a scalar dataset, so a
scalar (and an empty array, and an array over :data:`ONE_CHUNK` written at the close) carries
the CRC-32 of its bytes (zlib's, as stored: dtype, C order) in the attribute :data:`CRC_ATTR`
instead, which :func:`read_verified` checks. A flipped bit in
either fails the read with :class:`DamagedData` naming the dataset.

Files written before this carry neither on their datasets written at the close nor on their
scalars; those are read unchecked (docs/reliability.md).
"""

from __future__ import annotations

import zlib
from typing import Any

import h5py
import numpy as np

from .torn import read_rows

#: the dataset attribute holding the CRC-32 of a scalar's (or an empty array's) bytes
CRC_ATTR = "crc32"


class DamagedData(ValueError):
    """The data of a dataset fails its checksum, or cannot be read (one-line message naming it)."""


def filterable(value: np.ndarray) -> bool:
    """Whether ``value`` can be stored with the Fletcher32 filter: an array of at least one
    element of a fixed-size type (HDF5 refuses filters on scalars; on variable-length data the
    filter would cover only the heap references)."""
    return bool(value.ndim and value.size) and value.dtype.kind not in "OU"


def _bytes(value: Any) -> bytes:
    """The bytes a checksum covers: numbers as stored (their dtype, C order); text as UTF-8."""
    a = np.asarray(value)
    if a.dtype.kind != "O":
        return np.ascontiguousarray(a).tobytes()
    return b"\0".join(x.encode() if isinstance(x, str) else bytes(x) for x in a.ravel())


def data_crc(value: Any) -> int:
    """CRC-32 (zlib) of ``value``'s bytes, as :data:`CRC_ATTR` records it."""
    return zlib.crc32(_bytes(value))


def read_verified(ds: h5py.Dataset) -> np.ndarray:
    """``ds[()]`` with its checksum verified: the Fletcher32 of every chunk (a series' last chunk
    torn by a kill: its flushed rows, see :func:`fastdyn.h5.torn.read_rows`), else the CRC-32 of
    :data:`CRC_ATTR` where the dataset carries one. DamagedData names ``ds`` when either fails."""
    try:
        value = read_rows(ds)
    except OSError as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "filter" in why and ds.fletcher32:
            why = "its data does not match its Fletcher32 checksum: a flipped bit or a damaged disk"
        raise DamagedData(f"dataset {ds.name}: {why}") from None
    if CRC_ATTR in ds.attrs:
        stored = int(np.asarray(ds.attrs[CRC_ATTR]).item())
        if data_crc(value) != stored:
            raise DamagedData(
                f"dataset {ds.name}: its data does not match its checksum ({CRC_ATTR} attribute): a flipped bit or a damaged disk"
            )
    return value


#: the largest array stored as one Fletcher32 chunk once the file is in SWMR-write mode, bytes
#: (HDF5 allows chunks below 4 GiB); a larger one there carries :data:`CRC_ATTR` instead
ONE_CHUNK = 1 << 30


def create_checked(f: h5py.File | h5py.Group, name: str, data: Any) -> h5py.Dataset:
    """Dataset ``name`` holding ``data`` (dtype, shape and bytes unchanged) with a checksum:
    chunked with Fletcher32 where :func:`filterable`, else the :data:`CRC_ATTR` attribute.

    Once the file is in SWMR-write mode (the datasets written at the close) an array is stored
    as one chunk: HDF5 (2.0.0, bundled with h5py 3.16) fails to close a file in which a dataset
    of several chunks (a fixed array chunk index) was created in SWMR mode and then given a
    dimension scale (``Can't decrement id ref count``, or a segfault); one chunk needs no index."""
    value = np.asarray(data)
    if filterable(value):
        if not f.file.swmr_mode:
            return f.create_dataset(name, data=data, fletcher32=True)
        if value.nbytes <= ONE_CHUNK:
            return f.create_dataset(name, data=data, chunks=value.shape, fletcher32=True)
    ds = f.create_dataset(name, data=data)
    ds.attrs[CRC_ATTR] = np.uint32(data_crc(ds[()]))
    return ds
