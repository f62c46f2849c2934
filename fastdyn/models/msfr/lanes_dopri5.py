"""Dormand–Prince 5(4) in lock-step lanes: DP_LANES tasks at a time, each with its own steps.

Every iteration each lane attempts one step of its own size hh (a lane with nothing left to do
steps with hh = 0, which changes nothing and is ignored):

1. :func:`_dp_step_lanes` — the step, its six new stages, the 5th-order solution, the embedded
   error estimate and its scaled norm, for all lanes in one branch-free loop that LLVM vectorises
   (the step and right-hand side are inlined at the numba IR level: no calls in the loop);
2. err^(−1/5) of every lane (libm's ``pow``, which does not vectorise: a loop of its own);
3. :func:`_dp_control_lanes` — the step-size controller, acceptance, the new state, time and step
   size, the counters, settling and divergence, again branch-free over all lanes (selects);
4. lane by lane, only what needs branches: status changes, the outputs a lane has reached, a
   finished task's write-back, and the next attempt (clipped to the next output time, the step
   limit, a stalled step).

A lane runs exactly the arithmetic of the one-task loop (same operations, same order; the
vector instructions round like the scalar ones and nothing is contracted into FMAs), so each
task's result is bit-identical to integrating it alone, whichever lane and group it is in.

The work array W is flat, row r of lane l at W[r·DP_LANES + l] (compile-time offsets, so the
lane loops have no runtime alias checks; see :mod:`fastdyn.models.msfr.lanes`); its rows are listed
below. Counters are held as floats (exact below 2⁵³). The output index of each lane is in J.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..._jit import SERIAL, prefer_wide_vectors
from ...core import task_status
from ...core.steppers import CONTROL_EXPONENT, error_norm_of_rms, step_factor
from .._fastexp import exp_nonpos_inline, log_pos_inline
from .lanes import load_params
from .ode import task_loss, task_rhs
from .steps import dopri5_step
from .steps import rms4 as _rms
from .task_rules import dopri5_start, settle_threshold, settles

_INLINE = dict(SERIAL, inline="always")

#: tasks per dopri5 lane group (divides BLOCK)
DP_LANES: int = 16
#: the stop flags are polled every this many lock-step iterations of a group
DP_POLL: int = 256
#: exponent of the step-size controller (steppers.step_factor's pw = err^_EXPO)
_EXPO = CONTROL_EXPONENT
_TINY = 2.2250738585072014e-308  # smallest normal double
_HUGE = 1.7976931348623157e308  # largest finite double
_TINY = 2.2250738585072014e-308  # smallest normal double
_HUGE = 1.7976931348623157e308  # largest finite double

# rows of W: state y, derivative k, f; parameters (Λ, ψ, q, rate); the attempted step hh (0: none);
# the proposal (y, k, f), its error norm and err^(−1/5); time t, step size h, the next output time
# tj, clipped (1/0), rejected-before (1/0), accepted and rejected steps, last |r|, settling
# threshold, alive (1/0), this iteration's event (0 none, 1 accepted, 2 diverged, 3 settled), the
# lane holds an unfinished task (1/0), the lane needs the scalar pass before its next attempt, and
# the RMS norms of y and of the proposal
_NAMES = (
    "Y0 Y1 Y2 Y3 K0 K1 K2 K3 F LAM PSI Q RATE HH YN0 YN1 YN2 YN3 KN0 KN1 KN2 KN3 FN ERR PW "
    "T H TJ CLIP REJB NST NREJ RP THR ALIVE EV RUN ATTN RMSY RMSN"
).split()
(
    _OY0, _OY1, _OY2, _OY3, _OK0, _OK1, _OK2, _OK3, _OF, _OLAM, _OPSI, _OQ, _ORATE, _OHH, _OYN0,
    _OYN1, _OYN2, _OYN3, _OKN0, _OKN1, _OKN2, _OKN3, _OFN, _OERR, _OPW, _OT, _OH, _OTJ, _OCLIP,
    _OREJB, _ONST, _ONREJ, _ORP, _OTHR, _OALIVE, _OEV, _ORUN, _OATTN, _ORMSY, _ORMSN,
) = (r * DP_LANES for r in range(len(_NAMES)))  # fmt: skip
#: rows of W
DP_NW: int = len(_NAMES)


def dp_scratch():
    """(W, J): one worker's scratch arrays for :func:`dopri5_group`."""
    return np.empty(DP_NW * DP_LANES), np.empty(DP_LANES, np.int64)


