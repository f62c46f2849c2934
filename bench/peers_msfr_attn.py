"""msfr-attn trained attention, fastdyn vs the strongest peers in the same run.

    python bench/peers_msfr_attn.py [--only sparse,dense] [--sparse-tasks 100000]
                                    [--sparse-samples 1000000] [--sparse-psi0 100]
                                    [--dense-tasks 8] [--dense-samples 20000] [--dense-psi0 20]
                                    [--epochs 5] [--repeats 3] [--no-torch] [--peak-n 2048]

Workloads (float64 arithmetic, block embedding, merged W_KQ, linear attention, Rademacher x, full
batch GD from the same θ0 = 0.01·N(0, 1) draws; each case's θ_E − θ0 and its own loss at θ_E are
checked against fastdyn's):

- ``sparse``: exact sparse features, model size D = N_s (``bench/msfr_train.py``'s sizes,
  ψ0 = 100, α = 2). fastdyn: ``kernels.loss_and_grad`` + a GD step per epoch. Peers: per
  sequence the task s, the query q, Λ_s and S2 = Σ_ctx x_t² precomputed once (untimed; fastdyn's
  workspace stores S2 and q once too, also untimed), ŷ = q (S2 (u·v_s)(u·w_s) + q² v_x w_x) with
  the four local weights gathered per sequence (the gradient is their scatter-add).
- ``dense``: feature noise σ = 0.01 on every off-task coordinate (``data/configs/msfr_noise.toml``:
  N_s = D = 8, ψ0 = 20; N = --dense-samples). fastdyn: the dense kernel. Peers, each with its
  per-sequence arrays precomputed once: (a) fastdyn's algebra, the token matrix Z (ψ+1 tokens ×
  d_tok, zero-padded to the longest sequence), ŷ = Σ_t (Z v)_t (Z W z_q)_t; (b) the second moments
  S_n = Z_nᵀ Z_n (d_tok × d_tok), ŷ = (S_n v)·(W z_q).

Peers: JAX ``jit`` of a ``lax.fori_loop`` over the E epochs (``jax.grad``), ``torch.compile`` of the
loss with autograd and an in-place GD step per epoch (1 and 2 threads). FLOPs and bytes per epoch:
bench/_flops.py; printed as GFLOP/s, GB/s and % of the peaks measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _flops  # noqa: E402
import _peers  # noqa: E402


def make_loss(xp, kind, d, arr):
    """θ ↦ L = mean (ŷ − y)²/2 of workload ``kind`` on the arrays ``arr`` (xp arrays)."""
    if kind == "sparse":  # θ = [vx, vy, kx, ky] (4d), sequences of tasks s < d (others constant)
        s, q, lam, S2, y, const, m = arr

        def loss(theta):
            vx, vy, wx, wy = (theta[k * d : (k + 1) * d][s] for k in range(4))
            yh = q * (S2 * (vx + lam * vy) * (wx + lam * wy) + q * q * vx * wx)
            return (0.5 * ((yh - y) ** 2).sum() + const) / m

        return loss
    dt = 2 * d
    if kind == "dense_Z":
        Z, zq, y = arr

        def pred(theta):
            v, W = theta[:dt], theta[dt:].reshape(dt, d)
            return ((Z @ v) * xp.einsum("ntc,nc->nt", Z, zq @ W.T)).sum(axis=1)
    else:
        S, zq, y = arr

        def pred(theta):
            v, W = theta[:dt], theta[dt:].reshape(dt, d)
            return ((S @ v) * (zq @ W.T)).sum(axis=1)

    def loss(theta):
        return 0.5 * ((pred(theta) - y) ** 2).mean()

    return loss


def jax_trainer(jax, kind, d, host, lr, epochs):
    jnp = jax.numpy
    return _peers.jax_gd(
        jax, make_loss(jnp, kind, d, tuple(jnp.asarray(x) for x in host)), lr, epochs
    )


def torch_trainer(torch, kind, d, host, lr, epochs):
    import numpy as np

    arr = tuple(torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in host)
    return _peers.torch_gd(torch, make_loss(torch, kind, d, arr), lr, epochs)


def peer_arrays(kind, d, data):
    """{label suffix: (loss kind, host arrays)}: per-sequence arrays, computed once (untimed)."""
    import numpy as np

    x = data.x.astype(np.float64)
    q = x[data.offset[1:] - 1]
    lam = data.lam[data.task]
    y = lam * q
    if kind == "sparse":
        cs = np.concatenate([[0.0], np.cumsum(x * x)])
        S2 = cs[data.offset[1:] - 1] - cs[data.offset[:-1]]  # Σ over the context tokens
        on = data.task < d
        const = 0.5 * float((y[~on] ** 2).sum())
        host = (data.task[on], q[on], lam[on], S2[on], y[on], const, float(data.n))
        return {", S2 precomputed": ("sparse", host)}
    n, dt = data.n, 2 * d
    lens = np.diff(data.offset)
    L = int(lens.max())
    Z = np.zeros((n, L, dt))
    for i in range(n):  # untimed set-up, as the dense kernel builds each token
        a, T, s = data.offset[i], lens[i], data.task[i]
        c = np.arange(d)
        phi = data.scale[(c - s) % data.n_tasks] * data.noise[a : a + T, :d].astype(np.float64)
        if s < d:
            phi[:, s] = x[a : a + T]
            Z[i, : T - 1, 2 * s + 1] = data.lam[s] * x[a : a + T - 1]
        Z[i, :T, 0::2] = phi
    zq = np.ascontiguousarray(Z[np.arange(n), lens - 1, 0::2])
    S = np.einsum("ntb,ntc->nbc", Z, Z)
    return {
        ", token matrix Z (fastdyn's algebra)": ("dense_Z", (Z, zq, y)),
        ", S_n = Z_n^T Z_n precomputed": ("dense_S", (S, zq, y)),
    }


def bench(kind, a, jax, torch, peaks) -> None:
    import numba
    import numpy as np

    from fastdyn.models.msfr.config import InitSection, TaskSection
    from fastdyn.models.msfr.problem import MsfrProblem
    from fastdyn.models.msfr_attn import kernels as K
    from fastdyn.models.msfr_attn import problem as msfr_seq

    if kind == "sparse":
        ns, N, psi0, lr, noise = a.sparse_tasks, a.sparse_samples, a.sparse_psi0, 1e-3, 0.0
    else:
        ns, N, psi0, lr, noise = a.dense_tasks, a.dense_samples, a.dense_psi0, 2e-3, 0.01
    E = a.epochs
    p = MsfrProblem(TaskSection(n_tasks=ns, n_samples=float(N), psi0=psi0), InitSection(), 0)
    data = msfr_seq.training_set(p, feature_noise=noise)
    layout = K.Layout(ns, dense=kind == "dense")
    ws = K.Workspace(layout, data)
    theta0 = 0.01 * np.random.default_rng(0).standard_normal(layout.n_params)
    lens = np.diff(data.offset)
    if kind == "sparse":
        flops, nbytes = _flops.msfr_sparse(data.n)
    else:
        flops, nbytes = _flops.msfr_dense(lens, ns)
    title = (
        f"msfr-attn {kind} (block, merged, linear; N_s = D = {ns}, N = {data.n}, psi0 = {psi0:g}, "
        f"{int(lens.sum())} tokens), {E} GD epochs"
    )
    nthr = numba.config.NUMBA_NUM_THREADS

    def fd(k):
        def run():
            numba.set_num_threads(k)
            theta, grad = theta0.copy(), np.empty(layout.n_params)
            for _ in range(E):
                K.loss_and_grad(theta, layout, data, grad, ws)
                theta -= lr * grad
            numba.set_num_threads(nthr)
            return theta

        return _peers.Call(run)

    threads = (1, min(2, nthr))
    cases = {f"fastdyn {k} thread(s)": fd(k) for k in threads}
    ref = f"fastdyn {threads[-1]} thread(s)"
    res, losses = _peers.measure_with_peers(
        cases, peer_arrays(kind, ns, data), jax, torch,
        lambda lk, host: jax_trainer(jax, lk, ns, host, lr, E),
        lambda lk, host: torch_trainer(torch, lk, ns, host, lr, E),
        theta0, a.repeats, title, E, ref, flops,
    )  # fmt: skip
    _peers.efficiency(res, E, flops, nbytes, peaks)

    def loss_fd(t):
        return K.loss_and_grad(t, layout, data, np.empty(layout.n_params), ws)

    _peers.compare(cases, res, ref, theta0, E, loss_fd, losses)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="sparse,dense")
    ap.add_argument("--sparse-tasks", type=int, default=100_000)
    ap.add_argument("--sparse-samples", type=int, default=1_000_000)
    ap.add_argument("--sparse-psi0", type=float, default=100.0)
    ap.add_argument("--dense-tasks", type=int, default=8)
    ap.add_argument("--dense-samples", type=int, default=20_000)
    ap.add_argument("--dense-psi0", type=float, default=20.0)
    ap.add_argument("--epochs", type=int, default=5)
    _peers.main(ap, bench)


if __name__ == "__main__":
    main()
