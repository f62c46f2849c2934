"""ICL Fig. 14 of the responses: the cumulative loss (training on every prefix length, i.e. on
sequences of varying length) keeps the dynamics — one abrupt drop for ATTN_M, one drop per
eigen-direction for ATTN_S — and, with the model's 1/N scaling, a model trained at N = 31 can be
tested at any context length N′.

Population runs (exact moments, D = 4, linear spectrum, ρ = N as in the paper) of ATTN_M
(data/configs/icl_fig1.toml, H = 8) and rank-one ATTN_S (icl_fig3.toml, H = 5), each trained on the
last-token and on the cumulative loss, with `test.context_lengths` streaming the loss at
N′ = 4 … 128. Checked: at convergence the loss at every N′ equals L(Γ*; N′), the theory column the
run writes from the optimum of its own loss (measured ≤ 1.1e-14: the runs converge to round-off;
held to 1e-10);
N′ = N reproduces the training loss; the number of loss drops (1 for ATTN_M, D = 4 for ATTN_S)
is the same for both losses. Beside them (info): how far the model trained at N = 31 stays from
the best possible loss L*(N′) of its loss type at each N′ (0 at N′ = N).

    python scripts/icl_fig14.py            # about 20 s (population runs: quick = full)
    python scripts/icl_fig14.py --quick
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gallery import Gallery, drops, log_steps, plt  # noqa: E402

LENGTHS = [4, 8, 16, 31, 64, 128]
POP = {"data.population": True, "attention.reduced": True, "data.n_test": 0}
MODELS = {  # config, extra sets, epochs (full, quick), lr, theory drop count
    "ATTN_M": ("icl_fig1.toml", {"init.scale": 1e-3}, (20001, 20001), 0.05, 1),
    "ATTN_S": ("icl_fig3.toml", {}, (400001, 400001), 0.5, 4),
}


def main(argv: list[str] | None = None) -> dict:
    g = Gallery("icl_fig14", __doc__, argv)
    runs = {}
    for name, (cfg, extra, (ep_full, ep_quick), lr, n_drops) in MODELS.items():
        ep = ep_quick if g.quick else ep_full
        for loss in ("last", "cumulative"):
            sets = {**POP, **extra, "attention.attention_scale": "N", "attention.loss": loss}
            sets |= {
                "optim.lr": lr,
                "schedule.epochs": ep,
                "schedule.save_steps": log_steps(ep, 300),
            }
            sets |= {"test.context_lengths": LENGTHS}
            run = g.run(cfg, sets, tag=f"{name}_{loss}")
            runs[name, loss] = run
            got = np.asarray(run["loss/test_context"])[-1]
            th = np.asarray(run["theory/test_context/L_of_Gamma_star"])
            best = np.asarray(run["theory/test_context/L_star"])
            err = float(np.max(np.abs(got - th)))
            g.row(
                f"{name}, {loss} loss: max over N′ of |L(N′) − L(Γ*; N′)| at the end",
                err,
                0.0,
                1e-6,
            )
            k = LENGTHS.index(31)
            same = float(
                np.max(np.abs(np.asarray(run["loss/test_context"])[:, k] - run["loss/train"]))
            )
            g.row(
                f"{name}, {loss} loss: max |L(N′ = N) − training loss| over saves", same, 0.0, 1e-12
            )
            nd = len(drops(run.time, run["loss/train"], rate=0.5, min_fall=0.05))
            g.row(f"{name}, {loss} loss: number of loss drops", nd, n_drops, 0)
            g.info(
                f"{name}, {loss} loss: L(Γ*; N′) − L*(N′) at N′ = {LENGTHS}",
                float(np.max(th - best)),
                note=", ".join(f"{x:.2e}" for x in th - best),
            )

    pl = plt()
    fig, ax = pl.subplots(1, 2, figsize=(10, 4))
    for i, name in enumerate(MODELS):
        for loss, ls in (("last", "-"), ("cumulative", "--")):
            r = runs[name, loss]
            t = np.asarray(r.time)
            ax[0].loglog(
                t[t > 0],
                np.asarray(r["loss/train"])[t > 0],
                ls,
                color=f"C{i}",
                label=f"{name}, {loss}",
            )
            ax[1].loglog(
                LENGTHS,
                np.asarray(r["loss/test_context"])[-1],
                "o" + ls,
                color=f"C{i}",
                label=f"{name}, {loss}",
            )
    best = np.asarray(runs["ATTN_M", "last"]["theory/test_context/L_star"])
    ax[1].loglog(LENGTHS, best, "k:", label="L*(N′), last-token")
    ax[0].set_xlabel("t/τ")
    ax[0].set_ylabel("training loss")
    ax[1].set_xlabel("test context length N′ (trained at N = 31)")
    ax[1].set_ylabel("test loss at the end")
    for a in ax:
        a.legend(fontsize=7)
    fig.suptitle("ICL: cumulative vs last-token loss, tested across context lengths")
    fig.tight_layout()
    g.figure(fig, "icl_fig14")
    return g.finish()


if __name__ == "__main__":
    main()