@njit(**_INLINE)
def _put4(W, o, l, v):
    """The 4-tuple v into rows o … o+3 (offsets: o = _OY0, _OK0, _OYN0 or _OKN0) of lane l."""
    W[o + l] = v[0]
    W[o + DP_LANES + l] = v[1]
    W[o + 2 * DP_LANES + l] = v[2]
    W[o + 3 * DP_LANES + l] = v[3]


@njit(**SERIAL, fastmath={"contract"})
def _dp_rhs_lanes(W):
    """k = rhs(y), f and ‖y‖ of every lane at the start of a call, with the arithmetic of the step
    (contracted into FMAs like :func:`_dp_step_lanes`, whose k7 = rhs(y_new) and ‖y_new‖ a
    continuing run uses instead): a call that starts from a saved state sees the same bits."""
    prefer_wide_vectors()
    for l in range(DP_LANES):
        p = (W[_OLAM + l], W[_OPSI + l], W[_OQ + l], W[_ORATE + l])
        y = (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l])
        k, f = task_rhs(p, y)
        W[_ORMSY + l] = _rms(y)
        _put4(W, _OK0, l, k)
        W[_OF + l] = f


@njit(**SERIAL, fastmath={"contract"})
def _dp_step_lanes(W, atol, rtol):
    """One Dormand–Prince step of every lane (size W[hh]); proposals and error norms into W."""
    prefer_wide_vectors()
    for l in range(DP_LANES):
        p = (W[_OLAM + l], W[_OPSI + l], W[_OQ + l], W[_ORATE + l])
        y = (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l])
        k = (W[_OK0 + l], W[_OK1 + l], W[_OK2 + l], W[_OK3 + l])
        yn, kn, fn, e = dopri5_step(task_rhs, p, y, k, W[_OHH + l])
        # ‖y‖ kept from the step that made y (or from _dp_rhs_lanes at a call's start, the same
        # contracted arithmetic): one square root fewer per step
        rn = _rms(yn)
        W[_OERR + l] = error_norm_of_rms(_rms(e), W[_ORMSY + l], rn, atol, rtol)
        W[_ORMSN + l] = rn
        _put4(W, _OYN0, l, yn)
        _put4(W, _OKN0, l, kn)
        W[_OFN + l] = fn


@njit(**SERIAL, fastmath={"contract"})
def _dp_pow_lanes(W):
    """err^(−1/5) of every lane, as e^(−ln(err)/5) with the branch-free log_pos and exp_nonpos
    (inlined copies, contracted here; ≲ 3 ulp; libm's pow does not vectorise). err is clamped to
    the normal range: the controller uses the power only for 0 < err < inf, and any err below
    1e-300 gives the maximum factor."""
    prefer_wide_vectors()
    for l in range(DP_LANES):
        e = _EXPO * log_pos_inline(min(max(W[_OERR + l], _TINY), _HUGE))
        a = exp_nonpos_inline(-abs(e))
        W[_OPW + l] = a if e <= 0.0 else 1.0 / a


