"""ICL per-sample training, fastdyn vs the strongest peers in the same run.

    python bench/peers_icl.py [--only attn_m,cumulative,attn_s,attn_s_r4,softmax,mlp,large_d]
                              [--epochs 200] [--cum-epochs 20] [--fig4-p 80000]
                              [--fig4-epochs 10] [--softmax-p 20000] [--softmax-epochs 10]
                              [--large-d 12] [--large-p 16384] [--large-epochs 20]
                              [--repeats 3] [--no-torch] [--peak-n 2048]

Workloads (float64 everywhere; each case trains E full-batch GD epochs from the same θ0; its
θ_E − θ0 and its own loss at θ_E are checked against fastdyn's):

- ``attn_m``: Fig. 1 (ATTN_M, D = 4, N = 31, H = 8, P = 5000, ρ = 1, init 1e-6 reference,
  lr 1e-3, last-token loss). fastdyn: the E epochs in one call of the fused GD steps the
  trained-run driver takes between saves (``gd_steps``), and ``loss_and_grad`` + GD step with a
  Python call per epoch beside it.
- ``cumulative``: the same with the cumulative loss (prefixes n = 1..N), P = 5000.
- ``attn_s``, ``attn_s_r4``: Fig. 4 (``data/configs/icl_fig4.toml``: ATTN_S, D = 8, N = 31, H = 9,
  P = 80000, ρ = 1, init 5e-3 reference, lr 2e-2) with R = 1 and R = 4.
- ``softmax``: ATTN_S with softmax, R = 1, Fig. 4's sizes (P = --softmax-p).
- ``mlp``: MLP-cubic (D = 8, H = 9, N = 31, ρ = N, P = --fig4-p, init 5e-3, lr 2e-2).
- ``large_d``: ATTN_M at D = --large-d (N = 31, H = 8, ρ = 1, P = --large-p, init 1e-3 reference,
  lr 1e-4, last-token loss), where NQ = NP·D > 1024 and fastdyn takes no moments
  (``config.icl.uses_moments`` false: every epoch runs the per-sample kernel ``lin_last``, fused
  by ``gd_steps``). The peers' moments are shown beside it as "not fastdyn's algebra".

Minibatch SGD and Adam: bench/peers_icl_minibatch.py.

fastdyn takes a full-batch step of linear attention (``attn_m``, ``cumulative``, ``attn_s*``)
from the data's moments (G = Σ φφᵀ, b = Σ yφ, y2 over the rows, φ = Sp ⊗ x_q: ŷ = φ·m is linear
in the NQ = NP·D folded weights m = vec(Mp), so L = (y2 − 2m·b + m·Gm)/n), and the MLP from its
sufficient statistics (yy, c = ⟨yz⟩, C = ⟨zzᵀ⟩); both are taken once (untimed, the time printed).
Every fastdyn case other than the fused ones (``gd_steps``) is ``model.loss_and_grad`` + a GD step
per epoch; "per-sample kernel" cases run the per-sample kernels on the same set for comparison.
The peers, each as JAX ``jit`` of a ``lax.fori_loop`` over the E epochs (``jax.grad``) and as
``torch.compile`` of the loss with autograd and an in-place GD update per epoch (1 and 2 threads),
with every statistic precomputed once (untimed):

- "moments (quadratic form)": fastdyn's algebra, L = ⟨y²⟩ − 2 m·⟨yφ⟩ + mᵀ⟨φφᵀ⟩m with m folded
  from the heads as below (MLP: γ = Σ_i w2_i W1_i); the moments by one numpy matmul (printed);
- "packed": S_μ = Σ_j x̂_j x̂_jᵀ packed to its NP = (D+1)(D+2)/2 entries a ≤ b (off-diagonal
  doubled), the heads folded into M_abc = Σ_i r_ia B_ibc (symmetrised, packed: ŷ = Σ Sp_μq Mp_qc
  x_q,μc, one (P × NP)·(NP × D) matmul), B_i = K_iᵀ Q_i for ATTN_S; the cumulative loss with the
  N prefix S_n precomputed (P·N rows); MLP with the features Z precomputed;
- softmax on the query row only (no moments: ŷ is not linear in the weights);
- ATTN_M also per head (ŷ = Σ_i r_iᵀ S_μ W_i x_q).

FLOPs and bytes per epoch: bench/_flops.py (the counting rule and the algebra); printed beside each
case as GFLOP/s and % of the float64 matmul peak and of the triad bandwidth measured in the same run
(bench/peak.py, n = --peak-n).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _flops  # noqa: E402
import _peers  # noqa: E402

# ------------------------------------------------------------------ model functions (peers)


def _split(theta, model):
    out, o = [], 0
    for _, shape in model.blocks:
        n = 1
        for d in shape:
            n *= d
        out.append(theta[o : o + n].reshape(shape))
        o += n
    return out


def _heads(xp, theta, model):
    """(r, B): B = W (ATTN_M) or B_i = K_iᵀ Q_i (ATTN_S)."""
    parts = _split(theta, model)
    if len(parts) == 2:
        return parts
    r, K, Q = parts
    return r, xp.einsum("irb,irc->ibc", K, Q)


def _packed_pred(xp, r, B, Sp, xq, iu):
    """ŷ through M_abc = Σ_i r_ia B_ibc, symmetrised and packed to a ≤ b like S (fastdyn's algebra):
    ŷ_μ = Σ_qc Sp_μq Mp_qc x_q,μc."""
    M = xp.einsum("ia,ibc->abc", r, B)
    Mp = (0.5 * (M + xp.swapaxes(M, 0, 1)))[iu[0], iu[1]]  # (NP, D)
    return ((Sp @ Mp) * xq).sum(axis=1)


def make_loss(xp, kind, model, arr, softmax):
    """The mean squared error θ ↦ L of workload ``kind`` on the arrays ``arr`` (xp arrays)."""
    if kind == "per_head":
        S, xq, yq = arr

        def pred(theta):
            r, W = _split(theta, model)
            Wx = xp.einsum("ibc,pc->pib", W, xq)
            return xp.einsum("pia,ia->p", xp.einsum("pab,pib->pia", S, Wx), r)
    elif kind == "packed":  # last token or cumulative (rows = samples or sample·prefix)
        Sp, xq, yq, iu0, iu1 = arr

        def pred(theta):
            r, B = _heads(xp, theta, model)
            return _packed_pred(xp, r, B, Sp, xq, (iu0, iu1))
    elif kind == "quad":  # L = ⟨y²⟩ − 2 m·c + mᵀ C m, m = vec(Mp): exact for linear attention
        yy, c, C, iu0, iu1 = arr

        def loss(theta):
            r, B = _heads(xp, theta, model)
            M = xp.einsum("ia,ibc->abc", r, B)
            m = (0.5 * (M + xp.swapaxes(M, 0, 1)))[iu0, iu1].reshape(-1)
            return yy - 2.0 * (m * c).sum() + (m * (C @ m)).sum()

        return loss
    elif kind == "mlp_quad":  # L = ⟨y²⟩ − 2 γ·c + γᵀ C γ, γ = w2 W1: exact for the MLP
        yy, c, C = arr

        def loss(theta):
            W1, w2 = _split(theta, model)
            gam = w2 @ W1
            return yy - 2.0 * (gam * c).sum() + (gam * (C @ gam)).sum()

        return loss
    elif kind == "softmax":
        X, xq, yq = arr

        def pred(theta):
            r, B = _heads(xp, theta, model)
            s = xp.einsum("pjb,pib->pij", X, xp.einsum("ibc,pc->pib", B, xq))
            return (softmax(s) * xp.einsum("pjb,ib->pij", X, r)).sum(axis=(1, 2))
    else:  # mlp
        Z, yq = arr

        def pred(theta):
            W1, w2 = _split(theta, model)
            return Z @ (w2 @ W1)

    def loss(theta):
        return ((yq - pred(theta)) ** 2).mean()

    return loss


def jax_trainer(jax, model, kind, host, lr, epochs):
    jnp = jax.numpy
    mask = jnp.asarray(model.mask, dtype=jnp.float64)
    arr = tuple(jnp.asarray(x) for x in host)
    loss = make_loss(jnp, kind, model, arr, lambda s: jax.nn.softmax(s, axis=-1))
    return _peers.jax_gd(jax, loss, lr, epochs, mask)


def torch_trainer(torch, model, kind, host, lr, epochs):
    mask = torch.tensor(model.mask, dtype=torch.float64)
    arr = tuple(torch.from_numpy(x) for x in host)
    loss = make_loss(torch, kind, model, arr, lambda s: torch.softmax(s, dim=-1))
    return _peers.torch_gd(torch, loss, lr, epochs, mask)


# ------------------------------------------------------------------ workloads


def workload(kind, a):
    """(model, P, init scale, lr, epochs, title, flops, bytes, exps per epoch)."""
    from fastdyn.models.icl.attn_m import AttnM
    from fastdyn.models.icl.attn_s import AttnS
    from fastdyn.models.icl.mlp_cubic import MLPCubic

    N = 31
    if kind in ("attn_m", "cumulative"):
        D, H, P = 4, 8, 5000
        loss = "last" if kind == "attn_m" else "cumulative"
        model = AttnM(D, H, N, attention_scale="1", loss=loss)
        E = a.epochs if kind == "attn_m" else a.cum_epochs
        f = _flops.lin_moments(D, H, model.n_params)
        title = f"ICL Fig. 1 ATTN_M, {loss} loss (D={D}, N={N}, H={H}, P={P}), {E} GD epochs"
        return model, P, 1e-6, 1e-3, E, title, *f, 0.0
    if kind == "large_d":
        D, H, P, E = a.large_d, 8, a.large_p, a.large_epochs
        model = AttnM(D, H, N, attention_scale="1")
        f = _flops.lin_last(D, H, P, model.n_params)
        nq = (D + 1) * (D + 2) // 2 * D
        title = (
            f"ICL ATTN_M large D (D={D}, N={N}, H={H}, P={P}, NQ={nq}: no moments), {E} GD epochs"
        )
        return model, P, 1e-3, 1e-4, E, title, *f, 0.0
    D, H = 8, 9
    if kind.startswith("attn_s"):
        R = 4 if kind == "attn_s_r4" else 1
        P, E = a.fig4_p, a.fig4_epochs
        model = AttnS(D, H, N, R=R, attention_scale="1")
        f = _flops.lin_moments(D, H, model.n_params, R)
        title = f"ICL Fig. 4 ATTN_S (D={D}, N={N}, H={H}, R={R}, P={P}), {E} GD epochs"
        return model, P, 5e-3, 2e-2, E, title, *f, 0.0
    if kind == "softmax":
        P, E = a.softmax_p, a.softmax_epochs
        model = AttnS(D, H, N, R=1, attention_scale="1", softmax=True)
        title = f"ICL softmax ATTN_S (D={D}, N={N}, H={H}, R=1, P={P}), {E} GD epochs"
        return model, P, 5e-3, 2e-2, E, title, *_flops.softmax(D, N, H, P)
    P, E = a.fig4_p, a.fig4_epochs
    model = MLPCubic(D, H, N, attention_scale="N")
    title = f"ICL MLP-cubic (D={D}, N={N}, H={H}, rho=N, P={P}), {E} GD epochs"
    return model, P, 5e-3, 2e-2, E, title, *_flops.mlp_stats(D, H, model.n_params), 0.0


#: the peer with fastdyn's full-batch algebra: the loss from the data's moments
_MOMENTS = ", moments (quadratic form)"


def _quad(Sp, xq, y, iu):
    """Sufficient statistics of the linear-attention feature φ_μ = Sp_μ ⊗ x_q,μ (NP·D): ŷ = φ·m, so
    the mean squared error is ⟨y²⟩ − 2 m·⟨yφ⟩ + mᵀ⟨φφᵀ⟩m (one O(P (NP·D)²) pass, printed)."""
    import time

    import numpy as np

    t = time.perf_counter()
    phi = (Sp[:, :, None] * xq[:, None, :]).reshape(Sp.shape[0], -1)
    n = phi.shape[0]
    host = (np.array(np.mean(y * y)), phi.T @ y / n, phi.T @ phi / n, iu[0], iu[1])
    print(
        f"  peers' moments: {phi.shape[1]}x{phi.shape[1]} in {time.perf_counter() - t:.2f} s (once)"
    )
    return "quad", host


def peer_arrays(kind, model, data, prep):
    """{label suffix: (loss kind, host arrays)}: the per-sample statistics, computed once."""
    import time

    import numpy as np

    D, P = model.D, data.tokens.shape[0]
    tok = np.ascontiguousarray(data.tokens, dtype=np.float64)  # query label zero
    lab = np.ascontiguousarray(data.labels, dtype=np.float64)
    iu = np.triu_indices(D + 1)
    dbl = np.where(iu[0] == iu[1], 1.0, 2.0)
    xq, yq = np.ascontiguousarray(tok[:, -1, :D]), np.ascontiguousarray(lab[:, -1])
    if kind == "mlp":
        Z = np.ascontiguousarray(prep.Z[:, 0, :])
        t = time.perf_counter()
        stats = (np.array(np.mean(yq * yq)), Z.T @ yq / P, Z.T @ Z / P)
        print(
            f"  peers' statistics: {Z.shape[1]}x{Z.shape[1]} in {time.perf_counter() - t:.2f} s (once)"
        )
        return {", per-sample features": ("mlp", (Z, yq)), _MOMENTS: ("mlp_quad", stats)}
    if kind == "softmax":
        return {"": ("softmax", (tok, xq, yq))}
    if kind == "cumulative":
        # prefix n = 1..N: S_n = Σ_{j<n} x̂_j x̂_jᵀ (labels in) + x_n x_nᵀ (label hidden)
        full = tok.copy()
        full[:, :, D] = lab
        outer = np.einsum("pja,pjb->pjab", full, full)[:, :, iu[0], iu[1]]
        ctx = np.cumsum(outer[:, :-1], axis=1)  # Σ_{j<n}, n = 1..N
        q = tok[:, 1:].copy()
        q[:, :, D] = 0.0
        Sp = (ctx + np.einsum("pna,pnb->pnab", q, q)[:, :, iu[0], iu[1]]) * dbl
        rows = (
            np.ascontiguousarray(Sp.reshape(-1, Sp.shape[-1])),
            np.ascontiguousarray(q[:, :, :D].reshape(-1, D)),
            np.ascontiguousarray(lab[:, 1:].reshape(-1)),
        )
        return {
            ", packed prefix S_n": ("packed", (*rows, iu[0], iu[1])),
            _MOMENTS: _quad(*rows, iu),
        }
    S = np.einsum("pja,pjb->pab", tok, tok)
    Sp = np.ascontiguousarray(S[:, iu[0], iu[1]] * dbl)
    out = {", packed S_mu + contracted M": ("packed", (Sp, xq, yq, iu[0], iu[1]))}
    if kind == "attn_m":
        out[", per head, S_mu precomputed"] = ("per_head", (S, xq, yq))
    if kind == "large_d":  # fastdyn takes no moments here (NQ > MOMENT_NQ_MAX)
        out[", moments (not fastdyn's algebra)"] = _quad(Sp, xq, yq, iu)
    else:
        out[_MOMENTS] = _quad(Sp, xq, yq, iu)
    return out


def bench(kind, a, jax, torch, peaks) -> dict:
    import time

    import numba
    import numpy as np

    from fastdyn.drive.optim import make_optimizer
    from fastdyn.models.icl.problem import generate

    model, P, init, lr, E, title, flops, nbytes, exps = workload(kind, a)
    data = generate(model.D, model.N, P, seed=0)
    prep = model.prepare(data.tokens, data.labels)
    per_sample = model.prepare(data.tokens, data.labels)  # the per-sample kernels, for comparison
    if hasattr(per_sample, "moments"):  # softmax sets have no moments
        per_sample.moments = False
    if kind == "large_d":
        from fastdyn.models.icl.config import uses_moments

        print(
            f"  uses_moments(P={P}, D={model.D}) = {uses_moments(P, model.D)}; "
            f"prepared set's moments flag: {prep.moments}"
        )
    idx_all = np.arange(P)  # an explicit index keeps the MLP's per-sample features
    theta0 = model.init("reference", init, 0)
    nthr = numba.config.NUMBA_NUM_THREADS
    t = time.perf_counter()
    model.loss_value(theta0, prep)  # takes the moments or statistics (and compiles)
    if getattr(prep, "data_moments", None) is not None or getattr(prep, "stats", None) is not None:
        print(
            f"  fastdyn's moments: {time.perf_counter() - t:.2f} s (once, {nthr} threads, with compile)"
        )
    advance = model.gd_steps(prep) if hasattr(model, "gd_steps") else None

    def fd(k, per_epoch, pr=prep, idx=None):
        def run():
            numba.set_num_threads(k)
            theta = theta0.copy()
            if per_epoch:
                grad = np.empty(model.n_params)
                opt = make_optimizer("gd", model.n_params, lr)
                for _ in range(E):
                    model.loss_and_grad(theta, pr, grad, idx)
                    opt.step(theta, grad)
            else:
                advance(theta, lr, np.empty(E), np.inf)
            numba.set_num_threads(nthr)
            return theta

        return _peers.Call(run)

    threads = (1, min(2, nthr))
    cases = {f"fastdyn {k} thread(s)": fd(k, advance is None) for k in threads}
    if advance is not None:
        cases |= {f"fastdyn {k} thread(s), a call per epoch": fd(k, True) for k in threads}
    if getattr(prep, "moments", False) or kind == "mlp":
        idx = idx_all if kind == "mlp" else None
        cases |= {
            f"fastdyn {k} thread(s), per-sample kernel": fd(k, True, per_sample, idx)
            for k in threads
        }
    ref = f"fastdyn {threads[-1]} thread(s)"
    res, losses = _peers.measure_with_peers(
        cases, peer_arrays(kind, model, data, prep), jax, torch,
        lambda lk, host: jax_trainer(jax, model, lk, host, lr, E),
        lambda lk, host: torch_trainer(torch, model, lk, host, lr, E),
        theta0, a.repeats, title, E, ref, flops,
    )  # fmt: skip
    if exps:
        print(f"  {exps:.3g} exps per epoch")
    _peers.efficiency(res, E, flops, nbytes, peaks)
    _peers.compare(cases, res, ref, theta0, E, lambda t: model.loss_value(t, prep), losses)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="attn_m,cumulative,attn_s,attn_s_r4,softmax,mlp")
    ap.add_argument("--epochs", type=int, default=200, help="ATTN_M epochs per timed run")
    ap.add_argument("--cum-epochs", type=int, default=20)
    ap.add_argument("--fig4-p", type=int, default=80000)
    ap.add_argument("--fig4-epochs", type=int, default=10)
    ap.add_argument("--softmax-p", type=int, default=20000)
    ap.add_argument("--softmax-epochs", type=int, default=10)
    ap.add_argument("--large-d", type=int, default=12, help="D of large_d (NQ > 1024 from D = 12)")
    ap.add_argument("--large-p", type=int, default=16384)
    ap.add_argument("--large-epochs", type=int, default=20)
    _peers.main(ap, bench)


if __name__ == "__main__":
    main()
