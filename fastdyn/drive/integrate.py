"""④ Integrate the MSFR per-task gradient flow for a chunk of tasks (spec/msfr.md §3).

Every task s evolves y_s = (v_x, v_y, w_x, w_y) by the flow of :mod:`fastdyn.models.msfr.ode`
independently of the others, with its own steps, and is recorded at shared output times t_j:

- ``rk4``: fixed nominal step h_s = 1 / (steps_per_timescale · σ_s) with σ_s the task's rate scale
  (:func:`fastdyn.models.msfr.ode.rate_scale` at the state where the task starts: σ_s =
  rate·λmax(H)·(|Λ| + |r|), = 2 a_s Λ_s for small init). Each interval [t_{j−1}, t_j] is cut into
  n = ⌈Δt/h_s⌉ equal sub-steps, so every task lands exactly on every output time. h_s is kept in
  the state, so a run split into segments gives bit-identical results to an unsplit one.
- ``dopri5``: Dormand–Prince 5(4) per task, FSAL, standard controller
  (:func:`fastdyn.drive.steppers.dopri5_controller`), norm-wise error
  ‖err‖_rms / (atol + rtol·max(‖y‖_rms, ‖y_new‖_rms)); a step that would pass t_j is shortened to
  land on it (and the unshortened proposal is kept for the next step).
- ``gd``: discrete gradient descent with one shared learning rate η, t = η · step:
  y ← y + η · F(y) (v and w updated simultaneously), recorded at step indices k_j.

Settling rule (needed for horizons like t ∈ [1e-2, 1e12] with rates spanning 1e-12 … 1e6): after
every accepted step, with r the new residual and r_prev the residual after the previous step,
a task is frozen when

    |r| ≤ settle_tol · |Λ|   and   |r| ≤ |r_prev|.

Along the exact gradient flow the task's loss rate·r²/2 is non-increasing, so |r(t)| ≤ |r(t*)| for
all later t and the frozen f differs from the true f(t) by at most 2·settle_tol·|Λ| (by
settle_tol·|Λ| when r keeps its sign, as it does on the final exponential approach); the state itself
is within ≈ |r|/|∇f| of the converged point. The second condition rejects a step on which |r|
grew (a gd overshoot). Frozen tasks keep their state and fill the remaining output times.
settle_tol ≤ 0 disables settling. Λ = 0 tasks never settle (their residual decays like 1/t).

Per-task status codes (:data:`STATUS_NAMES`): running (reached the last output time), settled,
frozen (rate 0 or a stationary start: never moves), step limit (``max_steps`` reached: the task
stops and keeps its state, so its outputs are stale), diverged (non-finite state: outputs NaN, so
the loss becomes NaN and the driver reports it), stalled (dopri5 step below the resolution of t).

Outputs per call: per-block partial sums (n_blocks, T) of the test terms wtest·r²/2 and the train
terms rate·r²/2 (each block summed serially in task order, :mod:`fastdyn.reduce`), f_s(t_j) of the
tracked tasks (n_track, T), and the updated :class:`TaskState` (final state, step sizes, step
counts, status) so a run can continue or be checkpointed. Deterministic: per-task arithmetic does
not depend on neighbours, and sums are per fixed block, so results are bit-identical for any
thread count and any chunk size that is a multiple of BLOCK (chunks start on a block boundary).

Layers: Python wrappers (:func:`integrate_rk4`, :func:`integrate_dopri5`, :func:`integrate_gd`,
and the segment-wise :func:`advance`) validate and allocate; ``@njit(parallel=True)`` kernels
``prange`` over blocks; serial per-block kernels. rk4 and gd run LANES tasks in lock-step with
masks (each lane has its own step size and step count), which LLVM vectorises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit, prange

from .._jit import PARALLEL, SERIAL
from ..models.msfr.ode import rate_scale, task_loss, task_rhs, task_rhs_q1
from ..reduce import BLOCK, accumulate_blocks, n_blocks
from . import saveat
from .steppers import (
    _rms,
    dopri5_controller,
    dopri5_step,
    error_norm,
    euler_step,
    rk4_step,
)
from .task_status import (  # noqa: F401  (public names of this module too)
    STATUS_DIVERGED,
    STATUS_FROZEN,
    STATUS_NAMES,
    STATUS_RUNNING,
    STATUS_SETTLED,
    STATUS_STALLED,
    STATUS_STEP_LIMIT,
)

_INLINE = dict(SERIAL, inline="always")

#: tasks per lock-step lane group (divides BLOCK)
LANES: int = 16
#: how many lock-step iterations between checks whether any lane is still active
_CHECK_EVERY = 16

INTEGRATORS = ("rk4", "dopri5", "gd")

# defaults (kept equal to config/msfr.py [solver])
DEFAULT_STEPS_PER_TIMESCALE = 200.0
DEFAULT_RTOL = 1e-8
DEFAULT_ATOL = 1e-14
DEFAULT_SETTLE_TOL = 1e-13
DEFAULT_MAX_STEPS = 10**8

# The per-lane work array W is flat, row r of lane l at W[r·LANES + l]: every access in the lane
# loops is one base pointer plus a compile-time constant offset, so LLVM proves the rows disjoint
# without runtime alias checks and vectorises the lane loop (with a 2-D array the row stride is a
# runtime value and the loop stays scalar). Rows: 0–3 state y, 4–7 its derivative k, 8 f, then
# parameters and per-lane bookkeeping.
_Y0, _K0, _F = 0, 4, 8
_LAM, _PSI, _Q, _RATE, _HH, _N, _ALIVE, _RPREV, _THR, _NST, _HNOM, _WT = range(9, 21)
_NW = 21
# offsets r·LANES of the rows used in the lane loops
_OY0, _OY1, _OY2, _OY3 = (r * LANES for r in range(_Y0, _Y0 + 4))
_OK0, _OK1, _OK2, _OK3 = (r * LANES for r in range(_K0, _K0 + 4))
_OF, _OLAM, _OPSI, _OQ, _ORATE = _F * LANES, _LAM * LANES, _PSI * LANES, _Q * LANES, _RATE * LANES
_OHH, _ON, _OALIVE, _ORPREV, _OTHR = (r * LANES for r in (_HH, _N, _ALIVE, _RPREV, _THR))
_ONST, _OHNOM, _OWT = _NST * LANES, _HNOM * LANES, _WT * LANES

# ----------------------------------------------------------------------------------------------
# serial kernels
# ----------------------------------------------------------------------------------------------


@njit(**SERIAL)
def _lanes_rhs(W):
    for l in range(LANES):
        p = (W[_OLAM + l], W[_OPSI + l], W[_OQ + l], W[_ORATE + l])
        k, f = task_rhs(p, (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l]))
        W[_OK0 + l] = k[0]
        W[_OK1 + l] = k[1]
        W[_OK2 + l] = k[2]
        W[_OK3 + l] = k[3]
        W[_OF + l] = f


@njit(**_INLINE)
def _lane_load(W, l):
    """(p, y, k, h) of lane l."""
    p = (W[_OLAM + l], W[_OPSI + l], W[_OQ + l], W[_ORATE + l])
    y = (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l])
    k = (W[_OK0 + l], W[_OK1 + l], W[_OK2 + l], W[_OK3 + l])
    return p, y, k, W[_OHH + l]


@njit(**_INLINE)
def _lane_commit(W, l, sf, y, k, yn, kn, fn):
    """Branch-free end of one lock-step iteration of lane l: the step (yn, kn, fn) from (y, k) is
    kept iff the lane is alive and has done fewer than W[_N] steps (sf = iteration index); then
    the settling rule and the step count. Every row is stored unconditionally through selects."""
    act = (W[_OALIVE + l] > 0.5) & (sf < W[_ON + l])
    W[_OY0 + l] = yn[0] if act else y[0]
    W[_OY1 + l] = yn[1] if act else y[1]
    W[_OY2 + l] = yn[2] if act else y[2]
    W[_OY3 + l] = yn[3] if act else y[3]
    W[_OK0 + l] = kn[0] if act else k[0]
    W[_OK1 + l] = kn[1] if act else k[1]
    W[_OK2 + l] = kn[2] if act else k[2]
    W[_OK3 + l] = kn[3] if act else k[3]
    W[_OF + l] = fn if act else W[_OF + l]
    r = abs(fn - W[_OLAM + l])
    rp = W[_ORPREV + l]
    settle = act & (r <= W[_OTHR + l]) & (r <= rp)
    W[_ORPREV + l] = r if act else rp
    W[_OALIVE + l] = 0.0 if settle else W[_OALIVE + l]
    W[_ONST + l] = W[_ONST + l] + (1.0 if act else 0.0)


@njit(**_INLINE)
def _lanes_busy(W, sf):
    busy = False
    for l in range(LANES):
        if W[_OALIVE + l] > 0.5 and sf < W[_ON + l]:
            busy = True
    return busy


@njit(**_INLINE)
def _lanes_run(W, nmax, step, rhs):
    """Up to ``nmax`` lock-step iterations ``step(rhs, …)`` of the LANES lanes of W (lane l: step
    size W[_HH, l], at most W[_N, l] steps, settling after each). ``step`` and ``rhs`` are inlined
    at the numba IR level: the lane loop has no calls and vectorises."""
    for s0 in range(0, nmax, _CHECK_EVERY):
        s1 = min(s0 + _CHECK_EVERY, nmax)
        for s in range(s0, s1):
            sf = float(s)
            for l in range(LANES):
                p, y, k, h = _lane_load(W, l)
                yn, kn, fn, _ = step(rhs, p, y, k, h)
                _lane_commit(W, l, sf, y, k, yn, kn, fn)
        if not _lanes_busy(W, float(s1)):
            break


@njit(**SERIAL)
def _lanes_gd(W, nmax, q):
    """gd lanes: Euler steps with h = η (one gradient-descent step each)."""
    if q == 1.0:
        _lanes_run(W, nmax, euler_step, task_rhs_q1)
    else:
        _lanes_run(W, nmax, euler_step, task_rhs)


@njit(**SERIAL)
def _lanes_rk4(W, nmax, q):
    """RK4 lanes; with q = 1 the bit-identical specialised right-hand side."""
    if q == 1.0:
        _lanes_run(W, nmax, rk4_step, task_rhs_q1)
    else:
        _lanes_run(W, nmax, rk4_step, task_rhs)


@njit(**SERIAL)
def _lanes_advance(is_gd, W, nmax, q):
    """Up to ``nmax`` lock-step iterations: lane l takes a step (gd: Euler with h = η; else RK4)
    of size W[_HH, l] while it is alive and has done fewer than W[_N, l] steps of this interval;
    settling is checked after each step. Branch-free lane bodies, so the lane loops vectorise.
    ``q`` is the query weight shared by every lane (padding lanes included: they are never
    alive)."""
    if is_gd:
        _lanes_gd(W, nmax, q)
    else:
        _lanes_rk4(W, nmax, q)


@njit(**SERIAL)
def _lane_block(
    is_gd,
    b,
    lam,
    psi,
    rate,
    wtest,
    vx,
    vy,
    wx,
    wy,
    hnom,
    rprev,
    status,
    steps,
    q,
    mark0,
    marks,
    spt,
    eta,
    settle_tol,
    max_steps,
    tpos,
    test_part,
    train_part,
    f_track,
):
    """One block of rk4 (marks = output times, mark0 = start time) or gd (marks = output step
    indices as floats, mark0 = start step) in groups of LANES tasks."""
    n = lam.shape[0]
    lo = b * BLOCK
    hi = min(lo + BLOCK, n)
    nt = marks.shape[0]
    W = np.zeros(_NW * LANES)
    limit = np.zeros(LANES, dtype=np.bool_)
    fmax = float(max_steps)
    for g0 in range(lo, hi, LANES):
        m = min(LANES, hi - g0)
        W[:] = 0.0
        for l in range(LANES):
            W[_OPSI + l] = 1.0
        for l in range(m):
            i = g0 + l
            W[_OLAM + l] = lam[i]
            W[_OPSI + l] = psi[i]
            W[_OQ + l] = q
            W[_ORATE + l] = rate[i]
            W[_OWT + l] = wtest[i]
            W[_ORPREV + l] = rprev[i]
            W[_OTHR + l] = settle_tol * abs(lam[i]) if settle_tol > 0.0 else -1.0
            W[_ONST + l] = float(steps[i])
            W[_OHNOM + l] = hnom[i]
            W[_OY0 + l] = vx[i]
            W[_OY1 + l] = vy[i]
            W[_OY2 + l] = wx[i]
            W[_OY3 + l] = wy[i]
            if status[i] == STATUS_RUNNING:
                p = (lam[i], psi[i], q, rate[i])
                sig = rate_scale(p, (vx[i], vy[i], wx[i], wy[i]))
                if not (sig > 0.0) or not np.isfinite(sig):
                    status[i] = STATUS_FROZEN
                else:
                    W[_OALIVE + l] = 1.0
                    if not (hnom[i] > 0.0):
                        W[_OHNOM + l] = eta if is_gd else 1.0 / (spt * sig)
        _lanes_rhs(W)
        prev = mark0
        for j in range(nt):
            mj = marks[j]
            dt = mj - prev
            prev = mj
            nmax = 0.0
            for l in range(LANES):
                limit[l] = False
                W[_ON + l] = 0.0
                if W[_OALIVE + l] > 0.5 and dt > 0.0:
                    hn = W[_OHNOM + l]
                    if is_gd:
                        nf = dt
                        hh = eta
                    else:
                        nf = np.ceil(dt / hn)
                        hh = dt / nf
                    budget = fmax - W[_ONST + l]
                    if nf > budget:
                        nf = budget
                        hh = eta if is_gd else hn
                        limit[l] = True
                    W[_ON + l] = nf
                    W[_OHH + l] = hh
                    nmax = max(nmax, nf)
            if nmax > 0.0:
                _lanes_advance(is_gd, W, int(nmax), q)
            for l in range(m):
                i = g0 + l
                if W[_OALIVE + l] > 0.5:
                    fin = (
                        np.isfinite(W[_OF + l])
                        and np.isfinite(W[_OY0 + l])
                        and np.isfinite(W[_OY1 + l])
                        and np.isfinite(W[_OY2 + l])
                        and np.isfinite(W[_OY3 + l])
                    )
                    if not fin:
                        status[i] = STATUS_DIVERGED
                        W[_OALIVE + l] = 0.0
                    elif limit[l]:
                        status[i] = STATUS_STEP_LIMIT
                        W[_OALIVE + l] = 0.0
                elif status[i] == STATUS_RUNNING:
                    status[i] = STATUS_SETTLED
                f = W[_OF + l]
                te, tr = task_loss(f - W[_OLAM + l], W[_ORATE + l], W[_OWT + l])
                test_part[b, j] += te
                train_part[b, j] += tr
                k = tpos[i]
                if k >= 0:
                    f_track[k, j] = f
        for l in range(m):
            i = g0 + l
            vx[i] = W[_OY0 + l]
            vy[i] = W[_OY1 + l]
            wx[i] = W[_OY2 + l]
            wy[i] = W[_OY3 + l]
            steps[i] = np.int64(W[_ONST + l])
            rprev[i] = W[_ORPREV + l]
            hnom[i] = W[_OHNOM + l]


@njit(**SERIAL)
def _dopri5_block(
    b,
    lam,
    psi,
    rate,
    wtest,
    vx,
    vy,
    wx,
    wy,
    hstate,
    rprev,
    status,
    steps,
    rejected,
    q,
    t0,
    times,
    rtol,
    atol,
    settle_tol,
    max_steps,
    tpos,
    test_part,
    train_part,
    f_track,
):
    """One block of dopri5, one task at a time (own adaptive steps), sums in task order."""
    n = lam.shape[0]
    lo = b * BLOCK
    hi = min(lo + BLOCK, n)
    nt = times.shape[0]
    fout = np.empty(nt)
    for i in range(lo, hi):
        lm = lam[i]
        p = (lm, psi[i], q, rate[i])
        y = (vx[i], vy[i], wx[i], wy[i])
        k, f = task_rhs(p, y)
        thr = max(settle_tol, rtol) * abs(lm) if settle_tol > 0.0 else -1.0
        alive = status[i] == STATUS_RUNNING
        h = hstate[i]
        if alive:
            sig = rate_scale(p, y)
            if not (sig > 0.0) or not np.isfinite(sig):
                status[i] = STATUS_FROZEN
                alive = False
            elif not (h > 0.0):
                d0 = _rms(y)
                d1 = _rms(k)
                h = 0.01 * d0 / d1 if (d0 > 0.0 and d1 > 0.0) else 0.01 / sig
                h = min(h, 0.01 / sig)
        t = t0
        nst = steps[i]
        nrej = rejected[i]
        rp = rprev[i]
        rej_before = False
        for j in range(nt):
            tj = times[j]
            while alive and t < tj:
                if nst >= max_steps:
                    status[i] = STATUS_STEP_LIMIT
                    alive = False
                    break
                clipped = h >= tj - t
                hh = tj - t if clipped else h
                if t + hh == t:
                    status[i] = STATUS_STALLED
                    alive = False
                    break
                yn, kn, fn, e = dopri5_step(task_rhs, p, y, k, hh)
                err = error_norm(e, y, yn, atol, rtol)
                acc, hnew = dopri5_controller(err, hh, rej_before)
                if acc:
                    t = tj if clipped else t + hh
                    y = yn
                    k = kn
                    f = fn
                    nst += 1
                    rej_before = False
                    h = max(hnew, h) if clipped else hnew
                    r = abs(f - lm)
                    if not (np.isfinite(f) and np.isfinite(_rms(y))):
                        status[i] = STATUS_DIVERGED
                        alive = False
                    elif r <= thr and r <= rp:
                        status[i] = STATUS_SETTLED
                        alive = False
                    rp = r
                else:
                    nrej += 1
                    rej_before = True
                    h = hnew
            fout[j] = f
        for j in range(nt):
            te, tr = task_loss(fout[j] - lm, rate[i], wtest[i])
            test_part[b, j] += te
            train_part[b, j] += tr
        kk = tpos[i]
        if kk >= 0:
            for j in range(nt):
                f_track[kk, j] = fout[j]
        vx[i], vy[i], wx[i], wy[i] = y
        hstate[i] = h
        rprev[i] = rp
        steps[i] = nst
        rejected[i] = nrej


# ----------------------------------------------------------------------------------------------
# parallel kernels: prange over fixed-size blocks
# ----------------------------------------------------------------------------------------------


@njit(**PARALLEL)
def rk4_kernel(
    lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, t0, times, spt,
    settle_tol, max_steps, tpos, test_part, train_part, f_track,
):  # fmt: skip
    """Per-task fixed-step RK4 of one chunk; state arrays updated in place."""
    for b in prange(test_part.shape[0]):
        _lane_block(
            False, b, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status,
            steps, q, t0, times, spt, 0.0, settle_tol, max_steps, tpos, test_part, train_part,
            f_track,
        )  # fmt: skip


@njit(**PARALLEL)
def gd_kernel(
    lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, k0, kout, eta,
    settle_tol, max_steps, tpos, test_part, train_part, f_track,
):  # fmt: skip
    """Discrete gradient descent (shared η) of one chunk; kout = output step indices (float64,
    exact integers), k0 the step the state is at; state arrays updated in place."""
    for b in prange(test_part.shape[0]):
        _lane_block(
            True, b, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status,
            steps, q, k0, kout, 0.0, eta, settle_tol, max_steps, tpos, test_part, train_part,
            f_track,
        )  # fmt: skip


@njit(**PARALLEL)
def dopri5_kernel(
    lam, psi, rate, wtest, vx, vy, wx, wy, hstate, rprev, status, steps, rejected, q, t0,
    times, rtol, atol, settle_tol, max_steps, tpos, test_part, train_part, f_track,
):  # fmt: skip
    """Per-task adaptive Dormand–Prince 5(4) of one chunk; state arrays updated in place."""
    for b in prange(test_part.shape[0]):
        _dopri5_block(
            b, lam, psi, rate, wtest, vx, vy, wx, wy, hstate, rprev, status, steps, rejected, q,
            t0, times, rtol, atol, settle_tol, max_steps, tpos, test_part, train_part, f_track,
        )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Python layer: validation, allocation
# ----------------------------------------------------------------------------------------------


@dataclass
class TaskState:
    """Per-task integrator state of n tasks (structure of arrays, task index fastest).

    ``y`` (4, n): v_x, v_y, w_x, w_y. ``h``: rk4 nominal step / dopri5 next step proposal / gd η
    (NaN = not chosen yet). ``rprev``: |r| after the last step (settling). ``status``: int8 codes
    (:data:`STATUS_NAMES`). ``steps``: accepted steps. ``rejected``: dopri5 rejected steps.
    """

    y: np.ndarray
    h: np.ndarray
    rprev: np.ndarray
    status: np.ndarray
    steps: np.ndarray
    rejected: np.ndarray

    @classmethod
    def fresh(cls, v0x: Any, v0y: Any, w0x: Any, w0y: Any) -> TaskState:
        """The state at the start of a run from the initial weights."""
        cols = [np.asarray(a, dtype=np.float64).reshape(-1) for a in (v0x, v0y, w0x, w0y)]
        n = cols[0].shape[0]
        if any(c.shape[0] != n for c in cols):
            raise ValueError("v0x, v0y, w0x, w0y: must all have the same length")
        y = np.empty((4, n))
        for r, c in enumerate(cols):
            y[r] = c
        return cls(
            y=y,
            h=np.full(n, np.nan),
            rprev=np.full(n, np.inf),
            status=np.zeros(n, dtype=np.int8),
            steps=np.zeros(n, dtype=np.int64),
            rejected=np.zeros(n, dtype=np.int64),
        )

    @property
    def n(self) -> int:
        return int(self.y.shape[1])

    def view(self, a: int, b: int) -> TaskState:
        """Tasks a … b−1 as views (writes go through to this state)."""
        return TaskState(
            self.y[:, a:b],
            self.h[a:b],
            self.rprev[a:b],
            self.status[a:b],
            self.steps[a:b],
            self.rejected[a:b],
        )

    def copy(self) -> TaskState:
        return TaskState(
            *(
                np.array(x)
                for x in (self.y, self.h, self.rprev, self.status, self.steps, self.rejected)
            )
        )

    def counts(self) -> dict[str, int]:
        """Number of tasks per status name."""
        c = np.bincount(self.status.astype(np.int64), minlength=len(STATUS_NAMES))
        return {name: int(c[i]) for i, name in enumerate(STATUS_NAMES)}


@dataclass
class Segment:
    """Outputs of one call: per-block loss partials (n_blocks, T) and tracked f (n_track, T)."""

    times: np.ndarray
    test_partials: np.ndarray
    train_partials: np.ndarray
    f_track: np.ndarray
    track: np.ndarray
    out_steps: np.ndarray | None = None

    def loss_test(self) -> np.ndarray:
        """Σ over blocks (in block order) of the test partials: Σ_s wtest_s r_s²/2 per time."""
        out = np.zeros(self.test_partials.shape[1])
        accumulate_blocks(out, self.test_partials)
        return out

    def loss_train(self) -> np.ndarray:
        """Σ over blocks (in block order) of the train partials: Σ_s rate_s r_s²/2 per time."""
        out = np.zeros(self.train_partials.shape[1])
        accumulate_blocks(out, self.train_partials)
        return out


@dataclass
class ODEResult(Segment):
    """A whole integration: the segment outputs plus the final :class:`TaskState`."""

    state: TaskState = field(default=None)  # type: ignore[assignment]


def _f64(name: str, a: Any, n: int | None = None) -> np.ndarray:
    x = np.ascontiguousarray(np.asarray(a, dtype=np.float64).reshape(-1))
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name}: expected length {n}, got {x.shape[0]}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: must be finite")
    return x


def _params(lam: Any, psi: Any, rate: Any, wtest: Any):
    lam = _f64("lam", lam)
    n = lam.shape[0]
    psi = _f64("psi", psi, n)
    rate = _f64("rate", rate, n)
    wtest = _f64("wtest", wtest, n)
    if np.any(psi <= 0.0):
        raise ValueError("psi: must be > 0")
    if np.any(rate < 0.0):
        raise ValueError("rate: must be ≥ 0")
    return lam, psi, rate, wtest


def _track_positions(track: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    tr = np.zeros(0, np.int64) if track is None else np.asarray(track, dtype=np.int64).reshape(-1)
    if tr.size and (tr.min() < 0 or tr.max() >= n):
        raise ValueError(
            f"track: local task indices must lie in [0, {n}), got {tr.min()}…{tr.max()}"
        )
    if np.unique(tr).size != tr.size:
        raise ValueError("track: indices must be unique")
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[tr] = np.arange(tr.size, dtype=np.int64)
    return tr, tpos


def _check_settings(settle_tol: float, max_steps: int) -> None:
    if not np.isfinite(settle_tol):
        raise ValueError(f"settle_tol: must be finite, got {settle_tol!r}")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps: must be ≥ 1, got {max_steps}")


def _rows(state: TaskState) -> list[np.ndarray]:
    if state.y.shape[0] != 4 or state.y.dtype != np.float64:
        raise ValueError(f"state.y: expected float64 (4, n), got {state.y.dtype} {state.y.shape}")
    return [state.y[r] for r in range(4)]


def advance(
    integrator: str,
    lam: Any,
    psi: Any,
    rate: Any,
    wtest: Any,
    state: TaskState,
    times: Any,
    *,
    t0: float = 0.0,
    query: bool = True,
    steps_per_timescale: float = DEFAULT_STEPS_PER_TIMESCALE,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    eta: float | None = None,
    out_steps: Any = None,
    k0: int = 0,
    settle_tol: float = DEFAULT_SETTLE_TOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    track: Any = None,
    test_partials: np.ndarray | None = None,
    train_partials: np.ndarray | None = None,
    f_track: np.ndarray | None = None,
    device: str = "cpu",
) -> Segment:
    """Advance ``state`` (in place) of one chunk of tasks from time ``t0`` through the output
    ``times`` with ``integrator`` ∈ {"rk4", "dopri5", "gd"} and return the segment's outputs.
    ``device = "cuda"`` runs the rk4 and gd kernels' CUDA twins (``integrate_cuda.py``).

    Parameters are per-task float64 arrays (Λ, ψ, rate = #_s/N, wtest = P(s)); the chunk's first
    task must sit on a block boundary for the partials to combine across chunks. ``query=False``
    drops the query term of H (H⁰ = ψ u uᵀ, the ε = 0 model). ``times`` strictly increasing,
    ``times[0] ≥ t0`` (an output at t0 records the current state). For gd give ``eta`` and either
    ``out_steps`` (int64 step indices, > k0 except the first may equal k0) or ``times`` (converted
    by :func:`fastdyn.drive.saveat.gd_steps`); ``k0`` is the step the state is at. Partial/f arrays
    may be passed in (zeroed by the caller; results are added/written), else they are allocated.
    """
    lam, psi, rate, wtest = _params(lam, psi, rate, wtest)
    n = lam.shape[0]
    if state.n != n:
        raise ValueError(f"state: holds {state.n} tasks, parameters {n}")
    _check_settings(settle_tol, max_steps)
    tr, tpos = _track_positions(track, n)
    q = 1.0 if query else 0.0
    marks_out: np.ndarray | None = None
    if integrator == "gd":
        if eta is None or not (np.isfinite(eta) and eta > 0.0):
            raise ValueError(f"eta: gd needs a finite learning rate > 0, got {eta!r}")
        if out_steps is None:
            ks, times_arr = saveat.gd_steps(times, eta)
        else:
            ks = np.asarray(out_steps, dtype=np.int64).reshape(-1)
            times_arr = eta * ks.astype(np.float64)
        if ks.size == 0 or ks[0] < k0 or (ks.size > 1 and np.any(np.diff(ks) <= 0)):
            raise ValueError("out_steps: must be strictly increasing step indices ≥ k0")
        marks_out = ks
        nt = ks.size
    elif integrator in ("rk4", "dopri5"):
        times_arr = saveat.check_times(times)
        if not np.isfinite(t0) or times_arr[0] < t0:
            raise ValueError(f"times: must start at or after t0 = {t0:g}")
        nt = times_arr.size
    else:
        raise ValueError(f"integrator: must be one of {', '.join(INTEGRATORS)}, got {integrator!r}")
    nb = n_blocks(n)
    if test_partials is None:
        test_partials = np.zeros((nb, nt))
    if train_partials is None:
        train_partials = np.zeros((nb, nt))
    if f_track is None:
        f_track = np.zeros((tr.size, nt))
    for name, a, shape in (
        ("test_partials", test_partials, (nb, nt)),
        ("train_partials", train_partials, (nb, nt)),
        ("f_track", f_track, (tr.size, nt)),
    ):
        if a.shape != shape or a.dtype != np.float64:
            raise ValueError(
                f"{name}: expected float64 array of shape {shape}, got {a.dtype} {a.shape}"
            )
    vx, vy, wx, wy = _rows(state)
    common = (
        lam,
        psi,
        rate,
        wtest,
        vx,
        vy,
        wx,
        wy,
        state.h,
        state.rprev,
        state.status,
        state.steps,
    )
    on_gpu = device == "cuda"
    if integrator == "rk4":
        if not (np.isfinite(steps_per_timescale) and steps_per_timescale > 0):
            raise ValueError(f"steps_per_timescale: must be > 0, got {steps_per_timescale!r}")
        (_gpu().rk4_kernel if on_gpu else rk4_kernel)(
            *common, q, float(t0), times_arr, float(steps_per_timescale), float(settle_tol),
            int(max_steps), tpos, test_partials, train_partials, f_track,
        )  # fmt: skip
    elif integrator == "dopri5":
        if on_gpu:
            raise ValueError("solver.integrator = 'dopri5' has no CUDA kernel (per-task adaptive steps); use 'rk4' or 'gd', or device = 'cpu'")
        if not (np.isfinite(rtol) and rtol > 0 and np.isfinite(atol) and atol >= 0):
            raise ValueError(f"rtol/atol: need rtol > 0 and atol ≥ 0, got {rtol!r}, {atol!r}")
        dopri5_kernel(
            *common, state.rejected, q, float(t0), times_arr, float(rtol), float(atol),
            float(settle_tol), int(max_steps), tpos, test_partials, train_partials, f_track,
        )  # fmt: skip
    else:
        (_gpu().gd_kernel if on_gpu else gd_kernel)(
            *common, q, float(k0), marks_out.astype(np.float64), float(eta), float(settle_tol),
            int(max_steps), tpos, test_partials, train_partials, f_track,
        )  # fmt: skip
    return Segment(times_arr, test_partials, train_partials, f_track, tr, marks_out)


def _gpu():
    """The CUDA twins (imported on first use: numba.cuda is only loaded for device = "cuda")."""
    from . import integrate_cuda

    return integrate_cuda


def _integrate(
    integrator: str, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, **kw
) -> ODEResult:
    n = np.asarray(lam).reshape(-1).shape[0]
    state = TaskState.fresh(
        *(
            _f64(nm, a, n)
            for nm, a in zip(("v0x", "v0y", "w0x", "w0y"), (v0x, v0y, w0x, w0y), strict=True)
        )
    )
    seg = advance(integrator, lam, psi, rate, wtest, state, times, **kw)
    return ODEResult(
        seg.times,
        seg.test_partials,
        seg.train_partials,
        seg.f_track,
        seg.track,
        seg.out_steps,
        state,
    )


def integrate_rk4(
    lam: Any, psi: Any, rate: Any, wtest: Any, v0x: Any, v0y: Any, w0x: Any, w0y: Any, times: Any,
    *, t0: float = 0.0, steps_per_timescale: float = DEFAULT_STEPS_PER_TIMESCALE,
    settle_tol: float = DEFAULT_SETTLE_TOL, max_steps: int = DEFAULT_MAX_STEPS,
    query: bool = True, track: Any = None,
) -> ODEResult:  # fmt: skip
    """Per-task fixed-step RK4 from (v0, w0) at t0 to the output ``times``
    (h_s = 1/(steps_per_timescale · σ_s), sub-stepped to land on each time)."""
    return _integrate(
        "rk4", lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, t0=t0,
        steps_per_timescale=steps_per_timescale, settle_tol=settle_tol, max_steps=max_steps,
        query=query, track=track,
    )  # fmt: skip


def integrate_dopri5(
    lam: Any, psi: Any, rate: Any, wtest: Any, v0x: Any, v0y: Any, w0x: Any, w0y: Any, times: Any,
    *, t0: float = 0.0, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
    settle_tol: float = DEFAULT_SETTLE_TOL, max_steps: int = DEFAULT_MAX_STEPS,
    query: bool = True, track: Any = None,
) -> ODEResult:  # fmt: skip
    """Per-task adaptive Dormand–Prince 5(4) from (v0, w0) at t0 to the output ``times``."""
    return _integrate(
        "dopri5", lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, t0=t0, rtol=rtol, atol=atol,
        settle_tol=settle_tol, max_steps=max_steps, query=query, track=track,
    )  # fmt: skip


def integrate_gd(
    lam: Any, psi: Any, rate: Any, wtest: Any, v0x: Any, v0y: Any, w0x: Any, w0y: Any, times: Any,
    *, eta: float, settle_tol: float = DEFAULT_SETTLE_TOL, max_steps: int = DEFAULT_MAX_STEPS,
    query: bool = True, track: Any = None,
) -> ODEResult:  # fmt: skip
    """Discrete gradient descent with learning rate ``eta`` from step 0, recorded at the steps
    k_j = round(t_j/η) (result.times = η·k_j, result.out_steps = k_j)."""
    return _integrate(
        "gd", lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, eta=eta, settle_tol=settle_tol,
        max_steps=max_steps, query=query, track=track,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# driver-facing state over all represented tasks (used by the MSFR setup, models/msfr/setup.py)
# ----------------------------------------------------------------------------------------------


class State:
    """The integrator state of all D represented tasks across segments, plus each chunk's clock."""

    def __init__(self, tasks: TaskState):
        self.tasks = tasks
        self.t_at: dict[int, float] = {}
        self.k_at: dict[int, int] = {}

    @classmethod
    def create(cls, chunks: Any, d: int) -> State:
        """From an iterable of task chunks (attributes first, n, v0x, v0y, w0x, w0y)."""
        y = np.zeros((4, int(d)))
        for ch in chunks:
            a, b = ch.first, ch.first + ch.n
            y[0, a:b], y[1, a:b], y[2, a:b], y[3, a:b] = ch.v0x, ch.v0y, ch.w0x, ch.w0y
        return cls(TaskState.fresh(y[0], y[1], y[2], y[3]))

    def summary(self) -> dict[str, int]:
        """Task counts per status plus total accepted/rejected steps."""
        out = {k.replace(" ", "_"): v for k, v in self.tasks.counts().items()}
        out["steps"] = int(self.tasks.steps.sum())
        out["rejected"] = int(self.tasks.rejected.sum())
        return out


def advance_chunk(
    solver: Any,
    integrator: str,
    ch: Any,
    state: State,
    times: np.ndarray,
    steps: np.ndarray | None,
    track_local: np.ndarray,
    test_partials: np.ndarray,
    train_partials: np.ndarray,
    f_track: np.ndarray,
    query: bool = True,
    device: str = "cpu",
) -> None:
    """Advance chunk ``ch`` of ``state`` through one segment of output ``times`` (gd: step indices
    ``steps``), adding into the given partials and writing ``f_track``. ``solver`` has attributes
    rtol, atol, steps_per_timescale, lr, settle_tol (config [solver]); ``device``: "cpu" or
    "cuda"."""
    view = state.tasks.view(ch.first, ch.first + ch.n)
    kw: dict[str, Any] = dict(
        query=query,
        device=device,
        settle_tol=float(solver.settle_tol),
        track=track_local,
        test_partials=test_partials,
        train_partials=train_partials,
        f_track=f_track,
        max_steps=int(getattr(solver, "max_steps", DEFAULT_MAX_STEPS)),
    )
    if integrator == "gd":
        k0 = state.k_at.get(ch.first, 0)
        advance(
            "gd",
            ch.lam,
            ch.psi,
            ch.rate,
            ch.wtest,
            view,
            times,
            eta=float(solver.lr),
            out_steps=steps,
            k0=k0,
            **kw,
        )
        state.k_at[ch.first] = int(steps[-1])
    else:
        t0 = state.t_at.get(ch.first, 0.0)
        extra = (
            {"steps_per_timescale": float(solver.steps_per_timescale)}
            if integrator == "rk4"
            else {"rtol": float(solver.rtol), "atol": float(solver.atol)}
        )
        advance(integrator, ch.lam, ch.psi, ch.rate, ch.wtest, view, times, t0=t0, **extra, **kw)
    state.t_at[ch.first] = float(times[-1])