@njit(**SERIAL)
def _dp_control_lanes(W, max_steps):
    """Step-size control and the outcome of every lane's attempt, branch-free (selects).

    The one controller (steppers.step_factor): accept iff err ≤ 1, h_new = hh·clip(0.9 err^(−1/5), 0.2, 10)
    (no growth right after a rejection; 0.2 for a non-finite err). Accepted: t advances (to the
    output time when the step was clipped to it), (y, k, f) take the proposal, h = h_new (at
    least the old h after a clipped step), then divergence (non-finite f or y) or settling
    (|r| ≤ threshold and not increasing) stops the lane. Rejected: h = h_new.

    Then every running lane's next attempt: hh = h, clipped to the next output time tj. A lane
    that reached tj or stopped, whose step would not move t, or that used up ``max_steps`` is
    flagged for the scalar pass instead (hh = 0). Returns the number of lanes set to step."""
    prefer_wide_vectors()
    nbusy = 0
    for l in range(DP_LANES):
        hh = W[_OHH + l]
        err = W[_OERR + l]
        pw = W[_OPW + l]
        att = hh != 0.0
        ok = err <= 1.0
        acc = att & ok
        hnew = hh * step_factor(err, pw, W[_OREJB + l] != 0.0)
        h = W[_OH + l]
        clip = W[_OCLIP + l] != 0.0
        t = W[_OT + l]
        tacc = W[_OTJ + l] if clip else t + hh
        W[_OT + l] = tacc if acc else t
        hacc = max(hnew, h) if clip else hnew
        W[_OH + l] = (hacc if ok else hnew) if att else h
        W[_OREJB + l] = (0.0 if ok else 1.0) if att else W[_OREJB + l]
        W[_ONST + l] += 1.0 if acc else 0.0
        W[_ONREJ + l] += 1.0 if (att and not ok) else 0.0
        yn = (W[_OYN0 + l], W[_OYN1 + l], W[_OYN2 + l], W[_OYN3 + l])
        W[_OY0 + l] = yn[0] if acc else W[_OY0 + l]
        W[_OY1 + l] = yn[1] if acc else W[_OY1 + l]
        W[_OY2 + l] = yn[2] if acc else W[_OY2 + l]
        W[_OY3 + l] = yn[3] if acc else W[_OY3 + l]
        W[_OK0 + l] = W[_OKN0 + l] if acc else W[_OK0 + l]
        W[_OK1 + l] = W[_OKN1 + l] if acc else W[_OK1 + l]
        W[_OK2 + l] = W[_OKN2 + l] if acc else W[_OK2 + l]
        W[_OK3 + l] = W[_OKN3 + l] if acc else W[_OK3 + l]
        fn = W[_OFN + l]
        W[_OF + l] = fn if acc else W[_OF + l]
        r = abs(fn - W[_OLAM + l])
        rp = W[_ORP + l]
        rn = W[_ORMSN + l]
        W[_ORMSY + l] = rn if acc else W[_ORMSY + l]
        div = not (np.isfinite(fn) and np.isfinite(rn))
        settle = settles(not div, r, W[_OTHR + l], rp)
        W[_OEV + l] = (2.0 if div else (3.0 if settle else 1.0)) if acc else 0.0
        W[_ORP + l] = r if acc else rp
        alive = not (acc and (div or settle)) and W[_OALIVE + l] != 0.0
        W[_OALIVE + l] = 1.0 if alive else 0.0
        # the next attempt
        t = W[_OT + l]
        h = W[_OH + l]
        tj = W[_OTJ + l]
        clip = h >= tj - t
        hh = tj - t if clip else h
        run = W[_ORUN + l] != 0.0
        attn = run and (
            (acc and (not alive or t >= tj)) or t + hh == t or W[_ONST + l] >= max_steps
        )
        go = run and not attn
        W[_OHH + l] = hh if go else 0.0
        W[_OCLIP + l] = 1.0 if clip else 0.0
        W[_OATTN + l] = 1.0 if attn else 0.0
        nbusy += 1 if go else 0
    return nbusy


@njit(**_INLINE)
def _dp_reached(W, J, l, times, fout):
    """Write f to every output lane l has reached (all of them once it stopped); True when the
    lane has no outputs left (the one-task loop's ``fout[j] = f`` after its inner while)."""
    nt = times.shape[0]
    j = J[l]
    f = W[_OF + l]
    t = W[_OT + l]
    alive = W[_OALIVE + l] != 0.0
    while j < nt and (not alive or t >= times[j]):
        fout[j] = f
        j += 1
    J[l] = j
    if j < nt:
        W[_OTJ + l] = times[j]
    return j >= nt


@njit(**_INLINE)
def _dp_finish(W, l, i, vx, vy, wx, wy, hstate, rprev, steps, rejected, tpos, fout, f_track):
    """Task i (lane l) is done: its state, step size and counters back into the chunk arrays."""
    W[_ORUN + l] = 0.0
    kk = tpos[i]
    if kk >= 0:
        for j in range(fout.shape[0]):
            f_track[kk, j] = fout[j]
    vx[i] = W[_OY0 + l]
    vy[i] = W[_OY1 + l]
    wx[i] = W[_OY2 + l]
    wy[i] = W[_OY3 + l]
    hstate[i] = W[_OH + l]
    rprev[i] = W[_ORP + l]
    steps[i] = np.int64(W[_ONST + l])
    rejected[i] = np.int64(W[_ONREJ + l])


