"""Bootstrap resampling kernels: counter-based indices and the per-resample line fit.

Resample ``b`` of a bootstrap with seed ``seed`` over ``m`` items draws its k-th index as

    i_{b,k} = floor(m * U_{b,k}),   U_{b,k} = 53-bit uniform of mix64(key(seed, b, STREAM) + k G)

(the counter RNG of :mod:`fastdyn.problems.rng`, G its golden-ratio increment), clamped to m - 1
against rounding. Every index is a pure function of (seed, b, k): results do not depend on the
chunking of resamples or on the number of threads (each resample is computed whole, in order k =
0..m-1, by one thread), and :func:`indices` reproduces exactly the draws the fast kernels use.

Kernels:
* :func:`indices` (n_boot, m) int64 and :func:`counts` (n_boot, m) float64 resampling counts;
* :func:`line_fits`: for each resample, the weighted least-squares line v = a + b u over the drawn
  pairs (one resample's counts at a time, its 5 moments, then the 2x2 normal equations; no
  (n_boot, m) counts matrix).
"""

from __future__ import annotations

import numpy as np
from numba import float64, int64, njit, prange, uint64

from .._jit import PARALLEL, SERIAL
from ..problems.rng import key, mix64
from ..reduce import lane_dot

__all__ = ["STREAM_BOOTSTRAP", "indices", "counts", "line_fits", "check_seed"]

#: stream id of bootstrap resampling (problems/rng.py uses 1..4 for model draws)
STREAM_BOOTSTRAP = 0xB0075
_GOLDEN = 0x9E3779B97F4A7C15
_INV53 = 1.0 / 9007199254740992.0  # 2**-53


def check_seed(seed: object) -> int:
    """A bootstrap seed must be an integer in [0, 2^63)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2^63), got seed={seed!r}")
    return int(seed)


@njit(**SERIAL)
def _index(kb, k, m):
    """k-th index in [0, m) of the resample whose key is kb."""
    z = mix64(kb + uint64(k) * uint64(_GOLDEN))
    # int64 first: a signed int -> double conversion is one instruction, an unsigned one is not
    i = int64((float64(int64(z >> uint64(11))) + 0.5) * (_INV53 * m))
    return i if i < m else m - 1


@njit(**SERIAL)
def _indices_one(kb, out_row):
    m = out_row.shape[0]
    for k in range(m):
        out_row[k] = _index(kb, k, m)


@njit(**SERIAL)
def _counts_one(kb, out_row):
    m = out_row.shape[0]
    for k in range(m):
        out_row[_index(kb, k, m)] += 1.0


@njit(**SERIAL)
def _moments(c, qt, out):
    """out[j] = sum_i c[i] qt[j, i] for the 5 moment rows (:func:`fastdyn.reduce.lane_dot`: a
    fixed order, so deterministic, and not bound by the latency of one add chain)."""
    for j in range(5):
        out[j] = lane_dot(c, qt[j], c.shape[0])


@njit(**SERIAL)
def _line_one(kb, qt, rel_floor):
    """(a, b) of the weighted line through one resample (moments q = [w, wu, wv, wuu, wuv])."""
    m = qt.shape[1]
    # counting the draws (random increments in an m-array) is ~2x faster than gathering the
    # 5 moments of every drawn point (random reads in a 5m-array) once m * 40 B leaves L2
    c = np.zeros(m, dtype=np.float64)
    _counts_one(kb, c)
    s = np.empty(5)
    _moments(c, qt, s)
    s0, su, sv, suu, suv = s[0], s[1], s[2], s[3], s[4]
    mu = su / s0
    mv = sv / s0
    sxx = suu - s0 * mu * mu
    b = (suv - s0 * mu * mv) / sxx
    if not sxx / s0 > rel_floor:  # all drawn u (nearly) equal: no slope
        b = np.nan
    return mv - b * mu, b


# Each kernel twice: serial, and parallel over resamples (for large jobs; for small ones waking
# the thread pool costs more than the work). Both call the same per-resample function with the
# same key, so their outputs are identical.


@njit(**SERIAL)
def _indices_ser(seed, start, out):
    for r in range(out.shape[0]):
        _indices_one(key(seed, start + r, int64(STREAM_BOOTSTRAP)), out[r])


@njit(**PARALLEL)
def _indices_par(seed, start, out):
    for r in prange(out.shape[0]):
        _indices_one(key(seed, start + r, int64(STREAM_BOOTSTRAP)), out[r])


@njit(**SERIAL)
def _counts_ser(seed, start, out):
    for r in range(out.shape[0]):
        _counts_one(key(seed, start + r, int64(STREAM_BOOTSTRAP)), out[r])


@njit(**PARALLEL)
def _counts_par(seed, start, out):
    for r in prange(out.shape[0]):
        _counts_one(key(seed, start + r, int64(STREAM_BOOTSTRAP)), out[r])


@njit(**SERIAL)
def _line_fits_ser(seed, start, qt, rel_floor, a_out, b_out):
    for r in range(a_out.shape[0]):
        a_out[r], b_out[r] = _line_one(key(seed, start + r, int64(STREAM_BOOTSTRAP)), qt, rel_floor)


@njit(**PARALLEL)
def _line_fits_par(seed, start, qt, rel_floor, a_out, b_out):
    for r in prange(a_out.shape[0]):
        a_out[r], b_out[r] = _line_one(key(seed, start + r, int64(STREAM_BOOTSTRAP)), qt, rel_floor)


_KERNELS = {
    "indices": (_indices_ser, _indices_par),
    "counts": (_counts_ser, _counts_par),
    "line_fits": (_line_fits_ser, _line_fits_par),
}
_PARALLEL_WORK = 1 << 18  # draws (n_boot * m) from which the parallel kernel is used


def _kernel(name: str, n_boot: int, m: int):
    return _KERNELS[name][n_boot * m >= _PARALLEL_WORK]


def indices(seed: int, start: int, n_boot: int, m: int) -> np.ndarray:
    """The resampling indices of resamples start..start+n_boot-1, shape (n_boot, m)."""
    out = np.empty((n_boot, m), dtype=np.int64)
    _kernel("indices", n_boot, m)(np.int64(check_seed(seed)), start, out)
    return out


def counts(seed: int, start: int, n_boot: int, m: int) -> np.ndarray:
    """Resampling counts (how often each item is drawn), float64 (n_boot, m); rows sum to m."""
    out = np.zeros((n_boot, m), dtype=np.float64)
    _kernel("counts", n_boot, m)(np.int64(check_seed(seed)), start, out)
    return out


def line_fits(
    seed: int, start: int, n_boot: int, u: np.ndarray, v: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs bootstrap of the weighted line v = a + b u: (a, b) per resample, each (n_boot,).

    Same normal equations as the batched numpy solve (u, v centred by the caller for accuracy);
    a resample whose drawn u have (relative) variance <= 1e-12 var(u) gets b = NaN.
    """
    u = np.ascontiguousarray(u, dtype=np.float64)
    v = np.ascontiguousarray(v, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    qt = np.ascontiguousarray(np.stack([w, w * u, w * v, w * u * u, w * u * v], axis=0))
    a = np.empty(n_boot)
    b = np.empty(n_boot)
    rel = 1e-12 * max(1.0, float(np.var(u)))
    kern = _kernel("line_fits", n_boot, qt.shape[1])
    kern(np.int64(check_seed(seed)), start, qt, rel, a, b)
    return a, b
