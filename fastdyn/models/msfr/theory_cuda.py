"""CUDA twin of :func:`fastdyn.models.msfr.theory.loss_partials` (the closed-form loss, levels
"leading" and "first_order").

Same arguments in the same order, same output: ``test_partials[b, k]`` = Σ_{i in block b}
wtest_i r_i(t_k)²/2 and ``train_partials`` with rate_i, block b = tasks [b·BLOCK, (b+1)·BLOCK),
each summed serially in task order. Three launches:

1. one thread per task computes its Riccati constants once (the CPU's own
   :func:`._closed_form.closed_form_setup` and :func:`~._closed_form.riccati_setup`, compiled for
   the device from the same Python source: a sqrt, two logs and divisions) and stores them, with
   its rate and test weight, as 12 rows of a (12, n) array (task index fastest: coalesced);
2. one thread per (task, time) evaluates :func:`~._closed_form.riccati_eval` and stores r², in
   tiles of whole blocks (TILE_VALUES values at a time);
3. one thread per (block, time) adds its block's loss terms w r²/2 in task order, so the
   reduction order is fixed and the result independent of the launch.

The set-up is not repeated per time, and the evaluations run in parallel over tasks (the first
version of this twin recomputed the set-up in every (task, time) thread and walked each block's
1024 tasks serially; bench/RESULTS.md has both).

The CPU's fast paths for balanced logistics (a Taylor series before emergence, a branch-free exp)
agree with ``math.exp`` to a few ulp, and the GPU's libdevice exp/log with glibc's to about as
much: CPU and GPU partials agree to ~1e-14 relative (measured 5.7e-14 on an H200; tests/cuda).
The input arrays are copied to the device once per host array (:mod:`fastdyn._cuda_memory`), the
constants and partials live in reused device buffers. The exact finite-ψ level integrates an
adaptive ODE per task and has no GPU twin (a clear ValueError).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ... import _cuda_memory as _mem
from ...reduce import BLOCK
from ._closed_form import EXACT, closed_form_setup, riccati_eval, riccati_setup

_kernels: dict[str, object] = {}
#: rows of the per-task constants array: λ_eff, κ_eff, P+, P−, R, σ, log|K|, sign K, mirror,
#: c = rate·κ_eff·R (ℓ(t) = log|K| − c t), rate, w_test
N_CONST = 12


def _build() -> dict[str, object]:
    setup = cuda.jit(device=True)(closed_form_setup.py_func)
    rsetup = cuda.jit(device=True)(riccati_setup.py_func)
    reval = cuda.jit(device=True)(riccati_eval.py_func)

    @cuda.jit
    def constants(level, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, C):
        i = cuda.grid(1)
        if i >= lam.shape[0]:
            return
        lam_e, kap, cm, g, h = setup(level, lam[i], psi[i], v0x[i], v0y[i], w0x[i], w0y[i])
        pp, pm, rr, sig, logk, sk, mir = rsetup(lam_e, kap, g, h)
        C[0, i] = lam_e
        C[1, i] = kap
        C[2, i] = pp
        C[3, i] = pm
        C[4, i] = rr
        C[5, i] = sig
        C[6, i] = logk
        C[7, i] = sk
        C[8, i] = mir
        C[9, i] = rate[i] * kap * rr
        C[10, i] = rate[i]
        C[11, i] = wtest[i]

    @cuda.jit
    def squares(times, C, first, R2):
        """R2[k, x] = r(t_k)² of task first + x: one thread per (task, time), task fastest (the
        constants are read coalesced)."""
        x, k = cuda.grid(2)
        m = min(R2.shape[1], C.shape[1] - first)
        if x >= m or k >= R2.shape[0]:
            return
        i = first + x
        f, r = reval(
            C[6, i] - C[9, i] * times[k], C[0, i], C[1, i], C[2, i], C[3, i], C[4, i], C[5, i],
            C[7, i], C[8, i],
        )  # fmt: skip
        R2[k, x] = r * r

    @cuda.jit
    def partials(R2, C, first, b0, test_p, train_p):
        """Rows b0 … of the partials from the squares of the tile starting at task ``first``:
        one thread per (block, time), adding its block's tasks in order (time fastest: a warp's
        threads read the same task's weights, one broadcast)."""
        k, bb = cuda.grid(2)
        nt = R2.shape[0]
        b = b0 + bb
        lo = b * BLOCK
        hi = min(C.shape[1], lo + BLOCK, first + R2.shape[1])
        if k >= nt or lo >= hi or b >= test_p.shape[0]:
            return
        at = 0.0
        ar = 0.0
        for i in range(lo, hi):
            d2 = R2[k, i - first]
            at += C[11, i] * d2
            ar += C[10, i] * d2
        test_p[b, k] = at * 0.5
        train_p[b, k] = ar * 0.5

    return {"constants": constants, "squares": squares, "partials": partials}


#: tasks × times of r² held at once: 2^25 float64 (256 MiB); a tile is a whole number of blocks
TILE_VALUES = 1 << 25


def _tile_tasks(n: int, nt: int) -> int:
    return min(-(-n // BLOCK) * BLOCK, max(BLOCK, TILE_VALUES // max(nt, 1) // BLOCK * BLOCK))


def checked_partials(
    code: int,
    t: np.ndarray,
    arrs: tuple[np.ndarray, ...],
    wt: np.ndarray,
    test_partials: np.ndarray,
    train_partials: np.ndarray,
) -> None:
    """GPU twin of :func:`fastdyn.models.msfr.theory.loss_partials` (``device="cuda"``), from
    its checked arguments (:func:`~fastdyn.models.msfr._args.partials_args`: level code, times,
    the 7 task arrays, wtest). The exact level (an adaptive ODE per task) has no GPU twin."""
    if code == EXACT:
        raise ValueError(
            "theory.level = 'exact' has no CUDA kernel (an adaptive ODE per task); use 'leading' or 'first_order', or device = 'cpu'"
        )
    if not _kernels:
        _kernels.update(_build())
    n = arrs[0].shape[0]
    names = ("lam", "psi", "rate", "v0x", "v0y", "w0x", "w0y")
    d = {k: _mem.resident("closed", k, a) for k, a in zip(names, arrs, strict=True)}
    d_wt = _mem.resident("closed", "wtest", wt)
    C = _mem.buffer("closed", "constants", (N_CONST, n))
    tpb = 128
    _kernels["constants"][max(1, math.ceil(n / tpb)), tpb](
        code, d["lam"], d["psi"], d["rate"], d_wt, d["v0x"], d["v0y"], d["w0x"], d["w0y"], C
    )
    shape = test_partials.shape
    nt = shape[1]
    dt = _mem.buffer("closed", "test_partials", shape)
    dr = _mem.buffer("closed", "train_partials", shape)
    d_t = _mem.to_device("closed", "times", t)
    tile = _tile_tasks(n, nt)
    R2 = _mem.buffer("closed", "squares", (nt, tile))
    tx = min(32, 1 << max(0, (nt - 1).bit_length()))
    for first in range(0, n, tile):
        m = min(tile, n - first)
        _kernels["squares"][(math.ceil(m / 128), nt), (128, 1)](d_t, C, first, R2)
        nbt = -(-m // BLOCK)
        grid = (math.ceil(nt / tx), math.ceil(nbt / (128 // tx)))
        _kernels["partials"][grid, (tx, 128 // tx)](R2, C, first, first // BLOCK, dt, dr)
    dt.copy_to_host(test_partials)
    dr.copy_to_host(train_partials)
