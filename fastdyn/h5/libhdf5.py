"""The copy of libhdf5 that h5py has loaded, for the few calls fastdyn makes through ctypes.

h5py does not wrap everything (``H5Pset_metadata_read_attempts``), and each of its low-level
calls costs a few µs of Python around the C call (an appended row set of eight series spends
≈ 4× more in h5py than in HDF5). Ids (files, datasets, property lists) mean nothing to a second
copy of the library, so only the copy already in this process is used: found in
``/proc/self/maps`` (or among h5py's bundled libraries) and checked by reading back, through
ctypes, a property that h5py set.

The handle is a :class:`ctypes.PyDLL`: calls keep the GIL, as h5py's own do, so that an
exception raised inside h5py's file-object driver during a call (a failed read) is raised when
the call returns. Callers hold h5py's lock (:data:`phil`) around their calls, as h5py does: this
HDF5 is not built thread-safe.
"""

from __future__ import annotations

import ctypes
import functools
import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import h5py

try:  # h5py's global lock around every HDF5 call (private; where missing, h5py has none)
    from h5py._objects import phil as _phil
except ImportError:  # pragma: no cover - every h5py 3 has it
    _phil = None


def phil() -> AbstractContextManager:
    """h5py's lock, to hold around direct HDF5 calls (a no-op where h5py has none)."""
    return _phil if _phil is not None else nullcontext()


def _candidates() -> list[str]:
    cands: list[str] = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                name = os.path.basename(path)
                if (
                    name.startswith("libhdf5")
                    and not name.startswith("libhdf5_hl")
                    and ".so" in name
                    and path not in cands
                ):
                    cands.append(path)
    except OSError:  # no /proc (macOS): the libraries bundled with h5py
        base = Path(h5py.__file__).parent
        cands = [
            str(q)
            for d in (base / ".dylibs", base.parent / "h5py.libs")
            if d.is_dir()
            for q in sorted(d.iterdir())
            if q.name.startswith("libhdf5") and not q.name.startswith("libhdf5_hl")
        ]
    return cands


@functools.cache
def library() -> ctypes.PyDLL | None:
    """The libhdf5 h5py uses (module docstring), or None where it cannot be found."""
    probe = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    probe.set_sieve_buf_size(54321)  # a value only h5py's own copy of the library can report back
    for path in _candidates():
        try:
            lib = ctypes.PyDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL)
            valid, sieve = lib.H5Iis_valid, lib.H5Pget_sieve_buf_size
        except (OSError, AttributeError):
            continue
        valid.argtypes, valid.restype = [ctypes.c_int64], ctypes.c_int
        sieve.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_size_t)]
        sieve.restype = ctypes.c_int
        got = ctypes.c_size_t(0)
        if valid(probe.id) > 0 and sieve(probe.id, ctypes.byref(got)) >= 0 and got.value == 54321:
            return lib
    return None
