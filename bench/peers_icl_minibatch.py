"""ICL minibatch SGD and Adam, fastdyn vs the strongest peers in the same run.

    python bench/peers_icl_minibatch.py [--only sgd,adam] [--steps 2000] [--batch 256]
                                        [--P 5000] [--lr 1e-3] [--repeats 3] [--no-torch]
                                        [--peak-n 2048]

Workload: Fig. 1's ATTN_M (D = 4, N = 31, H = 8, ρ = 1, P = 5000, init 1e-6 reference, last-token
loss), E = --steps optimiser steps on minibatches of B = --batch samples from θ0. A minibatch loss
is a mean over B rows, so the data's moments do not apply: every step runs the per-sample kernel
(``attn_m.kernels.lin_last`` on the B gathered rows). The batches are the trained-run driver's,
``drive.optim.minibatch_indices(seed = 0, step k, P, B)`` for k = 0..E−1: drawn once (untimed) and
handed to the peers; fastdyn's cases draw them as the driver does (timed), the same batches.

- fastdyn, "driver (fused blocks)": what ``drive.train.train`` runs for a minibatch, called as
  is (one save, at step E; no observer): the steps between saves in fused blocks
  (``model.optimizer_steps``: ``attn_m.kernels.lin_last_steps`` gathers each step's B rows,
  takes ``lin_last``'s loss and gradient and the optimiser's update, ``core.updates``), each
  block's batches drawn beforehand (``drive.optim.minibatch_block``), blocks of about
  ``drive.train.BLOCK_SECONDS``; on 1 and 2 numba threads. Other case, "per-step path": per step
  what the driver ran before the fused blocks (and still runs at a save): the indices
  (``minibatch_indices``), ``model.loss_and_grad(θ, prep, grad, idx)``, the finite check and
  ``optimizer.step`` (``gd_step`` for SGD, ``adam_step`` for Adam).
- JAX ``jit`` of one ``lax.fori_loop`` over the E steps (float64, 2 XLA threads): step k gathers
  its B rows of the packed per-sample arrays (S_μ packed to NP = (D+1)(D+2)/2 entries, x_q, y_q,
  computed once, untimed) and takes ``jax.grad`` of the packed-algebra loss (the heads folded
  into M, ŷ = Σ Sp_μq Mp_qc x_q,μc, bench/peers_icl.py), then the same update (Adam with bias
  correction, β = (0.9, 0.999), ε = 1e-8, as ``adam_step``).
- ``torch.compile`` of the same loss (gather inside) with autograd, per step in Python, and the
  update by hand (SGD) or ``torch.optim.Adam`` (1 and 2 threads).

Every case's θ_E − θ0 and its own full-set loss at θ_E are checked against fastdyn's.
FLOPs and bytes per step: bench/_flops.py ``lin_minibatch``; printed as GFLOP/s and % of the
float64 matmul peak and of the triad bandwidth measured in the same run (bench/peak.py).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _flops  # noqa: E402
import _peers  # noqa: E402
from peers_icl import _heads, _packed_pred, make_loss  # noqa: E402

B1, B2, EPS = 0.9, 0.999, 1e-8


def packed_rows(data, D):
    """Per-sample packed arrays (Sp (P, NP), x_q (P, D), y_q (P,)) and the pair index."""
    import numpy as np

    tok = np.ascontiguousarray(data.tokens, dtype=np.float64)  # query label zero
    iu = np.triu_indices(D + 1)
    dbl = np.where(iu[0] == iu[1], 1.0, 2.0)
    S = np.einsum("pja,pjb->pab", tok, tok)
    Sp = np.ascontiguousarray(S[:, iu[0], iu[1]] * dbl)
    xq = np.ascontiguousarray(tok[:, -1, :D])
    yq = np.ascontiguousarray(data.labels[:, -1], dtype=np.float64)
    return Sp, xq, yq, iu


def jax_trainer(jax, model, host, batches, lr, opt):
    """(train, full-set loss): ``train(θ0)`` takes the E steps in one jit of a fori_loop."""
    jnp = jax.numpy
    Sp, xq, yq, iu0, iu1 = (jnp.asarray(x) for x in host)
    idx = jnp.asarray(batches)
    E = batches.shape[0]

    def loss(theta, rows):
        r, B = _heads(jnp, theta, model)
        pred = _packed_pred(jnp, r, B, Sp[rows], xq[rows], (iu0, iu1))
        return ((yq[rows] - pred) ** 2).mean()

    g = jax.grad(loss)
    if opt == "sgd":

        def step(k, th):
            return th - lr * g(th, idx[k])

        def run(th):
            return jax.lax.fori_loop(0, E, step, th)
    else:

        def step(k, st):
            th, m, v = st
            gr = g(th, idx[k])
            m = B1 * m + (1.0 - B1) * gr
            v = B2 * v + (1.0 - B2) * gr * gr
            t = (k + 1).astype(jnp.float64)
            c1, c2 = 1.0 - B1**t, 1.0 - B2**t
            return th - lr * ((m / c1) / (jnp.sqrt(v / c2) + EPS)), m, v

        def run(th):
            z = jnp.zeros_like(th)
            return jax.lax.fori_loop(0, E, step, (th, z, z))[0]

    full = make_loss(jnp, "packed", model, (Sp, xq, yq, iu0, iu1), None)
    return jax.jit(run), jax.jit(full)


def torch_trainer(torch, model, host, batches, lr, opt):
    """(train, full-set loss): ``torch.compile`` of the minibatch loss, a Python loop of steps."""
    Sp, xq, yq, iu0, iu1 = (torch.from_numpy(x) for x in host)
    idx = [torch.from_numpy(b) for b in batches]

    def loss(theta, rows):
        r, B = _heads(torch, theta, model)
        pred = _packed_pred(torch, r, B, Sp[rows], xq[rows], (iu0, iu1))
        return ((yq[rows] - pred) ** 2).mean()

    closs = torch.compile(loss)

    def train(theta0):
        theta = theta0.clone().requires_grad_(True)
        adam = torch.optim.Adam([theta], lr=lr, betas=(B1, B2), eps=EPS) if opt == "adam" else None
        for rows in idx:
            (gr,) = torch.autograd.grad(closs(theta, rows), theta)
            if adam is None:
                with torch.no_grad():
                    theta -= lr * gr
            else:
                theta.grad = gr
                adam.step()
        return theta.detach()

    full = make_loss(torch, "packed", model, (Sp, xq, yq, iu0, iu1), None)
    return train, full


def breakdown(model, prep, theta0, batches, opt, repeats) -> None:
    """Where a step goes (per step, medians of ``repeats`` sweeps over the E batches, the calling
    thread). The fused path: the E batches drawn at once (``minibatch_block``) and the E steps
    in one fused call (``optimizer_steps``, batches given). The per-step path: the indices,
    ``loss_and_grad``, the ``lin_last`` call inside it alone (on the same batch, M folded
    beforehand) and the optimiser step."""
    import time

    import numpy as np

    from fastdyn.drive.optim import minibatch_block, minibatch_indices
    from fastdyn.models.icl.attn_m.kernels import contract_M, lin_last
    from fastdyn.reduce import n_blocks

    E, B = batches.shape
    P, D = prep.n_samples, model.D
    NP = (D + 1) * (D + 2) // 2
    grad = np.empty(model.n_params)
    r, W = model._heads(theta0)
    Msym = np.empty((NP, D))
    contract_M(r, W, Msym)
    partials = np.empty((n_blocks(B), 1 + NP * D))
    theta = theta0.copy()
    first = np.arange(B, dtype=np.int64)

    def sweep(f):
        t = time.perf_counter()
        for s in range(E):
            f(s)
        return (time.perf_counter() - t) / E

    advance = model.optimizer_steps(prep)
    losses = np.empty(E)

    def whole(f):
        t = time.perf_counter()
        f()
        return (time.perf_counter() - t) / E

    fused = {
        "minibatch_block (the E batches at once)": lambda: minibatch_block(0, 0, E, P, B),
        "fused steps (lin_last_steps, batches given)": lambda: advance(
            theta0.copy(), batches, opt.update_args(), losses, np.inf
        ),
    }
    _breakdown("where a fused step goes", fused, whole, repeats)
    parts = {
        "minibatch_indices": lambda s: minibatch_indices(0, s, P, B),
        "loss_and_grad": lambda s: model.loss_and_grad(theta, prep, grad, batches[s]),
        "  of which lin_last (B rows, gather included)": lambda s: lin_last(
            batches[s], prep.SpT, prep.xqT, prep.yq, prep.inv_rho, Msym, False, partials
        ),
        "  lin_last on B contiguous rows (no gather)": lambda s: lin_last(
            first, prep.SpT, prep.xqT, prep.yq, prep.inv_rho, Msym, True, partials
        ),
        "optimizer.step": lambda s: opt.step(theta, grad * 0.0),
    }
    _breakdown("where a per-step path step goes", parts, sweep, repeats)


def _breakdown(title, cases, timer, repeats) -> None:
    """Each case timed by ``timer`` once to warm up, then the median of ``repeats``, printed."""
    import statistics

    for f in cases.values():
        timer(f)
    times = {k: statistics.median(timer(f) for _ in range(repeats)) for k, f in cases.items()}
    print(f"  {title} (1 thread, per step):")
    for k, v in times.items():
        print(f"    {k:<46} {v * 1e6:8.2f} us")


def bench(kind, a, jax, torch, peaks) -> dict:
    import numba
    import numpy as np

    from fastdyn.drive.optim import make_optimizer, minibatch_indices
    from fastdyn.drive.train import train
    from fastdyn.models.icl.attn_m import AttnM
    from fastdyn.models.icl.problem import generate

    D, H, N, P, B, E, lr = 4, 8, 31, a.P, a.batch, a.steps, a.lr
    model = AttnM(D, H, N, attention_scale="1")
    assert model.mask.all()
    data = generate(D, N, P, seed=0)
    prep = model.prepare(data.tokens, data.labels)
    theta0 = model.init("reference", 1e-6, 0)
    seed = 0
    batches = np.stack([minibatch_indices(seed, k, P, B) for k in range(E)])
    nthr = numba.config.NUMBA_NUM_THREADS
    model.loss_value(theta0, prep)  # compiles; takes the full set's moments (saves' loss only)

    def quiet(theta):  # the save's observer: nothing beyond the train loss
        return {}, {}

    def fd(k, fused):
        def run():
            numba.set_num_threads(k)
            theta = theta0.copy()
            opt = make_optimizer(kind, model.n_params, lr)
            if fused:
                train(model, prep, theta, opt, E, [E], batch_size=B, seed=seed, observe=quiet)
            else:
                grad = np.empty(model.n_params)
                for s in range(E):
                    L = model.loss_and_grad(theta, prep, grad, minibatch_indices(seed, s, P, B))
                    if not (np.isfinite(L) and np.all(np.isfinite(grad))):
                        raise FloatingPointError(f"step {s}: loss {L}")
                    opt.step(theta, grad)
            numba.set_num_threads(nthr)
            return theta

        return _peers.Call(run)

    threads = (1, min(2, nthr))
    cases = {f"fastdyn {k} thread(s), driver (fused blocks)": fd(k, True) for k in threads}
    cases[f"fastdyn {threads[-1]} thread(s), per-step path"] = fd(threads[-1], False)
    ref = f"fastdyn {threads[-1]} thread(s), driver (fused blocks)"
    name = "SGD" if kind == "sgd" else "Adam"
    title = (
        f"ICL Fig. 1 ATTN_M (D={D}, N={N}, H={H}, P={P}), minibatch {name}, B={B}, lr={lr:g}, "
        f"{E} steps"
    )
    Sp, xq, yq, iu = packed_rows(data, D)
    host = (Sp, xq, yq, iu[0], iu[1])
    peers = {", packed S_mu + contracted M": ("packed", host)}
    flops, nbytes = _flops.lin_minibatch(D, H, B, model.n_params, kind)
    res, losses = _peers.measure_with_peers(
        cases, peers, jax, torch,
        lambda lk, h: jax_trainer(jax, model, h, batches, lr, kind),
        lambda lk, h: torch_trainer(torch, model, h, batches, lr, kind),
        theta0, a.repeats, title, E, ref, flops, unit="step",
    )  # fmt: skip
    _peers.efficiency(res, E, flops, nbytes, peaks)
    _peers.compare(cases, res, ref, theta0, E, lambda t: model.loss_value(t, prep), losses)
    numba.set_num_threads(1)
    breakdown(model, prep, theta0, batches, make_optimizer(kind, model.n_params, lr), a.repeats)
    numba.set_num_threads(nthr)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="sgd,adam")
    ap.add_argument("--steps", type=int, default=2000, help="optimiser steps per timed run")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--P", type=int, default=5000)
    ap.add_argument("--lr", type=float, default=1e-3)
    _peers.main(ap, bench)


if __name__ == "__main__":
    main()
