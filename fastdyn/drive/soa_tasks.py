"""④ One task of the generic integrators, written once and compiled for the CPU and for CUDA.

:func:`rk4_task` and :func:`dopri5_task` are factories: given a model's three functions of one
task (``rhs(p, y, dy)``, ``observe(p, y) -> f``, ``loss(p, y) -> (test, train)``) and a compiler
(``numba.njit`` for the CPU blocks of :mod:`fastdyn.drive.integrate_soa`, ``cuda.jit(device=True)``
for the threads of :mod:`fastdyn.drive.integrate_soa_cuda`, with the model's functions compiled
the same way from their Python source, ``py_func``), they return the compiled step loop of one
task over a segment of output times. The arithmetic is the same source on both targets, so
nothing is retyped; the callers only load a task's column into scratch arrays (NumPy arrays on
the CPU, thread-local arrays on the GPU) and store the results.

Both write the task's loss terms at each output time into ``te``/``tr`` (length T) and, when
``track``, observe's value into ``f``; they return early, with a code, when ``stop[0]`` (a signal)
or ``stop[1]`` (another task used up its step budget) is set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

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

#: return codes of a task: finished the segment, stopped by a signal, used up its step budget
DONE, STOPPED, BUDGET = 0, 1, 2

# plain floats, so that both targets see compile-time constants
_B0, _B2, _B3, _B4, _B5 = (float(DP_B[i]) for i in (0, 2, 3, 4, 5))
_E0, _E2, _E3, _E4, _E5, _E6 = (float(DP_E[i]) for i in (0, 2, 3, 4, 5, 6))
_EXPO = -1.0 / (DP_ORDER_EST + 1)


def rk4_task(rhs: Any, observe: Any, loss: Any, jit: Callable) -> Any:
    """``task(p, yy, yt, k1, k2, k3, k4, t0, times, h, te, tr, f, track, stop) -> code``:
    classical RK4, each interval [t_{j−1}, t_j] cut into ⌈Δt/h⌉ equal steps (so a run cut into
    segments is bit-identical to an uncut one); ``yy`` holds the state, in and out."""

    def task(p, yy, yt, k1, k2, k3, k4, t0, times, h, te, tr, f, track, stop):
        ns = yy.shape[0]
        prev = t0
        for j in range(times.shape[0]):
            if stop[0] != 0:
                return STOPPED
            dt = times[j] - prev
            prev = times[j]
            if dt > 0.0:
                m = math.ceil(dt / h)
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
            a, b = loss(p, yy)
            te[j] = a
            tr[j] = b
            if track:
                f[j] = observe(p, yy)
        return DONE

    return jit(task)


def dopri5_task(rhs: Any, observe: Any, loss: Any, jit: Callable) -> Any:
    """``task(p, yy, yt, yn, er, k1, …, k7, hs, nacc, nrej, failed, t0, times, rtol, atol,
    max_steps, te, tr, f, track, stop) -> (code, hs, nacc, nrej, failed)``: adaptive
    Dormand–Prince 5(4) for one task (see :func:`fastdyn.drive.integrate_soa.advance_dopri5`);
    ``hs`` its next step (≤ 0 or NaN: Hairer's starting step), ``nacc``/``nrej``/``failed`` its
    counters, all returned updated; ``yy`` holds the state, in and out."""

    def rms(a):
        s = 0.0
        for r in range(a.shape[0]):
            s += a[r] * a[r]
        return math.sqrt(s / a.shape[0])

    rms = jit(rms)

    def initial_step(p, y, k1, yt, kt, rtol, atol):
        """Hairer's starting step (HNW I §II.4; ``hinit`` of dopri5.f) with the norm-wise scale
        sc = atol + rtol·‖y0‖: d0 = ‖y0‖/sc, d1 = ‖f0‖/sc, h0 = 0.01·d0/d1 (1e-6 if either <
        1e-5), d2 = ‖f(y0 + h0 f0) − f0‖/(sc·h0), h1 = (0.01/max(d1, d2))^(1/5)
        (max(1e-6, 1e-3 h0) if max(d1, d2) ≤ 1e-15); h = min(100 h0, h1)."""
        sc = atol + rtol * rms(y)
        d0 = rms(y) / sc if sc > 0.0 else 0.0
        d1 = rms(k1) / sc if sc > 0.0 else 0.0
        h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
        for r in range(y.shape[0]):
            yt[r] = y[r] + h0 * k1[r]
        rhs(p, yt, kt)
        s = 0.0
        for r in range(y.shape[0]):
            e = kt[r] - k1[r]
            s += e * e
        d2 = math.sqrt(s / y.shape[0]) / (sc * h0) if sc > 0.0 else 0.0
        dm = max(d1, d2)
        h1 = max(1e-6, 1e-3 * h0) if not (dm > 1e-15) else (0.01 / dm) ** (1.0 / (DP_ORDER_EST + 1))
        return min(100.0 * h0, h1)

    initial_step = jit(initial_step)

    def task(
        p, yy, yt, yn, er, k1, k2, k3, k4, k5, k6, k7, hs, nacc, nrej, failed, t0, times, rtol,
        atol, max_steps, te, tr, f, track, stop,
    ):  # fmt: skip
        ns = yy.shape[0]
        t = t0
        rej_before = False
        rhs(p, yy, k1)
        if failed == 0 and not (hs > 0.0):
            hs = initial_step(p, yy, k1, yt, k2, rtol, atol)
        rmsy = rms(yy)
        for j in range(times.shape[0]):
            if stop[0] != 0 or stop[1] != 0:  # a signal / another task's step limit: give up
                return STOPPED, hs, nacc, nrej, failed
            tj = times[j]
            while failed == 0 and t < tj:
                if stop[0] != 0 or stop[1] != 0:
                    return STOPPED, hs, nacc, nrej, failed
                if nacc >= max_steps:  # the budget is used up with an output time ahead
                    stop[1] = 1  # the run fails at once: every block gives up
                    return BUDGET, hs, nacc, nrej, 1
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
                        _B0 * k1[r] + _B2 * k3[r] + _B3 * k4[r] + _B4 * k5[r] + _B5 * k6[r]
                    )
                rhs(p, yn, k7)
                for r in range(ns):
                    er[r] = hh * (
                        _E0 * k1[r] + _E2 * k3[r] + _E3 * k4[r] + _E4 * k5[r] + _E5 * k6[r]
                        + _E6 * k7[r]
                    )  # fmt: skip
                rmsn = rms(yn)
                e = rms(er)
                sc = atol + rtol * max(rmsy, rmsn)
                err = 0.0 if e == 0.0 else (math.inf if sc == 0.0 else e / sc)
                if err <= 1.0:
                    fac = MAX_FACTOR if err == 0.0 else min(MAX_FACTOR, SAFETY * err**_EXPO)
                    if rej_before:
                        fac = min(1.0, fac)
                    hnew = hh * fac
                    t = tj if clipped else t + hh
                    # a step shortened to land on t_j keeps the larger of its own proposal and
                    # the step it replaced: outputs do not shrink the steps
                    hs = max(hnew, hs) if clipped else hnew
                    for r in range(ns):  # FSAL: the new state, and k7 = rhs(y_new) is next k1
                        yy[r] = yn[r]
                        k1[r] = k7[r]
                    rmsy = rmsn
                    rej_before = False
                    nacc += 1
                else:
                    fr = (
                        MIN_FACTOR if not (err < math.inf) else max(MIN_FACTOR, SAFETY * err**_EXPO)
                    )
                    hs = hh * fr
                    rej_before = True
                    nrej += 1
            a, b = loss(p, yy)
            te[j] = a
            tr[j] = b
            if track:
                f[j] = observe(p, yy)
        return DONE, hs, nacc, nrej, failed

    return jit(task)


#: rows of a task's fixed-step solver record (:func:`fixed_task`; a (FIXED_ROWS, n) float64 array
#: of the caller): nominal step (≤ 0 or NaN: not chosen yet), steps taken, |r| after the last
#: step (settling), status code (:mod:`fastdyn.core.task_status`)
FIX_H, FIX_STEPS, FIX_RPREV, FIX_STATUS = 0, 1, 2, 3
FIXED_ROWS = 4


def _no_rate(p, y):
    return 0.0


def _no_residual(p, y):
    return 0.0, 0.0


def fixed_task(
    rhs: Any, observe: Any, loss: Any, rate: Any, residual: Any, gd: bool, jit: Callable
) -> Any:
    """``task(p, yy, yt, k1, k2, k3, k4, st, mark0, marks, spt, h, eta, settle_tol, max_steps,
    te, tr, f, track, stop) -> code``: one task through the output marks with fixed steps and
    the options of :func:`fastdyn.drive.integrate_soa.advance_fixed`; ``st`` the task's record
    (rows :data:`FIX_H` …), ``yy`` its state, both in and out.

    - rk4 (``gd`` false): marks are times; each interval [t_{j−1}, t_j] is cut into
      n = ⌈Δt/h_s⌉ equal steps. h_s = 1/(spt·σ_s) with σ_s = ``rate(p, y)`` at the task's
      first call (``rate`` None: the one nominal step ``h``); kept in ``st``, so segments and
      resumes continue the same steps.
    - gd (``gd`` true): marks are step indices; y ← y + η·rhs(y) once per step (t = η·step).
    - settling (``residual`` not None, ``settle_tol`` > 0): after every step, with
      (r, scale) = ``residual(p, y)``, the task is frozen when |r| ≤ settle_tol·|scale| and
      |r| ≤ |r| after its previous step; it keeps its state for the later outputs.
    - a task whose σ is not positive and finite never moves (frozen); one whose steps reach
      ``max_steps`` stops there (step limit); a non-finite state stops it (diverged).
    """
    from ..core.task_status import (
        STATUS_DIVERGED,
        STATUS_FROZEN,
        STATUS_RUNNING,
        STATUS_SETTLED,
        STATUS_STEP_LIMIT,
    )

    has_rate, settling = rate is not None, residual is not None
    rate_fn = rate if has_rate else jit(_no_rate)  # (never called without the option)
    resid_fn = residual if settling else jit(_no_residual)

    def task(
        p, yy, yt, k1, k2, k3, k4, st, mark0, marks, spt, h, eta, settle_tol, max_steps, te, tr,
        f, track, stop,
    ):  # fmt: skip
        ns = yy.shape[0]
        status = int(st[FIX_STATUS])
        alive = status == STATUS_RUNNING
        if alive and has_rate:
            sig = rate_fn(p, yy)
            if not (sig > 0.0 and math.isfinite(sig)):
                alive = False
                status = STATUS_FROZEN
            elif not (st[FIX_H] > 0.0):
                st[FIX_H] = eta if gd else 1.0 / (spt * sig)
        if alive and not (st[FIX_H] > 0.0):
            st[FIX_H] = eta if gd else h
        thr = -1.0
        if settling and settle_tol > 0.0:
            _r0, sc0 = resid_fn(p, yy)
            thr = settle_tol * abs(sc0)
        fmax = float(max_steps)
        prev = mark0
        for j in range(marks.shape[0]):
            if stop[0] != 0:
                st[FIX_STATUS] = status
                return STOPPED
            dt = marks[j] - prev
            prev = marks[j]
            if alive and dt > 0.0:
                nf = dt if gd else math.ceil(dt / st[FIX_H])
                hh = eta if gd else dt / nf
                budget = fmax - st[FIX_STEPS]
                limit = nf > budget
                if limit:
                    nf = budget
                    hh = eta if gd else st[FIX_H]
                for _ in range(int(nf)):
                    rhs(p, yy, k1)
                    if gd:
                        for r in range(ns):
                            yy[r] = yy[r] + hh * k1[r]
                    else:
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
                    st[FIX_STEPS] += 1.0
                    if settling:
                        rn, _sc = resid_fn(p, yy)
                        ra = abs(rn)
                        settle = (ra <= thr) and (ra <= st[FIX_RPREV])
                        st[FIX_RPREV] = ra
                        if settle:
                            alive = False
                            break
                finite = True
                for r in range(ns):
                    if not math.isfinite(yy[r]):
                        finite = False
                if not finite:
                    alive = False
                    status = STATUS_DIVERGED
                elif alive and limit:
                    alive = False
                    status = STATUS_STEP_LIMIT
                elif not alive and status == STATUS_RUNNING:
                    status = STATUS_SETTLED
            a, b = loss(p, yy)
            te[j] = a
            tr[j] = b
            if track:
                f[j] = observe(p, yy)
        st[FIX_STATUS] = status
        return DONE

    return jit(task)
