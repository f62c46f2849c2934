"""④ Generic per-task integrators over structure-of-arrays state, for any ODE model.

A model gives three ``@njit`` functions of one task (p: its parameter column, y: its state):

- ``rhs(p, y, dy)``: writes dy/dt (gradient flow of the task's loss);
- ``observe(p, y) -> f``: the scalar recorded for tracked tasks;
- ``loss(p, y) -> (test_term, train_term)``: the task's contributions to L_test and L_train.

and its state ``y`` (n_state, n) and parameters ``params`` (k, n) as float64 arrays, task index
fastest. :func:`advance_rk4` takes every task through the output ``times`` with classical RK4 at a
fixed nominal step ``h`` (each interval [t_{j−1}, t_j] cut into ⌈Δt/h⌉ equal sub-steps, so every
task lands on every output time and a run cut into segments is bit-identical to an uncut one),
adding per-block partial sums (fixed order, :mod:`fastdyn.reduce`) of the loss terms at each output
time and writing f of the tracked tasks. Blocks run in parallel (``prange``); the arithmetic of a
task does not depend on its neighbours, so any thread count and any chunking by whole blocks give
bit-identical output.

The kernels are specialised per model (the model's functions are compile-time arguments), so they
are not cached on disk (``cache=False``): the MSFR model keeps its lane-vectorised, cached
integrators in :mod:`fastdyn.drive.integrate`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..reduce import BLOCK
from . import stop_flag

_FLAGS = {"cache": False, "nogil": True, "error_model": "numpy"}


@njit(**_FLAGS)
def _rk4_block(
    b, rhs, observe, loss, params, y, t0, times, h, tpos, test_part, train_part, f_track, stop
):
    n = y.shape[1]
    ns, kp = y.shape[0], params.shape[0]
    lo, hi = b * BLOCK, min(b * BLOCK + BLOCK, n)
    p, yy, yt = np.empty(kp), np.empty(ns), np.empty(ns)
    k1, k2, k3, k4 = np.empty(ns), np.empty(ns), np.empty(ns), np.empty(ns)
    for i in range(lo, hi):
        for r in range(kp):
            p[r] = params[r, i]
        for r in range(ns):
            yy[r] = y[r, i]
        prev = t0
        for j in range(times.shape[0]):
            if stop[0] != 0:  # a stop request: return with the block's outputs incomplete
                return
            dt = times[j] - prev
            prev = times[j]
            if dt > 0.0:
                m = np.ceil(dt / h)
                hh = dt / m
                for _ in range(int(m)):
                    rhs(p, yy, k1)
                    for r in range(ns):
                        yt[r] = yy[r] + 0.5 * hh * k1[r]
                    rhs(p, yt, k2)
                    for r in range(ns):
                        yt[r] = yy[r] + 0.5 * hh * k2[r]
                    rhs(p, yt, k3)
                    for r in range(ns):
                        yt[r] = yy[r] + hh * k3[r]
                    rhs(p, yt, k4)
                    for r in range(ns):
                        yy[r] = yy[r] + hh / 6.0 * (k1[r] + 2.0 * k2[r] + 2.0 * k3[r] + k4[r])
            te, tr = loss(p, yy)
            test_part[b, j] += te
            train_part[b, j] += tr
            if tpos[i] >= 0:
                f_track[tpos[i], j] = observe(p, yy)
        for r in range(ns):
            y[r, i] = yy[r]


@njit(parallel=True, **_FLAGS)
def _rk4_kernel(
    rhs, observe, loss, params, y, t0, times, h, tpos, test_part, train_part, f_track, stop
):
    for b in prange((y.shape[1] + BLOCK - 1) // BLOCK):
        _rk4_block(
            np.int64(b), rhs, observe, loss, params, y, t0, times, h, tpos, test_part, train_part, f_track,
            stop,
        )  # fmt: skip


def advance_rk4(
    rhs, observe, loss, params: np.ndarray, y: np.ndarray, t0: float, times: np.ndarray, h: float,
    local_track: np.ndarray, test_partials: np.ndarray, train_partials: np.ndarray, f_track: np.ndarray,
) -> None:  # fmt: skip
    """Advance ``y`` (n_state, n; in place) from ``t0`` through ``times`` with RK4 at nominal step
    ``h``; add the loss terms' block partials into ``test_partials``/``train_partials`` (n_blocks(n),
    T) and write f of the tasks ``local_track`` (chunk-local indices) into ``f_track`` (len, T)."""
    times = np.ascontiguousarray(times, dtype=np.float64)
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"h: the nominal step must be a finite number > 0, got {h!r}")
    if times.size and (times[0] < t0 or np.any(np.diff(times) <= 0)):
        raise ValueError("times: must be increasing and ≥ t0")
    n = y.shape[1]
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[np.asarray(local_track, dtype=np.int64)] = np.arange(len(local_track))
    _rk4_kernel(
        rhs,
        observe,
        loss,
        params,
        y,
        float(t0),
        times,
        float(h),
        tpos,
        test_partials,
        train_partials,
        f_track,
        stop_flag.FLAG,
    )
