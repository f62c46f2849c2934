"""ICL variants: softmax counterparts, init scale rich → lazy, cumulative loss, ICL vs IWL (Fig. 14),
and the larger N = 128, D = 64 case.

Base: data/configs/icl_variants.toml (ATTN_M, Fig. 1's data, P = 500). Sizes and steps are reduced
from the paper's to fit 10 minutes on 2 cores (printed with each run):
- softmax ATTN_M (P = 500) and softmax ATTN_S (icl_fig3.toml, P = 200), lr 2e-2, 10001 epochs:
  no closed form; the loss drops (count, times, levels) and the final loss are reported beside
  the authors' qualitative claim (one abrupt drop for ATTN_M, several for ATTN_S).
- init scale 1e-6 … 0.3 on the white spectrum, population moments: the half-drop time against
  Eq. 10 in the rich (small-init) regime, the final loss against L* throughout; large init is lazy
  (no plateau: the drop starts at once).
- cumulative loss (attention.loss = cumulative) and last-token loss on the same data (lr 5e-3,
  6001 epochs): final train loss vs the train set's least-squares minima (Γ class; full class).
- ICL vs IWL: icl_fraction c = 1, 0.5, 0; IC and IW test losses; c = 1's IC test loss vs L*.
- N = 128, D = 64 (white spectrum, population, H = 8, init 1e-3, lr 1e-2, 2001 epochs; the
  paper's init and step count would need ~30x more steps): half-drop time and final loss vs Eq. 10.

    python scripts/icl_variants.py            # full
    python scripts/icl_variants.py --quick    # seconds: tiny finite-data runs (no drop), N = 16, D = 8 for the large case
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gallery import (  # noqa: E402
    Gallery,
    attn_m_least_squares,
    crossing_time,
    cumulative_least_squares,
    drops,
    gamma_least_squares,
    plt,
)

CFG = "icl_variants.toml"
POP = {"data.population": True, "attention.reduced": True, "data.n_test": 0}


def half_drop(t, L):
    return crossing_time(t, L, 0.5 * (L[0] + L[-1]))


def main(argv: list[str] | None = None) -> dict:
    g = Gallery("icl_variants", __doc__, argv)
    q = g.quick
    pl = plt()
    fig, axs = pl.subplots(2, 3, figsize=(13, 7.5))
    axs = axs.ravel()

    # 1. softmax counterparts (Fig. 1 / Fig. 3 data; lr 2e-2 so that they leave the first plateau
    # within the time limit: the first drop comes at t/τ ≈ 44, 2.2e4 epochs at the paper's 1e-3)
    sm = g.run(CFG, {"attention.softmax": True, "optim.lr": 2e-2, "data.P": 30 if q else 500,
                     "schedule.epochs": 2001 if q else 10001, "data.n_test": 20 if q else 200,
                     "schedule.save_every": 10}, tag="softmax_attn_m")  # fmt: skip
    ss = g.run("icl_fig3.toml", {"attention.softmax": True, "optim.lr": 2e-2, "data.P": 30 if q else 200,
                                 "data.n_test": 20 if q else 200, "schedule.epochs": 2001 if q else 10001,
                                 "schedule.save_every": 10}, tag="softmax_attn_s")  # fmt: skip
    for lab, r in (("softmax ATTN_M", sm), ("softmax ATTN_S", ss)):
        t, L = np.asarray(r.time), np.asarray(r["loss/train"])
        Ls = float(np.asarray(r["theory/L_star"]))
        dr = drops(t, L)
        # the authors (response 001): softmax ATTN_M shows a single abrupt drop, softmax ATTN_S
        # several separated by slower phases; no closed form, so these are reported, not held
        g.info(f"{lab}: loss drops (|dlnL/dlnt| > 0.5 runs, each ≥ 10% of the loss)", len(dr),
               note="; ".join(f"t/τ {a:.3g}–{b:.3g}: {la:.3f} → {lb:.3f}" for a, b, la, lb in dr))  # fmt: skip
        g.info(f"{lab}: final train loss", L[-1],
               note=f"initial {L[0]:.4f}; IC test {float(r['loss/test_ic'][-1]):.4f}; "
                    f"linear-attention L* = {Ls:.4f}")  # fmt: skip
        axs[0].semilogx(t[t > 0], L[t > 0], lw=2, label=lab)
        axs[0].axhline(Ls, color="gray", ls=":", lw=0.8)
    axs[0].set_title("softmax counterparts (dotted: linear L*)")
    axs[0].set_xlabel("t / τ")
    axs[0].set_ylabel("train loss")
    axs[0].legend(fontsize=7)

    # 2. init scale: rich -> lazy (white spectrum, population; Eq. 10 stored by the run)
    inits = [1e-6, 0.3] if q else [1e-6, 1e-4, 1e-2, 1e-1, 0.3]
    for k, sc in enumerate(inits):
        r = g.run(CFG, {**POP, "data.spectrum": "white", "init.scale": sc, "schedule.epochs": 2001 if q else 6001,
                        "schedule.save_every": 10}, tag=f"init_{sc:g}")  # fmt: skip
        t, L, Leq = r.time, r["loss/train"], r["theory/loss/train"]
        Ls = float(np.asarray(r["theory/L_star"]))
        if sc <= 1e-2:
            # Eq. 10 (a_0 = H·init²/2 for the i.i.d. init) holds for small init: the drop time is
            # logarithmic in 1/a_0, so a_0's ~3% error is ≤ 0.3% of it; heads not yet aligned at
            # the start add a few %; tolerance 5%
            g.row(
                f"init {sc:g}: half-drop time vs Eq. 10",
                half_drop(t, L),
                half_drop(t, Leq),
                0.05,
                "rel",
            )
        else:
            g.info(f"init {sc:g} (lazy): half-drop time", half_drop(t, L),
                   note=f"Eq. 10 with a_0 = H·init²/2: {half_drop(t, Leq):.3g} (outside its small-init regime)")  # fmt: skip
        # population gradient flow reaches the global minimum from every init scale tried
        g.row(f"init {sc:g}: final loss vs L*", L[-1], Ls, 1e-3, "rel")
        axs[1].semilogx(t[1:], L[1:], lw=2, color=f"C{k}", label=f"init {sc:g}")
        axs[1].semilogx(t[1:], Leq[1:], "--", color=f"C{k}", lw=0.8)
    axs[1].set_title("init scale: rich (plateau) → lazy (dashed: Eq. 10)")
    axs[1].set_xlabel("t / τ")
    axs[1].legend(fontsize=7)

    # 3. cumulative loss (lr 5e-3 so that both runs converge within t/τ = 60)
    base = {"data.P": 30 if q else 500, "schedule.epochs": 51 if q else 6001,
            "data.n_test": 20 if q else 200, "optim.lr": 5e-3}  # fmt: skip
    cu = g.run(CFG, {**base, "attention.loss": "cumulative"}, tag="cumulative")
    la = g.run(CFG, base, tag="last_token")
    for lab, r, ref in (
        ("cumulative", cu, cumulative_least_squares(CFG, {**base, "attention.loss": "cumulative"})),
        ("last-token", la, {"gamma": gamma_least_squares(CFG, base)["train"],
                            "full": attn_m_least_squares(CFG, base)["train"]}),
    ):  # fmt: skip
        Lf = float(r["loss/train"][-1])
        if q:  # 51 epochs: far from converged
            g.info(f"{lab} loss: final train loss", Lf,
                   note=f"least-squares minima: Γ {ref['gamma']:.4f}, full {ref['full']:.4f}")  # fmt: skip
            continue
        # GD from a small init converges first to the in-context (Γ-class) solution, then moves
        # slowly along the weak in-weight directions finite P gives a gradient to, towards the
        # full class's minimum (reached as t → ∞): the final loss must lie between the two
        lo, hi = ref["full"], ref["gamma"]
        g.row(f"{lab} loss: final train loss inside [full-class, Γ-class] least-squares minima (1 = yes)",
              float(lo <= Lf <= hi), 1.0, 0,
              note=f"{Lf:.5f} in [{lo:.5f}, {hi:.5f}]: {(Lf - lo) / (hi - lo):.0%} of the way up")  # fmt: skip

    axs[2].plot(cu.time, cu["loss/train"], lw=2, label="cumulative loss")
    axs[2].plot(la.time, la["loss/train"], lw=2, label="last-token loss")
    axs[2].set_title("cumulative vs last-token loss (ATTN_M)")
    axs[2].set_xlabel("t / τ")
    axs[2].legend(fontsize=7)

    # 4. ICL vs IWL (Fig. 14)
    for k, c in enumerate([1.0, 0.0] if q else [1.0, 0.5, 0.0]):
        r = g.run(CFG, {"data.icl_fraction": c, "data.P": 30 if q else 500, "schedule.epochs": 51 if q else 3001,
                        "data.n_test": 20 if q else 300}, tag=f"icl_fraction_{c:g}")  # fmt: skip
        ic, iw = r["loss/test_ic"], r["loss/test_iw"]
        Ls = float(np.asarray(r["theory/L_star"]))
        if c == 1.0 and not q:
            # finite P = 500: the references are least-squares predictors on the same train set,
            # scored on the same IC test set. In 3001 epochs GD from a small init has converged in
            # the in-context directions (Γ: D² features) but not yet in the weak in-weight ones
            # (full ATTN_M: 60 features), so the train loss is held to the Γ-class minimum
            # (tolerance 2%) and the IC test loss must lie between the two classes' test losses
            sets = {"data.icl_fraction": c, "data.P": 500, "data.n_test": 300}
            gam, full = gamma_least_squares(CFG, sets), attn_m_least_squares(CFG, sets)
            g.row("c = 1: final train loss vs the Γ-class least-squares minimum", r["loss/train"][-1], gam["train"], 0.02, "rel",
                  note=f"full-class minimum {full['train']:.4f}")  # fmt: skip
            lo, hi = sorted((gam["test_ic"], full["test_ic"]))
            g.row("c = 1: IC test loss inside [Γ-class, full-class] least-squares test losses (1 = yes)",
                  float(lo <= ic[-1] <= hi), 1.0, 0,
                  note=f"{ic[-1]:.4f} in [{lo:.4f}, {hi:.4f}]; population L* = {Ls:.4f} ({ic[-1] / Ls - 1:+.1%})")  # fmt: skip
        else:
            g.info(f"c = {c:g}: IC test loss", ic[-1])
        g.info(f"c = {c:g}: IW test loss", iw[-1])
        axs[3].plot(r.time, ic, "-", color=f"C{k}", lw=2, label=f"c = {c:g}: IC")
        axs[3].plot(r.time, iw, "--", color=f"C{k}", lw=2, label=f"c = {c:g}: IW")
    axs[3].set_title("ICL vs IWL test losses (Fig. 14)")
    axs[3].set_xlabel("t / τ")
    axs[3].legend(fontsize=7)

    # 5. N = 128, D = 64 (white, population)
    D, N = (8, 16) if q else (64, 128)
    big = g.run(CFG, {**POP, "data.D": D, "data.N": N, "data.spectrum": "white", "init.scale": 1e-3, "optim.lr": 1e-2,
                      "schedule.epochs": 1001 if q else 2001, "schedule.save_every": 10}, tag=f"D{D}_N{N}")  # fmt: skip
    t, L, Leq = big.time, big["loss/train"], big["theory/loss/train"]
    # as for the init scan: the drop time to 5%; the final loss to 1% (the run ends shortly after
    # the drop, t/τ = 40 against t_½ ≈ 28, where the approach to L* is still ~1e-3 away)
    g.row(
        f"D = {D}, N = {N}: half-drop time vs Eq. 10",
        half_drop(t, L),
        half_drop(t, Leq),
        0.05,
        "rel",
    )
    g.row(f"D = {D}, N = {N}: final loss vs Eq. 10", L[-1], Leq[-1], 0.01, "rel")
    axs[4].plot(t, L, lw=2, label="ATTN_M (population)")
    axs[4].plot(t, Leq, "k--", lw=1, label="Eq. 10")
    axs[4].set_title(f"D = {D}, N = {N}, white spectrum")
    axs[4].set_xlabel("t / τ")
    axs[4].legend(fontsize=7)
    axs[5].axis("off")
    fig.tight_layout()
    g.figure(fig, "icl_variants")
    return g.finish()


if __name__ == "__main__":
    main()
