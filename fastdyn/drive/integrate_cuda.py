"""CUDA twins of :func:`fastdyn.drive.integrate_kernels.rk4_kernel` and :func:`~.gd_kernel`.

Same arguments in the same order, same in-place updates of the task state, the per-block
partials and ``f_track``. Two launches per call:

1. one thread per task runs that task exactly as one lane of the CPU's lock-step lanes does
   (:func:`fastdyn.drive.integrate_kernels._lane_block`): the same start-up (frozen tasks,
   nominal step 1/(spt·σ_s) or η), the same sub-steps per output interval, the same settling
   rule, step limit and divergence check, with the right-hand side, rate scale and loss terms
   compiled for the device from the CPU's own Python source (:mod:`fastdyn.models.msfr.ode`); it
   writes its test and train loss terms per output time into device scratch arrays;
2. one thread per (block, output time) adds its block's terms in task order onto the partials,
   the CPU's order, so the reduction is fixed whatever the launch configuration.

The state arrays stay on the device between the two launches; the caller's arrays are updated
on return. Under numba's CUDA simulator the arithmetic is the CPU's operation for operation
(tests/cuda check ≤ 1e-12 relative; on a GPU, FMA contraction makes it round-off close).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ..models.msfr.ode import rate_scale, task_loss, task_rhs, task_rhs_q1
from ..reduce import BLOCK
from .task_status import (
    STATUS_DIVERGED,
    STATUS_FROZEN,
    STATUS_RUNNING,
    STATUS_SETTLED,
    STATUS_STEP_LIMIT,
)

_kernels: dict[str, object] = {}


def _build():
    rhs_g = cuda.jit(device=True)(task_rhs.py_func)
    rhs_1 = cuda.jit(device=True)(task_rhs_q1.py_func)
    scale = cuda.jit(device=True)(rate_scale.py_func)
    tloss = cuda.jit(device=True)(task_loss.py_func)

    @cuda.jit(device=True)
    def rhs(p, y):
        if p[2] == 1.0:
            return rhs_1(p, y)
        return rhs_g(p, y)

    @cuda.jit(device=True)
    def axpy(y, h, k):
        return (y[0] + h * k[0], y[1] + h * k[1], y[2] + h * k[2], y[3] + h * k[3])

    @cuda.jit(device=True)
    def step(is_gd, p, y, k1, h):
        """steppers.euler_step (gd) or steppers.rk4_step, operation for operation."""
        if is_gd:
            yn = axpy(y, h, k1)
            kn, fn = rhs(p, yn)
            return yn, kn, fn
        k2, _ = rhs(p, axpy(y, 0.5 * h, k1))
        k3, _ = rhs(p, axpy(y, 0.5 * h, k2))
        k4, _ = rhs(p, axpy(y, h, k3))
        h6 = h * (1.0 / 6.0)
        yn = (
            y[0] + h6 * (k1[0] + 2.0 * k2[0] + 2.0 * k3[0] + k4[0]),
            y[1] + h6 * (k1[1] + 2.0 * k2[1] + 2.0 * k3[1] + k4[1]),
            y[2] + h6 * (k1[2] + 2.0 * k2[2] + 2.0 * k3[2] + k4[2]),
            y[3] + h6 * (k1[3] + 2.0 * k2[3] + 2.0 * k3[3] + k4[3]),
        )
        kn, fn = rhs(p, yn)
        return yn, kn, fn

    @cuda.jit
    def tasks(is_gd, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q,
              mark0, marks, spt, eta, settle_tol, max_steps, tpos, te_buf, tr_buf, f_track):  # fmt: skip
        i = cuda.grid(1)
        if i >= lam.shape[0]:
            return
        nt = marks.shape[0]
        fmax = float(max_steps)
        p = (lam[i], psi[i], q, rate[i])
        y = (vx[i], vy[i], wx[i], wy[i])
        thr = settle_tol * abs(lam[i]) if settle_tol > 0.0 else -1.0
        nst = float(steps[i])
        hn = hnom[i]
        rp = rprev[i]
        alive = False
        if status[i] == STATUS_RUNNING:
            sig = scale(p, y)
            if not (sig > 0.0) or not math.isfinite(sig):
                status[i] = STATUS_FROZEN
            else:
                alive = True
                if not (hn > 0.0):
                    hn = eta if is_gd else 1.0 / (spt * sig)
        k, f = rhs(p, y)
        prev = mark0
        for j in range(nt):
            mj = marks[j]
            dt = mj - prev
            prev = mj
            limit = False
            if alive and dt > 0.0:
                if is_gd:
                    nf = dt
                    hh = eta
                else:
                    nf = math.ceil(dt / hn)
                    hh = dt / nf
                budget = fmax - nst
                if nf > budget:
                    nf = budget
                    hh = eta if is_gd else hn
                    limit = True
                s = 0.0
                while alive and s < nf:
                    yn, kn, fn = step(is_gd, p, y, k, hh)
                    y, k, f = yn, kn, fn
                    r = abs(fn - lam[i])
                    if r <= thr and r <= rp:
                        alive = False
                    rp = r
                    nst += 1.0
                    s += 1.0
            if alive:
                fin = (
                    math.isfinite(f)
                    and math.isfinite(y[0])
                    and math.isfinite(y[1])
                    and math.isfinite(y[2])
                    and math.isfinite(y[3])
                )
                if not fin:
                    status[i] = STATUS_DIVERGED
                    alive = False
                elif limit:
                    status[i] = STATUS_STEP_LIMIT
                    alive = False
            elif status[i] == STATUS_RUNNING:
                status[i] = STATUS_SETTLED
            te, tr = tloss(f - lam[i], rate[i], wtest[i])
            te_buf[i, j] = te
            tr_buf[i, j] = tr
            kk = tpos[i]
            if kk >= 0:
                f_track[kk, j] = f
        vx[i] = y[0]
        vy[i] = y[1]
        wx[i] = y[2]
        wy[i] = y[3]
        steps[i] = int(nst)
        rprev[i] = rp
        hnom[i] = hn

    @cuda.jit
    def reduce_blocks(te_buf, tr_buf, test_part, train_part):
        b, j = cuda.grid(2)
        nb, nt = test_part.shape
        if b >= nb or j >= nt:
            return
        n = te_buf.shape[0]
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        at = test_part[b, j]
        ar = train_part[b, j]
        for i in range(lo, hi):
            at += te_buf[i, j]
            ar += tr_buf[i, j]
        test_part[b, j] = at
        train_part[b, j] = ar

    return tasks, reduce_blocks


def _run(is_gd, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, mark0,
         marks, spt, eta, settle_tol, max_steps, tpos, test_part, train_part, f_track):  # fmt: skip
    if not _kernels:
        _kernels["tasks"], _kernels["reduce"] = _build()
    n, nt = lam.shape[0], marks.shape[0]
    host_state = (vx, vy, wx, wy, hnom, rprev, status, steps)
    d_state = [cuda.to_device(a) for a in host_state]
    d_par = [cuda.to_device(a) for a in (lam, psi, rate, wtest, marks, tpos)]
    d_te, d_tr = cuda.device_array((n, nt)), cuda.device_array((n, nt))
    d_ft = cuda.to_device(f_track)
    tpb = 128
    _kernels["tasks"][max(1, math.ceil(n / tpb)), tpb](
        is_gd, d_par[0], d_par[1], d_par[2], d_par[3], *d_state, float(q), float(mark0), d_par[4],
        float(spt), float(eta), float(settle_tol), int(max_steps), d_par[5], d_te, d_tr, d_ft,
    )  # fmt: skip
    d_tp, d_rp = cuda.to_device(test_part), cuda.to_device(train_part)
    nb = test_part.shape[0]
    grid = (max(1, math.ceil(nb / 8)), max(1, math.ceil(nt / 32)))
    _kernels["reduce"][grid, (8, 32)](d_te, d_tr, d_tp, d_rp)
    for h, d in zip(host_state, d_state, strict=True):
        d.copy_to_host(h)
    d_tp.copy_to_host(test_part)
    d_rp.copy_to_host(train_part)
    d_ft.copy_to_host(f_track)


def rk4_kernel(lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, t0, times,
               spt, settle_tol, max_steps, tpos, test_part, train_part, f_track):  # fmt: skip
    """GPU twin of :func:`fastdyn.drive.integrate_kernels.rk4_kernel` (same arguments, same
    results)."""
    _run(False, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, t0, times,
         spt, 0.0, settle_tol, max_steps, tpos, test_part, train_part, f_track)  # fmt: skip


def gd_kernel(lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, k0, kout, eta,
              settle_tol, max_steps, tpos, test_part, train_part, f_track):  # fmt: skip
    """GPU twin of :func:`fastdyn.drive.integrate_kernels.gd_kernel` (same arguments, same
    results)."""
    _run(True, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, k0, kout,
         0.0, eta, settle_tol, max_steps, tpos, test_part, train_part, f_track)  # fmt: skip


__all__ = ["gd_kernel", "rk4_kernel"]
_ = np  # float64 arrays throughout (see fastdyn.drive.integrate)
