"""Checked arguments of the MSFR closed-form kernels, shared by the CPU kernels (``theory.py``)
and their CUDA twins (``theory_cuda.py``), so neither imports the other's module for them."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..._jit import SERIAL
from ...reduce import BLOCK, n_blocks
from ._closed_form import EXACT, FIRST_ORDER, LEADING

LEVELS: dict[str, int] = {"leading": LEADING, "first_order": FIRST_ORDER, "exact": EXACT}


def _level_code(level: str) -> int:
    try:
        return LEVELS[level]
    except (KeyError, TypeError):
        allowed = ", ".join(repr(k) for k in LEVELS)
        raise ValueError(f"level must be one of {allowed}, got {level!r}") from None


def _times(times) -> np.ndarray:
    t = np.ascontiguousarray(times, dtype=np.float64)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"times must be a non-empty 1-d array, got shape {t.shape}")
    if not np.all(np.isfinite(t)) or t[0] < 0.0:
        raise ValueError("times must be finite and ≥ 0")
    if np.any(np.diff(t) < 0.0):
        raise ValueError("times must be non-decreasing")
    return t


@njit(**SERIAL)
def _count_bad(x, lo, hi, out):
    """out += (non-finite, finite ≤ 0, finite < 0) counts of x[lo:hi], branch free (integer
    counts: the loop vectorises and runs at memory speed). The loop runs over the slice from 0:
    an index lo + j that LLVM cannot prove ≥ 0 keeps numba's negative-index wraparound, and the
    loads become gathers."""
    nf = 0
    le = 0
    lt = 0
    xb = x[lo:hi]
    for i in range(hi - lo):
        v = xb[i]
        fin = (v - v) == 0.0  # false for ±inf and NaN
        nf += 0 if fin else 1
        le += 1 if fin & (v <= 0.0) else 0
        lt += 1 if fin & (v < 0.0) else 0
    out[0] += nf
    out[1] += le
    out[2] += lt


#: bits of each count in :func:`_bad_code`: a block has fewer than 2^20 tasks
_FIELD = 20
if BLOCK >= 1 << _FIELD:  # a count of 2^20 would carry into the next one
    raise ImportError(f"reduce.BLOCK = {BLOCK} needs more than {_FIELD} bits a count in _bad_code")


@njit(**SERIAL, inline="always")
def _bad_code(v):
    """(non-finite, finite ≤ 0, finite < 0) of one value (see :func:`_count_bad`) as one integer,
    a count per ``_FIELD`` bits, so that a sum of codes is the three counts."""
    fin = (v - v) == 0.0  # false for ±inf and NaN
    nf = 0 if fin else 1
    le = 1 if fin & (v <= 0.0) else 0
    lt = 1 if fin & (v < 0.0) else 0
    return nf + (le << _FIELD) + (lt << (2 * _FIELD))


@njit(**SERIAL)
def block_is_valid(lam, psi, rate, v0x, v0y, w0x, w0y, lo, hi, out):
    """The counts of :func:`_bad_counts` for tasks lo … hi−1 (fewer than 2^20) into ``out`` (7 × 3);
    True iff every value is finite, ψ > 0 and rate ≥ 0 there. A kernel calls it on each block
    before computing it, so the values are checked while they are in cache. One loop reads the
    seven arrays together, so their cache misses overlap (seven loops one after the other: 3.4
    instead of 1.8 ns per task on the AMD EPYC, bench/closed_form_parts.py)."""
    # the block's slices, indexed from 0 (see _count_bad: no wraparound, no gathers)
    a0, a1, a2, a3 = lam[lo:hi], psi[lo:hi], rate[lo:hi], v0x[lo:hi]
    a4, a5, a6 = v0y[lo:hi], w0x[lo:hi], w0y[lo:hi]
    c0 = c1 = c2 = c3 = c4 = c5 = c6 = 0
    for j in range(hi - lo):
        c0 += _bad_code(a0[j])
        c1 += _bad_code(a1[j])
        c2 += _bad_code(a2[j])
        c3 += _bad_code(a3[j])
        c4 += _bad_code(a4[j])
        c5 += _bad_code(a5[j])
        c6 += _bad_code(a6[j])
    mask = (1 << _FIELD) - 1
    for a, c in enumerate((c0, c1, c2, c3, c4, c5, c6)):
        for k in range(3):
            out[a, k] = (c >> (k * _FIELD)) & mask
    ok = out[1, 1] == 0 and out[2, 2] == 0
    for a in range(7):
        ok = ok and out[a, 0] == 0
    return ok


@njit(**SERIAL)
def _bad_counts(a0, a1, a2, a3, a4, a5, a6):
    """Row k: (non-finite, finite ≤ 0, finite < 0) entries of array ak, in one serial pass each
    at memory speed (7 × 10^6 values in ≈ 6 ms). A parallel pass compiled for 1.3 s on a first
    run, to save ≈ 0.3 s on a 10^8-task table."""
    n = a0.shape[0]
    out = np.zeros((7, 3), dtype=np.int64)
    _count_bad(a0, 0, n, out[0])
    _count_bad(a1, 0, n, out[1])
    _count_bad(a2, 0, n, out[2])
    _count_bad(a3, 0, n, out[3])
    _count_bad(a4, 0, n, out[4])
    _count_bad(a5, 0, n, out[5])
    _count_bad(a6, 0, n, out[6])
    return out


def _task_arrays(**arrays) -> tuple[int, list[np.ndarray]]:
    """The per-task arrays as contiguous float64, checked for shape only."""
    out = []
    n = None
    for name, a in arrays.items():
        x = np.ascontiguousarray(a, dtype=np.float64)
        if x.ndim != 1:
            raise ValueError(f"{name} must be a 1-d per-task array, got shape {x.shape}")
        if n is None:
            n = x.shape[0]
        elif x.shape[0] != n:
            raise ValueError(f"{name} has {x.shape[0]} tasks, expected {n} (like the others)")
        out.append(x)
    return int(n or 0), out


TASK_NAMES: tuple[str, ...] = ("lam", "psi", "rate", "v0x", "v0y", "w0x", "w0y")


def check_counts(counts: np.ndarray, names: tuple[str, ...] = TASK_NAMES) -> None:
    """ValueError naming the first bad array, from the (7, 3) counts of :func:`_bad_counts`."""
    for name, c in zip(names, counts, strict=True):
        if c[0]:
            raise ValueError(f"{name} must be finite for every task")
    if counts[names.index("psi")][1]:
        raise ValueError("psi must be > 0 for every task")
    if counts[names.index("rate")][2]:
        raise ValueError("rate must be ≥ 0 for every task")


def _tasks(**arrays) -> tuple[int, list[np.ndarray]]:
    n, out = _task_arrays(**arrays)
    check_counts(_bad_counts(*out), tuple(arrays))
    return n, out


def partials_args(
    times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, level, test_partials, train_partials, *,
    check_values: bool = True,
):  # fmt: skip
    """Checked arguments of :func:`loss_partials` (and its CUDA twin): (level code, times, the 7
    task arrays, wtest) as contiguous float64; ValueError naming the argument otherwise. With
    ``check_values=False`` the task values are left to the kernel (:func:`block_is_valid`)."""
    code = _level_code(level)
    t = _times(times)
    arrays = dict(lam=lam, psi=psi, rate=rate, v0x=v0x, v0y=v0y, w0x=w0x, w0y=w0y)
    n, arrs = _tasks(**arrays) if check_values else _task_arrays(**arrays)
    wt = np.ascontiguousarray(wtest, dtype=np.float64)
    if wt.shape != (n,):
        raise ValueError(f"wtest must be a 1-d array of {n} tasks, got shape {wt.shape}")
    shape = (n_blocks(n), t.shape[0])
    for name, p in (("test_partials", test_partials), ("train_partials", train_partials)):
        if (
            not isinstance(p, np.ndarray)
            or p.shape != shape
            or p.dtype != np.float64
            or not p.flags.c_contiguous
            or not p.flags.writeable
        ):
            raise ValueError(
                f"{name} must be a writeable C-contiguous float64 array of shape {shape}"
            )
    return code, t, arrs, wt
