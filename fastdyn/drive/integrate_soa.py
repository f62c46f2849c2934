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
bit-identical output. :func:`advance_dopri5` does the same with adaptive Dormand–Prince 5(4),
each task with its own step size and step counters in caller-owned arrays (the controller and
output-time clipping of the lane-vectorised dopri5, so segments and resumes continue the same step
sequence).

The kernels are specialised per model (the model's functions are compile-time arguments), so they
are not cached on disk (``cache=False``); a model may bring its own cached, lane-vectorised
integrators as its fast path instead (an ``OdeSetup`` of its own).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..core import stop_flag
from ..core.steppers import (
    DP_A21,
    DP_A31,
    DP_A32,
    DP_A41,
    DP_A42,
    DP_A43,
    DP_A51,
    DP_A52,
    DP_A53,
    DP_A54,
    DP_A61,
    DP_A62,
    DP_A63,
    DP_A64,
    DP_A65,
    DP_B,
    DP_E,
    DP_ORDER_EST,
    MAX_FACTOR,
    MIN_FACTOR,
    SAFETY,
)
from ..reduce import BLOCK

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


# ---- adaptive Dormand–Prince 5(4) per task -------------------------------------------------------

#: rows of the per-task counters of :func:`advance_dopri5` (a caller-owned (3, n) int64 array):
#: accepted and rejected steps, and 1 for a task that failed (0 otherwise), so each row sums to a
#: run's count
COUNT_ACCEPTED, COUNT_REJECTED, COUNT_FAILED = 0, 1, 2


@njit(**_FLAGS)
def _rms(a):
    s = 0.0
    for r in range(a.shape[0]):
        s += a[r] * a[r]
    return np.sqrt(s / a.shape[0])


@njit(**_FLAGS)
def _initial_step(rhs, p, y, k1, yt, kt, rtol, atol):
    """Hairer's starting step (HNW I §II.4; ``hinit`` of dopri5.f) with the norm-wise scale
    sc = atol + rtol·‖y0‖: d0 = ‖y0‖/sc, d1 = ‖f0‖/sc, h0 = 0.01·d0/d1 (1e-6 if either < 1e-5),
    d2 = ‖f(y0 + h0 f0) − f0‖/(sc·h0), h1 = (0.01/max(d1, d2))^(1/5) (max(1e-6, 1e-3 h0) if
    max(d1, d2) ≤ 1e-15); h = min(100 h0, h1). One extra evaluation of rhs (into kt)."""
    sc = atol + rtol * _rms(y)
    d0 = _rms(y) / sc if sc > 0.0 else 0.0
    d1 = _rms(k1) / sc if sc > 0.0 else 0.0
    h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
    for r in range(y.shape[0]):
        yt[r] = y[r] + h0 * k1[r]
    rhs(p, yt, kt)
    s = 0.0
    for r in range(y.shape[0]):
        e = kt[r] - k1[r]
        s += e * e
    d2 = np.sqrt(s / y.shape[0]) / (sc * h0) if sc > 0.0 else 0.0
    dm = max(d1, d2)
    h1 = max(1e-6, 1e-3 * h0) if not (dm > 1e-15) else (0.01 / dm) ** (1.0 / (DP_ORDER_EST + 1))
    return min(100.0 * h0, h1)


@njit(**_FLAGS)
def _dp_block(
    b, rhs, observe, loss, params, y, h, counts, t0, times, rtol, atol, max_steps, tpos,
    test_part, train_part, f_track, stop,
):  # fmt: skip
    n = y.shape[1]
    ns, kp, nt = y.shape[0], params.shape[0], times.shape[0]
    lo, hi = b * BLOCK, min(b * BLOCK + BLOCK, n)
    p, yy, yt, yn, er = np.empty(kp), np.empty(ns), np.empty(ns), np.empty(ns), np.empty(ns)
    k1, k2, k3, k4 = np.empty(ns), np.empty(ns), np.empty(ns), np.empty(ns)
    k5, k6, k7 = np.empty(ns), np.empty(ns), np.empty(ns)
    expo = -1.0 / (DP_ORDER_EST + 1)
    for i in range(lo, hi):
        for r in range(kp):
            p[r] = params[r, i]
        for r in range(ns):
            yy[r] = y[r, i]
        nacc, nrej, failed = (
            counts[COUNT_ACCEPTED, i],
            counts[COUNT_REJECTED, i],
            counts[COUNT_FAILED, i],
        )
        t = t0
        hs = h[i]
        rej_before = False
        rhs(p, yy, k1)
        if failed == 0 and not (hs > 0.0):
            hs = _initial_step(rhs, p, yy, k1, yt, k2, rtol, atol)
        rmsy = _rms(yy)
        for j in range(nt):
            if stop[0] != 0 or stop[1] != 0:  # a signal / another task's step limit: give up
                return
            tj = times[j]
            while failed == 0 and t < tj:
                if stop[0] != 0 or stop[1] != 0:
                    return
                if nacc >= max_steps:  # the budget is used up with an output time ahead
                    counts[COUNT_ACCEPTED, i], counts[COUNT_REJECTED, i] = nacc, nrej
                    counts[COUNT_FAILED, i] = 1
                    h[i] = hs
                    stop[1] = 1  # the run fails at once: every block gives up
                    return
                clipped = hs >= tj - t
                hh = tj - t if clipped else hs
                if t + hh == t:  # the step is below the resolution of t
                    failed = 1
                    break
                for r in range(ns):
                    yt[r] = yy[r] + hh * (DP_A21 * k1[r])
                rhs(p, yt, k2)
                for r in range(ns):
                    yt[r] = yy[r] + hh * (DP_A31 * k1[r] + DP_A32 * k2[r])
                rhs(p, yt, k3)
                for r in range(ns):
                    yt[r] = yy[r] + hh * (DP_A41 * k1[r] + DP_A42 * k2[r] + DP_A43 * k3[r])
                rhs(p, yt, k4)
                for r in range(ns):
                    yt[r] = yy[r] + hh * (
                        DP_A51 * k1[r] + DP_A52 * k2[r] + DP_A53 * k3[r] + DP_A54 * k4[r]
                    )
                rhs(p, yt, k5)
                for r in range(ns):
                    yt[r] = yy[r] + hh * (
                        DP_A61 * k1[r] + DP_A62 * k2[r] + DP_A63 * k3[r] + DP_A64 * k4[r]
                        + DP_A65 * k5[r]
                    )  # fmt: skip
                rhs(p, yt, k6)
                for r in range(ns):
                    yn[r] = yy[r] + hh * (
                        DP_B[0] * k1[r] + DP_B[2] * k3[r] + DP_B[3] * k4[r] + DP_B[4] * k5[r]
                        + DP_B[5] * k6[r]
                    )  # fmt: skip
                rhs(p, yn, k7)
                for r in range(ns):
                    er[r] = hh * (
                        DP_E[0] * k1[r] + DP_E[2] * k3[r] + DP_E[3] * k4[r] + DP_E[4] * k5[r]
                        + DP_E[5] * k6[r] + DP_E[6] * k7[r]
                    )  # fmt: skip
                rmsn = _rms(yn)
                e = _rms(er)
                sc = atol + rtol * max(rmsy, rmsn)
                err = 0.0 if e == 0.0 else (np.inf if sc == 0.0 else e / sc)
                if err <= 1.0:
                    fac = MAX_FACTOR if err == 0.0 else min(MAX_FACTOR, SAFETY * err**expo)
                    if rej_before:
                        fac = min(1.0, fac)
                    hnew = hh * fac
                    t = tj if clipped else t + hh
                    # a step shortened to land on t_j keeps the larger of its own proposal and
                    # the step it replaced (as the lane-vectorised dopri5): outputs do not shrink the steps
                    hs = max(hnew, hs) if clipped else hnew
                    yy, yn = yn, yy
                    k1, k7 = k7, k1
                    rmsy = rmsn
                    rej_before = False
                    nacc += 1
                else:
                    fr = MIN_FACTOR if not (err < np.inf) else max(MIN_FACTOR, SAFETY * err**expo)
                    hs = hh * fr
                    rej_before = True
                    nrej += 1
            te, tr = loss(p, yy)
            test_part[b, j] += te
            train_part[b, j] += tr
            if tpos[i] >= 0:
                f_track[tpos[i], j] = observe(p, yy)
        for r in range(ns):
            y[r, i] = yy[r]
        h[i] = hs
        counts[COUNT_ACCEPTED, i], counts[COUNT_REJECTED, i] = nacc, nrej
        counts[COUNT_FAILED, i] = failed


@njit(parallel=True, **_FLAGS)
def _dp_kernel(
    rhs, observe, loss, params, y, h, counts, t0, times, rtol, atol, max_steps, tpos, test_part,
    train_part, f_track, stop,
):  # fmt: skip
    for b in prange((y.shape[1] + BLOCK - 1) // BLOCK):
        _dp_block(
            np.int64(b), rhs, observe, loss, params, y, h, counts, t0, times, rtol, atol,
            max_steps, tpos, test_part, train_part, f_track, stop,
        )  # fmt: skip


def advance_dopri5(
    rhs, observe, loss, params: np.ndarray, y: np.ndarray, h: np.ndarray, counts: np.ndarray,
    t0: float, times: np.ndarray, rtol: float, atol: float, max_steps: int,
    local_track: np.ndarray, test_partials: np.ndarray, train_partials: np.ndarray,
    f_track: np.ndarray,
) -> None:  # fmt: skip
    """Advance ``y`` (n_state, n; in place) from ``t0`` through ``times`` with adaptive
    Dormand–Prince 5(4), each task with its own steps; loss partials and tracked f as
    :func:`advance_rk4`.

    Per task: the 5th-order solution is propagated (FSAL: k7 = rhs(y_new) is the next k1), the
    error estimate is err = h Σ_i E_i k_i (E = B − B̂) with the norm-wise scaled norm
    ‖err‖ / (atol + rtol·max(‖y‖, ‖y_new‖)), ‖·‖ the RMS over the n_state components; a step is
    accepted iff that is ≤ 1, and the next step is h·clip(0.9·err^(−1/5), 0.2, 10) (no growth
    right after a rejection; 0.2 for a non-finite err): the lane-vectorised dopri5's
    (:func:`fastdyn.core.steppers.dopri5_controller`). A step
    that would pass the next output time t_j is shortened to land on it exactly, and after it
    the larger of its own proposal and the unshortened step is kept.

    Caller-owned per-task state, updated in place, so that a run cut into segments (each call
    starting at the last one's final time) is bit-identical to one call: ``h`` (n,) float64, the
    next step (≤ 0 or NaN: choose one, Hairer's heuristic :func:`_initial_step`); ``counts``
    (3, n) int64, rows :data:`COUNT_ACCEPTED`, :data:`COUNT_REJECTED` (steps, cumulative) and
    :data:`COUNT_FAILED` (1 for a task that failed, else 0).

    A task that has made ``max_steps`` accepted steps (cumulative) with an output time still
    ahead fails the run at once, as the lane-vectorised dopri5: its counters are stored (failed = 1),
    ``stop_flag.FLAG[1]`` is set and every block returns with its outputs incomplete
    (:func:`fastdyn.core.stop_flag.halted`; the ODE driver then reports
    ``failure(summary(state))``). A task whose step falls below the resolution of t stops
    (failed = 1, no halt); its state and outputs stay frozen, in this and later calls. Blocks
    run in ``prange`` and poll the stop flag before every step and output time; a task's
    arithmetic does not depend on its neighbours, so 1 and N threads give bit-identical results.

    Not cached on disk (``cache=False``), like :func:`advance_rk4`: the model's functions are
    compile-time arguments, so each model compiles its own kernel once per process (≈ 3 s).
    ``cache=True`` does not help (numba 0.68, measured): the cache key of a dispatcher argument
    holds the address of its Python function, so a new process never hits the cache and adds one
    more entry to it on every start.
    """
    times = np.ascontiguousarray(times, dtype=np.float64)
    if not (np.isfinite(rtol) and rtol > 0 and np.isfinite(atol) and atol >= 0):
        raise ValueError(f"rtol/atol: need rtol > 0 and atol ≥ 0, got {rtol!r}, {atol!r}")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps: must be ≥ 1, got {max_steps!r}")
    if times.size and (times[0] < t0 or np.any(np.diff(times) <= 0)):
        raise ValueError("times: must be increasing and ≥ t0")
    n = y.shape[1]
    if h.shape != (n,) or h.dtype != np.float64:
        raise ValueError(f"h: must be a float64 array of shape ({n},), got {h.dtype} {h.shape}")
    if counts.shape != (3, n) or counts.dtype != np.int64:
        raise ValueError(
            f"counts: must be an int64 array of shape (3, {n}), got {counts.dtype} {counts.shape}"
        )
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[np.asarray(local_track, dtype=np.int64)] = np.arange(len(local_track))
    stop_flag.clear_halt()
    _dp_kernel(
        rhs, observe, loss, params, y, h, counts, float(t0), times, float(rtol), float(atol),
        np.int64(max_steps), tpos, test_partials, train_partials, f_track, stop_flag.FLAG,
    )  # fmt: skip
