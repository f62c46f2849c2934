"""Device memory that lives across kernel calls, for the numba.cuda twins (docs/cuda.md).

- :func:`resident` — the device copy of a host array that does not change (per-task parameters,
  training data): copied once per host array object. A weak reference tells a new array from the
  same one, and the copy is freed when the host array is (the ``id()``-keyed cache this replaces
  could hand back a dead array's copy to a new array at the same address, and never freed any).
  The host array must not be changed in place while in use; fastdyn's drivers never do.
- :func:`buffer` / :func:`to_device` — a named scratch array reused across calls and reallocated
  only when its shape or dtype changes (no allocation per step or per segment).

Each owner (a twin module) passes its own ``space`` name, so two twins never share a buffer.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

_resident: dict[tuple[str, str], tuple[weakref.ref, Any]] = {}
_buffers: dict[tuple[str, str], Any] = {}


def resident(space: str, name: str, host: np.ndarray) -> Any:
    """The device copy of the constant host array ``host`` (copied once per array object)."""
    from numba import cuda

    key = (space, name)
    got = _resident.get(key)
    if got is not None and got[0]() is host:
        return got[1]
    _resident.pop(key, None)  # free the old copy before allocating the new one
    d = cuda.to_device(np.ascontiguousarray(host))
    _resident[key] = (weakref.ref(host, lambda r, key=key: _forget(key, r)), d)
    return d


def _forget(key: tuple[str, str], ref: weakref.ref) -> None:
    """The host array behind ``ref`` is gone: free its copy (unless a newer array took the slot)."""
    got = _resident.get(key)
    if got is not None and got[0] is ref:
        del _resident[key]


def buffer(space: str, name: str, shape: tuple[int, ...], dtype: Any = np.float64) -> Any:
    """A device array of ``shape``, reused by every call that asks for the same name and shape."""
    from numba import cuda

    key = (space, name)
    d = _buffers.get(key)
    if d is None or tuple(d.shape) != tuple(shape) or d.dtype != np.dtype(dtype):
        _buffers.pop(key, None)
        d = cuda.device_array(shape, dtype=dtype)
        _buffers[key] = d
    return d


def to_device(space: str, name: str, host: np.ndarray) -> Any:
    """``host`` copied into the reusable buffer ``name`` (same shape and dtype)."""
    d = buffer(space, name, host.shape, host.dtype)
    d.copy_to_device(np.ascontiguousarray(host))
    return d


def release() -> None:
    """Drop every cached device array (they are freed once no kernel call holds them)."""
    _resident.clear()
    _buffers.clear()