@njit(**SERIAL)
def dopri5_group(
    g0, m, lo, lam, psi, rate, wtest, vx, vy, wx, wy, hstate, rprev, status, steps, rejected, q,
    t0, times, rtol, atol, settle_tol, max_steps, tpos, fbuf, f_track, stop, W, J, direct, b,
    test_part, train_part,
):  # fmt: skip
    """Tasks g0 … g0+m−1 (m ≤ DP_LANES) of dopri5, each with its own adaptive steps, in
    lock-step lanes; f of task i at output j goes to ``fbuf[i − lo, j]``. With ``direct`` the
    group's loss terms are then added into row b of the partials in task order. Returns early,
    leaving the outputs incomplete, once ``stop[0] != 0`` (a signal) or ``stop[1] != 0`` (polled
    every DP_POLL iterations); a task that reaches ``max_steps`` sets ``stop[1]`` (see
    :mod:`fastdyn.core.stop_flag`). W, J: the worker's :func:`dp_scratch`."""
    nt = times.shape[0]
    load_params(W, DP_LANES, _OLAM, g0, m, lam, psi, q, rate)
    for l in range(m):
        i = g0 + l
        W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l] = vx[i], vy[i], wx[i], wy[i]
    _dp_rhs_lanes(W)
    for l in range(m):
        i = g0 + l
        lm = lam[i]
        p = (lm, psi[i], q, rate[i])
        y = (vx[i], vy[i], wx[i], wy[i])
        k = (W[_OK0 + l], W[_OK1 + l], W[_OK2 + l], W[_OK3 + l])
        alive, frozen, h = dopri5_start(status[i] == task_status.STATUS_RUNNING, p, y, k, hstate[i])
        if frozen:
            status[i] = task_status.STATUS_FROZEN
        W[_OT + l] = t0
        W[_OH + l] = h
        W[_OTHR + l] = settle_threshold(settle_tol, rtol, lm)
        W[_ORP + l] = rprev[i]
        W[_ONST + l] = float(steps[i])
        W[_ONREJ + l] = float(rejected[i])
        W[_OALIVE + l] = 1.0 if alive else 0.0
        W[_ORUN + l] = 1.0
        W[_OATTN + l] = 1.0
        J[l] = 0
    fmax = float(max_steps)
    busy = 0
    it = 0
    while True:
        if it % DP_POLL == 0 and (stop[0] != 0 or stop[1] != 0):
            return
        it += 1
        # the scalar pass, for the flagged lanes only: status changes, outputs reached, finished
        # tasks, the step limit, stalled steps, and the next attempt after an output
        for l in range(m):
            if W[_OATTN + l] == 0.0:
                continue
            W[_OATTN + l] = 0.0
            i = g0 + l
            ev = W[_OEV + l]
            if ev == 2.0:
                status[i] = task_status.STATUS_DIVERGED
            elif ev == 3.0:
                status[i] = task_status.STATUS_SETTLED
            if _dp_reached(W, J, l, times, fbuf[i - lo]):
                _dp_finish(W, l, i, vx, vy, wx, wy, hstate, rprev, steps, rejected, tpos,
                           fbuf[i - lo], f_track)  # fmt: skip
                continue
            if W[_ONST + l] >= fmax:
                status[i] = task_status.STATUS_STEP_LIMIT
                stop[1] = 1  # the run fails: every block gives up (no hour-long wait)
                steps[i] = np.int64(W[_ONST + l])
                return
            t = W[_OT + l]
            h = W[_OH + l]
            tj = W[_OTJ + l]
            clipped = h >= tj - t
            hh = tj - t if clipped else h
            if t + hh == t:
                status[i] = task_status.STATUS_STALLED
                W[_OALIVE + l] = 0.0
                _dp_reached(W, J, l, times, fbuf[i - lo])
                _dp_finish(W, l, i, vx, vy, wx, wy, hstate, rprev, steps, rejected, tpos,
                           fbuf[i - lo], f_track)  # fmt: skip
                continue
            W[_OHH + l] = hh
            W[_OCLIP + l] = 1.0 if clipped else 0.0
            busy += 1
        if busy == 0:
            break
        _dp_step_lanes(W, atol, rtol)
        _dp_pow_lanes(W)
        busy = _dp_control_lanes(W, fmax)
    if direct:
        for l in range(m):
            i = g0 + l
            fo = fbuf[i - lo]
            for j in range(nt):
                te, tr = task_loss(fo[j] - lam[i], rate[i], wtest[i])
                test_part[b, j] += te
                train_part[b, j] += tr
