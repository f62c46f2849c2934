"""Bench: one full-batch GD epoch of msfr-attn (block/merged, Rademacher) vs a dense numpy model.

    .venv/bin/python bench/msfr_train.py [--n-tasks 100000 --n-samples 1000000 --psi0 100]

Prints seconds per epoch of the sparse per-sample kernel (min of 5 after warm-up) and of the dense
numpy implementation (explicit Z, ŷ = v·Z Zᵀ·W·z_q, autograd-free hand gradient through the dense
matrices) on a small instance, and the per-sequence speedup on that same instance.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastdyn.models.msfr.config import InitSection, TaskSection
from fastdyn.models.msfr.problem import MsfrProblem
from fastdyn.models.msfr_attn import kernels as K
from fastdyn.models.msfr_attn import problem as msfr_seq


def epoch_time(layout, data, reps=5):
    th = np.full(layout.n_params, 1e-2)
    g = np.zeros_like(th)
    ws = K.Workspace(layout, data)
    K.loss_and_grad(th, layout, data, g, ws)
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        K.loss_and_grad(th, layout, data, g, ws)
        best = min(best, time.perf_counter() - t0)
    return best


def dense_epoch(data, d, W, v):
    """Dense numpy: per sequence Z (2D × (ψ+1)), ŷ, and ∂/∂v, ∂/∂W (full matrices)."""
    gv = np.zeros_like(v)
    gW = np.zeros_like(W)
    for n in range(data.n):
        s = int(data.task[n])
        a, b = int(data.offset[n]), int(data.offset[n + 1])
        Z = np.zeros((2 * d, b - a))
        if s < d:
            Z[2 * s] = data.x[a:b]
            Z[2 * s + 1, :-1] = data.lam[s] * data.x[a : b - 1]
        zq = Z[:, -1]
        H = Z @ Z.T
        Wz = W @ zq
        err = v @ H @ Wz - data.lam[s] * zq[2 * s] if s < d else 0.0
        gv += err * (H @ Wz)
        gW += err * np.outer(H @ v, zq)
    return gv, gW


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-tasks", type=int, default=100_000)
    ap.add_argument("--n-samples", type=int, default=1_000_000)
    ap.add_argument("--psi0", type=float, default=100.0)
    ap.add_argument("--small-tasks", type=int, default=200)
    ap.add_argument("--small-samples", type=int, default=2000)
    a = ap.parse_args()
    p = MsfrProblem(
        TaskSection(n_tasks=a.n_tasks, n_samples=float(a.n_samples), psi0=a.psi0), InitSection(), 0
    )
    data = msfr_seq.training_set(p)
    big = epoch_time(K.Layout(a.n_tasks), data)
    print(f"sparse kernel, N_s={a.n_tasks}, N={a.n_samples}, psi0={a.psi0:g}: {big:.3f} s/epoch")
    ps = MsfrProblem(
        TaskSection(n_tasks=a.small_tasks, n_samples=float(a.small_samples), psi0=a.psi0),
        InitSection(),
        0,
    )
    ds = msfr_seq.training_set(ps)
    t_sp = epoch_time(K.Layout(a.small_tasks), ds)
    d = a.small_tasks
    t0 = time.perf_counter()
    dense_epoch(ds, d, np.full((2 * d, 2 * d), 1e-2), np.full(2 * d, 1e-2))
    t_dn = time.perf_counter() - t0
    print(
        f"small instance N_s={d}, N={a.small_samples}: sparse {t_sp:.2e} s, dense numpy {t_dn:.2e} s, speedup {t_dn / t_sp:.0f}x"
    )


if __name__ == "__main__":
    main()
