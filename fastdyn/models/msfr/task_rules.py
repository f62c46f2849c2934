"""The per-task rules of the MSFR integrators, one source for the CPU lanes and the CUDA threads.

Start-up (frozen tasks, the first step size), the sub-steps of an output interval, the settling
rule and the checks after an interval, as scalar functions of one task. The CPU's lock-step lanes
(:mod:`fastdyn.models.msfr.integrate_kernels`, :mod:`.lanes`, :mod:`.lanes_dopri5`) call them
lane by lane (inlined at the numba IR level, so the lane loops still vectorise); the CUDA twins
(:mod:`fastdyn.models.msfr.integrate_cuda`) compile the same functions for the device.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..._jit import SERIAL
from ...core.task_status import STATUS_DIVERGED, STATUS_RUNNING, STATUS_SETTLED, STATUS_STEP_LIMIT
from .ode import rate_scale
from .steps import rms4 as _rms

_INLINE = dict(SERIAL, inline="always")


@njit(**_INLINE)
def settle_threshold(settle_tol, floor, lam):
    """|r| at or below which a task may settle: max(settle_tol, floor)·|Λ| (dopri5: floor =
    rtol, below which the solution is not resolved; fixed steps: 0), −1 (never) when
    ``settle_tol`` ≤ 0."""
    return max(settle_tol, floor) * abs(lam) if settle_tol > 0.0 else -1.0


@njit(**_INLINE)
def settles(stepped, r, thr, rp):
    """The settling rule: a task that took a step (``stepped``) settles when its |r| is at or
    below the threshold and not increasing. Branch-free (the lanes' select)."""
    return stepped & (r <= thr) & (r <= rp)


@njit(**_INLINE)
def _start(running, p, y):
    """(alive, frozen, σ) of a task at the start of a call: a running task whose rate scale σ is
    not positive and finite is frozen."""
    if not running:
        return False, False, 0.0
    sig = rate_scale(p, y)
    ok = sig > 0.0 and math.isfinite(sig)
    return ok, not ok, sig


@njit(**_INLINE)
def fixed_start(running, p, y, h_nom, is_gd, spt, eta):
    """(alive, frozen, h_nom) of a fixed-step task at the start of a call (frozen as
    :func:`_start`); an alive task without a nominal step yet gets η (gd) or 1/(spt·σ) (rk4)."""
    alive, frozen, sig = _start(running, p, y)
    if alive and not (h_nom > 0.0):
        h_nom = eta if is_gd else 1.0 / (spt * sig)
    return alive, frozen, h_nom


@njit(**_INLINE)
def dopri5_start(running, p, y, k, h):
    """(alive, frozen, h) of a dopri5 task at the start of a call (k = rhs(y); frozen as
    :func:`_start`): an alive task without a step yet starts with 0.01·‖y‖/‖k‖ (0.01/σ when
    either norm is 0), at most 0.01/σ."""
    alive, frozen, sig = _start(running, p, y)
    if alive and not (h > 0.0):
        d0 = _rms(y)
        d1 = _rms(k)
        h = 0.01 * d0 / d1 if (d0 > 0.0 and d1 > 0.0) else 0.01 / sig
        h = min(h, 0.01 / sig)
    return alive, frozen, h


@njit(**_INLINE)
def ceil(x):
    """⌈x⌉ as a float (the CPU's; the CUDA twins pass their own, numba has no np.ceil there)."""
    return np.ceil(x)


@njit(**_INLINE)
def interval_steps(dt, h_nom, nst, fmax, is_gd, eta, ceil):
    """(steps, step size, limit) of an alive task over an output interval of length dt > 0: rk4
    ⌈dt/h_nom⌉ steps of dt/n, gd dt steps of η; a task that has taken ``nst`` steps takes at
    most fmax − nst (of its nominal step), and then ``limit`` is set. Branch-free (selects)."""
    nf = dt if is_gd else ceil(dt / h_nom)
    hh = eta if is_gd else dt / nf
    budget = fmax - nst
    over = nf > budget
    return (budget if over else nf), ((eta if is_gd else h_nom) if over else hh), over


@njit(**_INLINE)
def interval_status(alive, status, f, y, limit):
    """(alive, status) of a fixed-step task after an output interval: an alive task with a
    non-finite f or state has diverged, one that used up its step budget stops at the limit; a
    running task that is no longer alive has settled."""
    if alive:
        fin = (
            math.isfinite(f)
            and math.isfinite(y[0])
            and math.isfinite(y[1])
            and math.isfinite(y[2])
            and math.isfinite(y[3])
        )
        if not fin:
            return False, STATUS_DIVERGED
        if limit:
            return False, STATUS_STEP_LIMIT
        return True, status
    if status == STATUS_RUNNING:
        return False, STATUS_SETTLED
    return False, status
