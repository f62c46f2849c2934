"""Per-epoch cost of training ATTN_M / ATTN_S: numba kernels vs the authors' PyTorch-autograd way.

Fig. 1 setting (spec §5): D = 4, N = 31, H = 8, P = 5000, init 1e-6, lr 1e-3, ρ = 1, full-batch GD.
Timed in the same run:

- ``full``    the per-sample kernel (loss + hand-derived gradient + GD update), fastdyn;
- ``reduced`` the sufficient-statistics path (fused GD steps, independent of P and N), fastdyn;
- ``torch``   the same model in PyTorch autograd as the reference script writes it: attention over
  all N+1 tokens (an (N+1)×(N+1) score matrix per head and sample), float32, CPU, torch.optim.SGD.

Targets: full ≥ 500× and reduced ≥ 10⁴× faster per epoch than torch. PyTorch is optional
(``.venv/bin/pip install torch==2.13.0``, CPU build); without it the comparison is skipped.
Also: Fig. 4 setting (ATTN_S, P = 80000, D = 8, H = 9, R = 1) per epoch, extrapolated to 20001
epochs (target ≤ 10 minutes on 2 cores).

Run: ``.venv/bin/python bench/icl_train.py [--epochs 200] [--torch-epochs 10] [--skip-fig4]``
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

from fastdyn.drive.optim import make_optimizer
from fastdyn.models.icl.attn_m import AttnM
from fastdyn.models.icl.attn_s import AttnS
from fastdyn.models.icl.problem import generate


def time_full(model, prep, theta, lr: float, epochs: int) -> float:
    """Seconds per epoch of loss_and_grad + GD update (after one warm-up epoch)."""
    grad = np.empty(model.n_params)
    opt = make_optimizer("gd", model.n_params, lr)
    model.loss_and_grad(theta, prep, grad)
    opt.step(theta, grad)
    t0 = time.perf_counter()
    for _ in range(epochs):
        model.loss_and_grad(theta, prep, grad)
        opt.step(theta, grad)
    return (time.perf_counter() - t0) / epochs


def time_reduced(model, prep, theta, lr: float, steps: int) -> float:
    """Seconds per epoch of the fused reduced GD loop."""
    losses = np.empty(steps)
    model.fused_gd(theta, prep, lr, 10, losses)
    t0 = time.perf_counter()
    model.fused_gd(theta, prep, lr, steps, losses)
    return (time.perf_counter() - t0) / steps


def time_torch(
    tokens, labels, H: int, init: float, lr: float, epochs: int, rho: float
) -> float | None:
    """Seconds per epoch of the PyTorch-autograd ATTN_M (the reference script's formulation)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(numba.get_num_threads())
    x = torch.tensor(tokens, dtype=torch.float32)  # (P, N+1, D+1), query label zero
    y = torch.tensor(labels[:, -1], dtype=torch.float32)
    D1 = x.shape[2]

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.KQ = torch.nn.ModuleList([torch.nn.Linear(D1, D1, bias=False) for _ in range(H)])
            self.V = torch.nn.ModuleList([torch.nn.Linear(D1, D1, bias=False) for _ in range(H)])
            for m in self.modules():
                if isinstance(m, torch.nn.Linear):
                    torch.nn.init.normal_(m.weight, mean=0.0, std=init)

        def forward(self, x):
            out = x
            for kq, v in zip(self.KQ, self.V, strict=True):
                scores = torch.bmm(x, kq(x).transpose(1, 2))  # (P, N+1, N+1)
                out = out + torch.bmm(scores, v(x)) / rho
            return out[:, -1, -1]

    net = Attn()
    opt = torch.optim.SGD(net.parameters(), lr=lr)

    def epoch():
        opt.zero_grad()
        loss = torch.mean((net(x) - y) ** 2)
        loss.backward()
        opt.step()

    epoch()
    t0 = time.perf_counter()
    for _ in range(epochs):
        epoch()
    return (time.perf_counter() - t0) / epochs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=200, help="timed epochs of the full kernel")
    ap.add_argument("--reduced-steps", type=int, default=200_000)
    ap.add_argument("--torch-epochs", type=int, default=10)
    ap.add_argument("--skip-fig4", action="store_true")
    a = ap.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; threads: numba {numba.get_num_threads()} (NUMBA_NUM_THREADS={os.environ.get('NUMBA_NUM_THREADS', 'unset')})"
    )

    D, N, H, P, init, lr = 4, 31, 8, 5000, 1e-6, 1e-3
    data = generate(D, N, P, seed=0)
    full = AttnM(D, H, N, attention_scale="1")
    t0 = time.perf_counter()
    prep = full.prepare(data.tokens, data.labels)
    t_prep = time.perf_counter() - t0
    nthreads = numba.get_num_threads()
    t_full_by = {}
    for nt in sorted({1, nthreads}):
        numba.set_num_threads(nt)
        t_full_by[nt] = time_full(full, prep, full.init("reference", init, 0), lr, a.epochs)
    numba.set_num_threads(nthreads)
    t_full = min(t_full_by.values())
    red = AttnM(D, H, N, attention_scale="1", reduced=True)
    t0 = time.perf_counter()
    prep_r = red.prepare(data.tokens, data.labels)
    t_stats = time.perf_counter() - t0
    t_red = time_reduced(red, prep_r, red.init("reference", init, 0), lr, a.reduced_steps)
    print(f"Fig. 1 (D={D}, N={N}, H={H}, P={P}, rho=1):")
    for nt, t in t_full_by.items():
        print(
            f"  fastdyn full    : {t * 1e3:9.4f} ms/epoch on {nt} thread(s)   (prepare S_mu once: {t_prep * 1e3:.1f} ms)"
        )
    print(
        f"  fastdyn reduced : {t_red * 1e6:9.4f} us/epoch   (moments once: {t_stats * 1e3:.1f} ms)"
    )
    t_torch = time_torch(data.tokens, data.labels, H, init, lr, a.torch_epochs, 1.0)
    if t_torch is None:
        print(
            "  torch           : not installed (optional: .venv/bin/pip install torch==2.13.0); comparison skipped"
        )
    else:
        import torch

        print(f"  torch {torch.__version__} autograd float32 CPU: {t_torch * 1e3:9.2f} ms/epoch")
        print(
            f"  speed-up full    : {t_torch / t_full:10.0f}x   (target >= 500x; best thread count)"
        )
        print(f"  speed-up reduced : {t_torch / t_red:10.0f}x   (target >= 1e4x)")
        print(
            f"  6001 epochs: torch {6001 * t_torch / 60:.1f} min, full {6001 * t_full:.2f} s, reduced {6001 * t_red * 1e3:.1f} ms"
        )

    if not a.skip_fig4:
        D, N, H, R, P = 8, 31, 9, 1, 80000
        data = generate(D, N, P, seed=0)
        m = AttnS(D, H, N, R=R, attention_scale="1")
        prep = m.prepare(data.tokens, data.labels)
        n = max(5, a.epochs // 20)
        for nt in sorted({1, nthreads}):
            numba.set_num_threads(nt)
            t4 = time_full(m, prep, m.init("reference", 5e-3, 0), 2e-2, n)
            print(
                f"Fig. 4 (attn-s D={D}, N={N}, H={H}, R={R}, P={P}, full per-sample, {nt} thread(s)): {t4 * 1e3:.2f} ms/epoch"
            )
            print(
                f"  20001 epochs extrapolated: {20001 * t4 / 60:.2f} min (target <= 10 min on 2 cores)"
            )
        numba.set_num_threads(nthreads)


if __name__ == "__main__":
    main()
