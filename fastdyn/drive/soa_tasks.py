"""④ One task of the generic integrators, written once and compiled for the CPU and for CUDA.

:func:`rk_step` is the one Runge–Kutta loop: given a tableau (:mod:`fastdyn.drive.tableaux`:
rk4, dopri5, gd's Euler step), a model's ``rhs(p, y, dy)`` and a compiler (``numba.njit`` for the
CPU blocks of :mod:`fastdyn.drive.integrate_soa`, ``cuda.jit(device=True)`` for the threads of
:mod:`fastdyn.drive.integrate_soa_cuda`, with the model's functions compiled the same way from
their Python source, ``py_func``), it returns the compiled step of one task. :func:`rk4_task`,
:func:`dopri5_task` (with the one controller, :func:`fastdyn.core.steppers.step_factor`) and
:func:`fixed_task` (per-task steps, gd, settling) are the step loops of one task over a segment of
output times, built on it. The arithmetic is the same source on both targets, so nothing is
retyped; the callers only load a task's column into scratch arrays (NumPy arrays on the CPU,
thread-local arrays on the GPU) and store the results.

Each writes the task's loss terms at each output time into ``te``/``tr`` (length T) and, when
``track``, observe's value into ``f``; they return early, with a code, when ``stop[0]`` (a signal)
or ``stop[1]`` (another task used up its step budget) is set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.steppers import CONTROL_EXPONENT, error_norm_of_rms, step_factor
from .tableaux import DOPRI5, EULER, RK4, Tableau

#: return codes of a task: finished the segment, stopped by a signal, used up its step budget
DONE, STOPPED, BUDGET = 0, 1, 2


def rk_step(tab: Tableau, rhs: Any, jit: Callable) -> Any:
    """The one Runge–Kutta loop, for tableau ``tab``: ``step(p, yy, hh, K, yt, yn, er)`` takes
    ``K[0] = rhs(p, yy)`` and writes the other stages into the rows of ``K`` (stages, n_state),
    the new state y + (h/b_den) Σ b_j k_j into ``yn`` and, for an embedded pair, h Σ e_j k_j into
    ``er``; with FSAL the last stage is rhs(p, yn). Every sum runs over the nonzero coefficients
    in stage order and starts from its first term (no added zero), so the rounding is the
    textbook formula's written out term by term."""
    A = np.ascontiguousarray(tab.a, dtype=np.float64)
    B = np.ascontiguousarray(tab.b, dtype=np.float64)
    has_e = tab.e is not None
    E = np.ascontiguousarray(tab.e if has_e else np.zeros(tab.stages), dtype=np.float64)
    S, b_den, fsal = tab.stages, float(tab.b_den), bool(tab.fsal)
    last = S - 1 if fsal else S  # stages built from A before the new state

    # the rows summed: stage i (1 ≤ i < last) from A's row i into yt, scaled by h; then, as row
    # ``last``, the new state from b into yn, scaled by h/b_den
    W = np.zeros((last + 1, S))
    W[:last] = A[:last]
    W[last] = B

    def step(p, yy, hh, K, yt, yn, er):
        ns = yy.shape[0]
        for i in range(1, last + 1):
            new = i == last
            out = yn if new else yt
            sc = hh / b_den if new else hh
            n = S if new else i
            for r in range(ns):
                acc = 0.0
                started = False
                for j in range(n):
                    a = W[i, j]
                    if a != 0.0:
                        t = a * K[j, r]
                        acc = acc + t if started else t
                        started = True
                out[r] = yy[r] + sc * acc
            if not new:
                rhs(p, yt, K[i])
        if fsal:
            rhs(p, yn, K[S - 1])
        if has_e:
            for r in range(ns):
                acc = 0.0
                started = False
                for j in range(S):
                    w = E[j]
                    if w != 0.0:
                        t = w * K[j, r]
                        acc = acc + t if started else t
                        started = True
                er[r] = hh * acc

    return jit(step)


def rk4_task(rhs: Any, observe: Any, loss: Any, jit: Callable) -> Any:
    """``task(p, yy, yt, yn, K, t0, times, h, te, tr, f, track, stop) -> code``: classical RK4
    (:data:`fastdyn.drive.tableaux.RK4` by :func:`rk_step`), each interval [t_{j−1}, t_j] cut
    into ⌈Δt/h⌉ equal steps (so a run cut into segments is bit-identical to an uncut one);
    ``yy`` holds the state, in and out; ``K`` (4, n_state) the stages."""
    step = rk_step(RK4, rhs, jit)

    def task(p, yy, yt, yn, K, t0, times, h, te, tr, f, track, stop):
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
                    rhs(p, yy, K[0])
                    step(p, yy, hh, K, yt, yn, yn)
                    for r in range(ns):
                        yy[r] = yn[r]
            a, b = loss(p, yy)
            te[j] = a
            tr[j] = b
            if track:
                f[j] = observe(p, yy)
        return DONE

    return jit(task)


