"""CUDA twin of :func:`fastdyn.models.msfr.theory.loss_partials` (the closed-form loss, levels
"leading" and "first_order").

Same arguments in the same order, same output: ``test_partials[b, k]`` = Σ_{i in block b}
wtest_i r_i(t_k)²/2 and ``train_partials`` with rate_i, block b = tasks [b·BLOCK, (b+1)·BLOCK),
each summed serially in task order. One CUDA thread per (block, time): it walks its block's tasks
in order, so the reduction order is fixed and the result is independent of the launch. Per task
the Riccati set-up and evaluation are the CPU's own functions (:mod:`._closed_form`, compiled for
the device from the same Python source) with ``math.exp``; the CPU's fast paths for balanced
logistics (a Taylor series before emergence, a branch-free exp) agree with that to a few ulp, so
CPU and GPU partials agree to ~1e-15 relative (tests/cuda). The exact finite-ψ level integrates
an adaptive ODE per task and has no GPU twin (a clear ValueError).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ...reduce import BLOCK
from ._args import _level_code, partials_args
from ._closed_form import EXACT, closed_form_setup, riccati_eval, riccati_setup

_kernel = None


def _build():
    setup = cuda.jit(device=True)(closed_form_setup.py_func)
    rsetup = cuda.jit(device=True)(riccati_setup.py_func)
    reval = cuda.jit(device=True)(riccati_eval.py_func)

    @cuda.jit
    def kernel(level, times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, test_p, train_p):
        b, k = cuda.grid(2)
        nb, nt = test_p.shape
        if b >= nb or k >= nt:
            return
        n = lam.shape[0]
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        at = 0.0
        ar = 0.0
        t = times[k]
        for i in range(lo, hi):
            lam_e, kap, cm, g, h = setup(level, lam[i], psi[i], v0x[i], v0y[i], w0x[i], w0y[i])
            pp, pm, rr, sig, logk, sk, mir = rsetup(lam_e, kap, g, h)
            c = rate[i] * kap * rr
            f, r = reval(logk - c * t, lam_e, kap, pp, pm, rr, sig, sk, mir)
            d2 = r * r
            at += wtest[i] * d2
            ar += rate[i] * d2
        test_p[b, k] = at * 0.5
        train_p[b, k] = ar * 0.5

    return kernel


def _launch2(nb: int, nt: int) -> tuple[tuple[int, int], tuple[int, int]]:
    tpb = (8, 32)
    return (math.ceil(nb / tpb[0]), math.ceil(nt / tpb[1])), tpb


def loss_partials(
    times: np.ndarray,
    lam: np.ndarray,
    psi: np.ndarray,
    rate: np.ndarray,
    wtest: np.ndarray,
    v0x: np.ndarray,
    v0y: np.ndarray,
    w0x: np.ndarray,
    w0y: np.ndarray,
    level: str,
    test_partials: np.ndarray,
    train_partials: np.ndarray,
    *,
    rtol: float = 0.0,
) -> None:
    """GPU twin of :func:`fastdyn.models.msfr.theory.loss_partials` (``rtol`` is accepted for
    the same signature; it only matters at the exact level, which has no GPU twin)."""
    global _kernel
    if _level_code(level) == EXACT:
        raise ValueError(
            "theory.level = 'exact' has no CUDA kernel (an adaptive ODE per task); use 'leading' or 'first_order', or device = 'cpu'"
        )
    code, t, arrs, wt = partials_args(
        times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, level, test_partials, train_partials
    )
    shape = test_partials.shape
    if _kernel is None:
        _kernel = _build()
    d = [cuda.to_device(a) for a in (t, *arrs[:3], wt, *arrs[3:])]
    dt, dr = cuda.device_array(shape), cuda.device_array(shape)
    grid, block = _launch2(*shape)
    _kernel[grid, block](code, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], dt, dr)
    dt.copy_to_host(test_partials)
    dr.copy_to_host(train_partials)
