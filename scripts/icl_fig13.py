"""ICL Fig. 13 of the responses: ATTN_M and ATTN_S at N = 128, D = 64 on a finite train set —
"qualitatively similar to the lower-dimensional cases, despite being noisier".

White spectrum (Λ = I/64), P = 5000 sequences (> D² = 4096, so the train set has a unique
least-squares minimum over Γ), ρ = 1 (the reference code's scale, as the shipped configs), the reduced sufficient-statistics path (exact for the
reduced parametrisation, docs/theory.md), init 1e-3 and GD lr 1e-2 (ATTN_S: 0.1 and 4e-2, so that
its plateaus, ∝ τ/(κλ²v_0), end within the run) (data/configs/icl_fig1.toml and
icl_fig3.toml with these sets). ATTN_M (H = 8) and ATTN_S with H = 8 heads of rank R = 8
(H·R = D). Checked: ATTN_M drops once (the paper's single abrupt drop). The reference beside the
final losses is the train set's least-squares minimum over Γ (scripts/_gallery.py
gamma_least_squares: an independent lstsq on the D² features). Reported (no theory holds at this size): ATTN_S's number of drops (long
plateaus come when a new head's value weight leaves zero, at most D/R = 8; with equal eigenvalues
they may merge) and its final loss beside the same minimum; ATTN_M's half-drop time beside the
population Eq. 10 (finite P shifts it).

    python scripts/icl_fig13.py            # full (a few minutes)
    python scripts/icl_fig13.py --quick    # D = 8, N = 16, P = 200: seconds
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gallery import Gallery, crossing_time, drops, gamma_least_squares, plt  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    from fastdyn.models.icl.attn_m import theory as tm

    g = Gallery("icl_fig13", __doc__, argv)
    q = g.quick
    D, N, P = (8, 16, 200) if q else (64, 128, 5000)
    epochs = {"ATTN_M": 1001 if q else 2001, "ATTN_S": 2001 if q else 8001}
    common = {"data.D": D, "data.N": N, "data.P": P, "data.spectrum": "white", "data.n_test": 0,
              "attention.reduced": True, "init.scale": 1e-3,
              "optim.lr": 1e-2, "schedule.save_every": 10}  # fmt: skip
    R = 2 if q else 8
    models = {
        "ATTN_M": ("icl_fig1.toml", {"attention.H": 8}),
        "ATTN_S": (
            "icl_fig3.toml",
            {"attention.H": D // R, "attention.R": R, "init.scale": 0.1, "optim.lr": 2e-2},
        ),
    }
    ref = gamma_least_squares(
        "icl_fig1.toml", {k: v for k, v in common.items() if k.startswith("data.")}
    )
    runs = {}
    for name, (cfg, extra) in models.items():
        sets = {**common, **extra, "schedule.epochs": epochs[name]}
        run = g.run(cfg, sets, tag=name)
        runs[name] = run
        t, L = np.asarray(run.time), np.asarray(run["loss/train"])
        nd = len(drops(t, L, rate=0.5, min_fall=0.05))
        if name == "ATTN_M":
            g.row("ATTN_M: number of loss drops", nd, 1, 0)
            # the train set's least-squares minimum over Γ beside the final loss: reached at the
            # quick size (D = 8: +0.6%); at D = 64 with P = 5000 ≈ 1.2 D² the small directions of
            # the data covariance are not learned by t/τ = 40 (measured +52%), so reported only
            g.info(
                "ATTN_M: final train loss",
                L[-1],
                note=f"train-set minimum over Γ {ref['train']:.5f}",
            )
            lam = 1.0 / D
            a0 = tm.eq10_a0_random(8, 1e-3)
            sig = tm.eq10_sigma(t, lam, D, N, a0, float(N))  # κ = N/ρ = N
            Leq = tm.eq10_loss(sig, lam, D, N)
            h_run = crossing_time(t, L, 0.5 * (L[0] + L[-1]))
            h_eq = crossing_time(t, Leq, 0.5 * (Leq[0] + Leq[-1]))
            g.info("ATTN_M: half-drop time t/τ", h_run, note=f"population Eq. 10: {h_eq:.4g}")
        else:
            # with a white spectrum every direction has the same λ: the heads escape their
            # plateau at nearby times, so the drops may merge (D = 64: one drop measured); the
            # count is reported, not held
            g.info(
                f"ATTN_S (H = {D // R}, R = {R}): loss drops",
                nd,
                note=f"at most D/R = {D // R} long plateaus",
            )
            g.info(
                "ATTN_S: final train loss",
                L[-1],
                note=f"train-set minimum over Γ {ref['train']:.5f}",
            )

    pl = plt()
    fig, ax = pl.subplots(figsize=(6.8, 4.4))
    for i, (name, r) in enumerate(runs.items()):
        t = np.asarray(r.time)
        ax.plot(t, np.asarray(r["loss/train"]), color=f"C{i}", lw=2, label=name)
    ax.axhline(ref["train"], color="k", ls=":", label="train-set minimum over Γ")
    ax.set_xlabel("t/τ")
    ax.set_ylabel("training loss")
    ax.set_title(f"ICL at D = {D}, N = {N}, P = {P} (white spectrum)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    g.figure(fig, "icl_fig13")
    return g.finish()


if __name__ == "__main__":
    main()
