"""ICL per-sample training, fastdyn vs the strongest peers in the same run (issue 20).

    python bench/peers_icl.py [--epochs 200] [--repeats 3] [--softmax-p 20000]
                              [--softmax-epochs 10] [--only attn_m,softmax] [--no-torch]
                              [--peak-n 2048]

Workloads (float64 everywhere; each peer trains E full-batch GD epochs from the same θ0 and its
θ_E − θ0 is checked against fastdyn's):

- ``attn_m``: Fig. 1 (ATTN_M, D = 4, N = 31, H = 8, P = 5000, ρ = 1, init 1e-6 reference,
  lr 1e-3, last-token loss). fastdyn: the E epochs in one call of the fused GD steps the
  trained-run driver takes between saves (``gd_steps``; the driver's blocks are ≈ 20 ms), and
  the bench harness of bench/icl_train.py beside it (``loss_and_grad`` + GD step, a Python call
  per epoch). Peers use the precomputed per-sample statistics S_μ = Σ_j x̂_j x̂_jᵀ
  (query label zero), so ŷ_μ = Σ_i r_iᵀ S_μ W_i x_q,μ is a few small matmuls per sample:
  JAX ``jit`` of a ``lax.fori_loop`` over the E epochs (``jax.grad``), and ``torch.compile`` of
  the loss with autograd and an in-place GD update per epoch. Each peer twice: per head as
  written above, and with fastdyn's algebra (M_abc = Σ_i r_ia W_ibc, symmetrised, S_μ packed to
  its (D+1)(D+2)/2 entries a ≤ b: ŷ_μ = Σ Sp_μq Mp_qc x_q,μc, one (P × 15)·(15 × D) matmul).
- ``softmax``: ATTN_S with softmax (D = 8, N = 31, H = 9, R = 1, P = 20000 by default (Fig. 4:
  80000), init 5e-3 reference, lr 2e-2): ŷ_μ = Σ_i Σ_j softmax_j(x̂_jᵀ B_i x_q) r_iᵀ x̂_j,
  B_i = K_iᵀ Q_i, over the N+1 tokens. Same peers (the query row only, as fastdyn).

FLOP counts per sample (by hand from the kernels, loss + gradient):
- ATTN_M executed by fastdyn (lin_last, structure-of-arrays over samples, every multiply and add
  counted, no FMA): 4·NQ + 4D + 4, NQ = NP·D, NP = (D+1)(D+2)/2 (g_c = Σ_p M_pc S_p from zero:
  2 NQ; ŷ = Σ_c x_c g_c: 2D; δ and δ²: 4; wx_c = (δ/ρ) x_c: 2D; T_pc += S_p wx_c: 2 NQ), plus per
  block the pairwise lane sums ((1 + NQ)(LANES − 1)) and per epoch the O(H D³) contractions
  (≈ 4 H D1² D); "brute-force equivalent"
  with precomputed S: 3 × forward, forward = H(2 D1 D + 2 D1² + 2 D1) (W x_q, S·, r·);
  "authors' formulation" (full (N+1)² attention, no precompute): 3 × H(4 (N+1) D1² + 4 (N+1)² D1).
- softmax: forward H(2 D1 D + (N+1)(4 D1 + 4)), backward H(N+1)(3 + D1(3 + 2D)); H(N+1) exps.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _peers import header, measure, optional, rel_diff, report, setup_env  # noqa: E402


def attn_m_flops(D, N, H, P):
    from fastdyn.models.attn_m.kernels import LANES
    from fastdyn.reduce import n_blocks

    D1 = D + 1
    nq = D * D1 * (D1 + 1) // 2
    lanes = n_blocks(P) * (1 + nq) * (LANES - 1)
    executed = P * (4 * nq + 4 * D + 4) + lanes + 4 * H * D1 * D1 * D
    brute = P * 3 * H * (2 * D1 * D + 2 * D1 * D1 + 2 * D1)
    authors = P * 3 * H * (4 * (N + 1) * D1 * D1 + 4 * (N + 1) ** 2 * D1)
    return executed, brute, authors


def softmax_flops(D, N, H, P):
    D1 = D + 1
    fwd = H * (2 * D1 * D + (N + 1) * (4 * D1 + 4))
    bwd = H * (N + 1) * (3 + D1 * (3 + 2 * D))
    return P * (fwd + bwd), P * H * (N + 1)


# ------------------------------------------------------------------ model functions (peers)


def attn_m_pred(xp, r, W, S, xq):
    """ŷ_μ = Σ_i r_iᵀ S_μ W_i x_q,μ (xp: jax.numpy or torch)."""
    Wx = xp.einsum("ibc,pc->pib", W, xq)  # (P, H, D1)
    SWx = xp.einsum("pab,pib->pia", S, Wx)
    return xp.einsum("pia,ia->p", SWx, r)


def attn_m_pred_packed(xp, r, W, Sp, xq, iu):
    """The same ŷ through M_abc = Σ_i r_ia W_ibc, symmetrised and packed to a ≤ b like S:
    Sp_μq = S_μ,ab (×2 off the diagonal), ŷ_μ = Σ_qc Sp_μq Mp_qc x_q,μc (fastdyn's algebra)."""
    M = xp.einsum("ia,ibc->abc", r, W)
    Mp = (0.5 * (M + xp.swapaxes(M, 0, 1)))[iu[0], iu[1]]  # (NP, D)
    return ((Sp @ Mp) * xq).sum(axis=1)


def softmax_pred(xp, softmax, r, K, Q, X, xq):
    """ŷ_μ = Σ_i Σ_j softmax_j(x̂_jᵀ B_i x_q) r_iᵀ x̂_j, B_i = K_iᵀ Q_i."""
    B = xp.einsum("irb,irc->ibc", K, Q)  # (H, D1, D)
    a = xp.einsum("ibc,pc->pib", B, xq)  # (P, H, D1)
    s = xp.einsum("pjb,pib->pij", X, a)  # (P, H, N+1)
    o = xp.einsum("pjb,ib->pij", X, r)
    return (softmax(s) * o).sum(axis=(1, 2))


def _split(theta, model):
    out, o = [], 0
    for _, shape in model.blocks:
        n = 1
        for d in shape:
            n *= d
        out.append(theta[o : o + n].reshape(shape))
        o += n
    return out


def jax_trainer(jax, model, kind, data_args, lr, epochs):
    jnp = jax.numpy
    mask = jnp.asarray(model.mask, dtype=jnp.float64)

    if kind == "attn_m":
        S, xq, yq = data_args

        def loss(theta):
            r, W = _split(theta, model)
            return jnp.mean((yq - attn_m_pred(jnp, r, W, S, xq)) ** 2)
    elif kind == "attn_m_packed":
        Sp, xq, yq, iu = data_args

        def loss(theta):
            r, W = _split(theta, model)
            return jnp.mean((yq - attn_m_pred_packed(jnp, r, W, Sp, xq, iu)) ** 2)
    else:
        X, xq, yq = data_args

        def loss(theta):
            r, K, Q = _split(theta, model)
            yh = softmax_pred(jnp, lambda s: jax.nn.softmax(s, axis=-1), r, K, Q, X, xq)
            return jnp.mean((yq - yh) ** 2)

    g = jax.grad(loss)

    @jax.jit
    def train(theta):
        return jax.lax.fori_loop(0, epochs, lambda _, th: th - lr * mask * g(th), theta)

    return train


def torch_trainer(torch, model, kind, data_args, lr, epochs):
    mask = torch.tensor(model.mask, dtype=torch.float64)

    if kind == "attn_m":
        S, xq, yq = data_args

        def loss(theta):
            r, W = _split(theta, model)
            return torch.mean((yq - attn_m_pred(torch, r, W, S, xq)) ** 2)
    elif kind == "attn_m_packed":
        Sp, xq, yq, iu = data_args

        def loss(theta):
            r, W = _split(theta, model)
            return torch.mean((yq - attn_m_pred_packed(torch, r, W, Sp, xq, iu)) ** 2)
    else:
        X, xq, yq = data_args

        def loss(theta):
            r, K, Q = _split(theta, model)
            yh = softmax_pred(torch, lambda s: torch.softmax(s, dim=-1), r, K, Q, X, xq)
            return torch.mean((yq - yh) ** 2)

    closs = torch.compile(loss)

    def train(theta0):
        theta = theta0.clone().requires_grad_(True)
        for _ in range(epochs):
            L = closs(theta)
            (gr,) = torch.autograd.grad(L, theta)
            with torch.no_grad():
                theta -= lr * mask * gr
        return theta.detach()

    return train


class _Case:
    """A timed callable whose result sits in ``store[key]`` (read back by ``.out``)."""

    def __init__(self, fn, store, key):
        self.fn, self.store, self.key = fn, store, key

    def __call__(self):
        self.fn()

    @property
    def out(self):
        return self.store[self.key]


def bench(kind, a, jax, torch) -> None:
    import numba
    import numpy as np

    from fastdyn.drive.optim import make_optimizer
    from fastdyn.models.attn_m import AttnM
    from fastdyn.models.attn_s import AttnS
    from fastdyn.problems.icl import generate

    if kind == "attn_m":
        D, N, H, P, init, lr, E = 4, 31, 8, 5000, 1e-6, 1e-3, a.epochs
        model = AttnM(D, H, N, attention_scale="1")
        title = f"ICL Fig. 1 ATTN_M per-sample (D={D}, N={N}, H={H}, P={P}), {E} GD epochs"
    else:
        D, N, H, P, init, lr, E = 8, 31, 9, a.softmax_p, 5e-3, 2e-2, a.softmax_epochs
        model = AttnS(D, H, N, R=1, attention_scale="1", softmax=True)
        title = f"ICL softmax ATTN_S (D={D}, N={N}, H={H}, R=1, P={P}), {E} GD epochs"
    data = generate(D, N, P, seed=0)
    prep = model.prepare(data.tokens, data.labels)
    theta0 = model.init("reference", init, 0)
    nthr = numba.config.NUMBA_NUM_THREADS

    advance = model.gd_steps(prep) if hasattr(model, "gd_steps") else None

    def fd(k, per_epoch):
        def run():
            numba.set_num_threads(k)
            theta = theta0.copy()
            if per_epoch:
                grad = np.empty(model.n_params)
                opt = make_optimizer("gd", model.n_params, lr)
                for _ in range(E):
                    model.loss_and_grad(theta, prep, grad)
                    opt.step(theta, grad)
            else:
                advance(theta, lr, np.empty(E), np.inf)
            numba.set_num_threads(nthr)
            run.out = theta - theta0

        return run

    threads = (1, min(2, nthr))
    cases = {f"fastdyn {k} thread(s)": fd(k, advance is None) for k in threads}
    if advance is not None:
        cases |= {f"fastdyn {k} thread(s), a call per epoch": fd(k, True) for k in threads}
    for c in cases.values():
        c()
    tok = np.ascontiguousarray(data.tokens, dtype=np.float64)  # query label already zero
    xq = np.ascontiguousarray(tok[:, -1, :D])
    yq = np.ascontiguousarray(data.labels[:, -1], dtype=np.float64)
    variants = {}  # label suffix -> (trainer kind, host arrays, index arrays)
    if kind == "attn_m":
        S = np.einsum("pja,pjb->pab", tok, tok)  # S_μ, once (not timed)
        iu = np.triu_indices(D + 1)
        Sp = S[:, iu[0], iu[1]] * np.where(iu[0] == iu[1], 1.0, 2.0)
        variants[", per head, S_mu precomputed"] = ("attn_m", (S, xq, yq), ())
        variants[", packed S_mu + contracted M"] = ("attn_m_packed", (Sp, xq, yq), iu)
    else:
        variants[""] = ("softmax", (tok, xq, yq), ())
    for suffix, (k2, host, idx) in variants.items():
        if jax is not None:
            jd = tuple(jax.numpy.asarray(x) for x in host) + ((idx,) if len(idx) else ())
            f = jax_trainer(jax, model, k2, jd, lr, E)
            th = jax.numpy.asarray(theta0)

            jx_out = {}

            def jx(f=f, th=th, jx_out=jx_out):
                jx_out[0] = np.asarray(f(th).block_until_ready()) - theta0

            jx()
            cases["JAX jit fori_loop" + suffix] = _Case(jx, jx_out, 0)
        if torch is not None:
            td = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in host)
            td = td + ((tuple(torch.from_numpy(i) for i in idx),) if len(idx) else ())
            f_t = torch_trainer(torch, model, k2, td, lr, E)
            th_t = torch.from_numpy(theta0.copy())
            # torch on 1 and 2 threads: on the loaded 2-core machine its OpenMP pool on 2 threads
            # was up to 6x slower than 1 thread (spinning workers), so both are shown
            for nt in (1, 2):
                tc_out = {}

                def tc(f_t=f_t, th_t=th_t, tc_out=tc_out, nt=nt):
                    torch.set_num_threads(nt)
                    tc_out[0] = f_t(th_t).numpy() - theta0

                try:
                    for _ in range(3):  # the first calls compile, and recompile once or twice
                        tc()
                    cases[f"torch.compile {nt}t" + suffix] = _Case(tc, tc_out, 0)
                except Exception as e:  # inductor needs a C++ compiler: report, do not fail
                    print(
                        f"  torch.compile: skipped ({e.__class__.__name__}: {str(e).splitlines()[0]})"
                    )
                    break
    res = measure(cases, a.repeats)
    ref = f"fastdyn {min(2, nthr)} thread(s)"
    if kind == "attn_m":
        ex, brute, authors = attn_m_flops(D, N, H, P)
        report(title, res, E, "epoch", ref, ex)
        w = res[ref].wall_med / E
        print(
            f"  flops per epoch: executed by fastdyn {ex:.3g}, brute-force with S precomputed "
            f"{brute:.3g} ({brute / w * 1e-9:.1f} GFLOP/s equivalent), authors' full attention "
            f"{authors:.3g} ({authors / w * 1e-9:.1f} GFLOP/s equivalent) at fastdyn's 2-thread wall"
        )
        peers = {k: t for k, t in res.items() if not k.startswith("fastdyn")}
        if peers:
            best = min(peers, key=lambda k: peers[k].wall_med)
            print(
                f"  strongest peer: {best}, {peers[best].wall_med / E * 1e3:.3f} ms/epoch; fastdyn "
                f"{w * 1e3:.3f} ms/epoch: {peers[best].wall_med / res[ref].wall_med:.2f}x"
            )
        if a.peak_n:
            from peak import matmul_gflops

            for k in (1, min(2, nthr)):
                t = res[f"fastdyn {k} thread(s)"]
                pk = matmul_gflops(a.peak_n, 3, k)
                gw, gc = ex * E / t.wall_med * 1e-9, ex * E / t.cpu_med * 1e-9
                print(
                    f"  fastdyn {k} thread(s): {gw:.2f} GFLOP/s wall ({gc:.2f} per CPU-second) "
                    f"= {100 * gw / pk:.1f} % of the measured {k}-thread float64 matmul peak "
                    f"{pk:.1f} GFLOP/s (bench/peak.py, n = {a.peak_n}, same run)"
                )
    else:
        fl, ex = softmax_flops(D, N, H, P)
        report(title, res, E, "epoch", ref, fl)
        for k, t in res.items():
            print(f"  {k:<46} {ex * E / t.wall_med * 1e-9:.3f} Gexp/s ({ex:.3g} exps per epoch)")
    for k, c in cases.items():
        if k != ref:
            print(
                f"  max relative difference of theta_E - theta_0, {k} vs fastdyn: {rel_diff(c.out, cases[ref].out):.1e}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=200, help="ATTN_M epochs per timed run")
    ap.add_argument("--softmax-p", type=int, default=20000)
    ap.add_argument("--softmax-epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="attn_m,softmax")
    ap.add_argument("--no-torch", action="store_true", help="skip torch.compile (slow to compile)")
    ap.add_argument(
        "--peak-n", type=int, default=2048, help="matmul size of the FLOP peak (0: skip) [2048]"
    )
    a = ap.parse_args()
    setup_env()
    header()
    jax = optional("jax")
    torch = None if a.no_torch else optional("torch")
    for kind in a.only.split(","):
        bench(kind, a, jax, torch)


if __name__ == "__main__":
    main()