def dopri5_task(rhs: Any, observe: Any, loss: Any, jit: Callable, residual: Any = None) -> Any:
    """``task(p, yy, yt, yn, er, K, hs, nacc, nrej, failed, rprev, t0, times, rtol, atol,
    max_steps, settle_tol, te, tr, f, track, stop) -> (code, hs, nacc, nrej, failed, rprev)``:
    adaptive Dormand–Prince 5(4)
    (:data:`fastdyn.drive.tableaux.DOPRI5` by :func:`rk_step`, the controller
    :func:`fastdyn.core.steppers.step_factor`) for one task (see :func:`fastdyn.drive.integrate_soa.advance_dopri5`);
    ``hs`` its next step (≤ 0 or NaN: Hairer's starting step), ``nacc``/``nrej``/``failed`` its
    counters, all returned updated; ``yy`` holds the state, in and out. Settling (``residual``
    given, ``settle_tol`` > 0): after an accepted step with |r| ≤ max(settle_tol, rtol)·|scale|
    (below rtol the solution is not resolved) and |r| ≤ ``rprev`` (|r| after the previous
    step), the task stops for good with ``failed`` = 2 (settled, not a failure)."""
    settling = residual is not None
    resid_fn = residual if settling else jit(_no_residual)

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
        h1 = max(1e-6, 1e-3 * h0) if not (dm > 1e-15) else (0.01 / dm) ** (-CONTROL_EXPONENT)
        return min(100.0 * h0, h1)

    initial_step = jit(initial_step)

    step = rk_step(DOPRI5, rhs, jit)

    def task(
        p, yy, yt, yn, er, K, hs, nacc, nrej, failed, rprev, t0, times, rtol, atol, max_steps,
        settle_tol, te, tr, f, track, stop,
    ):  # fmt: skip
        ns = yy.shape[0]
        t = t0
        rej_before = False
        rhs(p, yy, K[0])
        if failed == 0 and not (hs > 0.0):
            hs = initial_step(p, yy, K[0], yt, K[1], rtol, atol)
        rmsy = rms(yy)
        thr = -1.0
        if settling and settle_tol > 0.0:
            _r0, sc0 = resid_fn(p, yy)
            thr = max(settle_tol, rtol) * abs(sc0)
        for j in range(times.shape[0]):
            if stop[0] != 0 or stop[1] != 0:  # a signal / another task's step limit: give up
                return STOPPED, hs, nacc, nrej, failed, rprev
            tj = times[j]
            while failed == 0 and t < tj:
                if stop[0] != 0 or stop[1] != 0:
                    return STOPPED, hs, nacc, nrej, failed, rprev
                if nacc >= max_steps:  # the budget is used up with an output time ahead
                    stop[1] = 1  # the run fails at once: every block gives up
                    return BUDGET, hs, nacc, nrej, 1, rprev
                clipped = hs >= tj - t
                hh = tj - t if clipped else hs
                if t + hh == t:  # the step is below the resolution of t
                    failed = 1
                    break
                step(p, yy, hh, K, yt, yn, er)
                rmsn = rms(yn)
                err = error_norm_of_rms(rms(er), rmsy, rmsn, atol, rtol)
                pw = err**CONTROL_EXPONENT if (err > 0.0 and err < math.inf) else 1.0
                fac = step_factor(err, pw, rej_before)
                if err <= 1.0:
                    hnew = hh * fac
                    t = tj if clipped else t + hh
                    # a step shortened to land on t_j keeps the larger of its own proposal and
                    # the step it replaced: outputs do not shrink the steps
                    hs = max(hnew, hs) if clipped else hnew
                    for r in range(ns):  # FSAL: the new state, and its stage is the next first
                        yy[r] = yn[r]
                        K[0, r] = K[6, r]
                    rmsy = rmsn
                    rej_before = False
                    nacc += 1
                    if settling:
                        rn, _sc = resid_fn(p, yy)
                        ra = abs(rn)
                        settle = (ra <= thr) and (ra <= rprev)
                        rprev = ra
                        if settle:
                            failed = 2
                else:
                    hs = hh * fac
                    rej_before = True
                    nrej += 1
            a, b = loss(p, yy)
            te[j] = a
            tr[j] = b
            if track:
                f[j] = observe(p, yy)
        return DONE, hs, nacc, nrej, failed, rprev

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
    """``task(p, yy, yt, yn, K, st, mark0, marks, spt, h, eta, settle_tol, max_steps, te, tr,
    f, track, stop) -> code``: one task through the output marks with fixed steps and
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
    step = rk_step(EULER if gd else RK4, rhs, jit)  # gd: y ← y + η·rhs(y), Euler's tableau

    def task(
        p, yy, yt, yn, K, st, mark0, marks, spt, h, eta, settle_tol, max_steps, te, tr, f,
        track, stop,
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
                    rhs(p, yy, K[0])
                    step(p, yy, hh, K, yt, yn, yn)
                    for r in range(ns):
                        yy[r] = yn[r]
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
