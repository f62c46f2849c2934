"""ICL Fig. 4: ATTN_S with rank R = 1, 2, 4, 8 (D = 8): long plateaus at m divisible by R.

From data/configs/icl_fig4.toml (D = 8, N = 31, H = 9, init 5e-3, GD lr 2e-2), on the population
moments (data.population, reduced path; the paper trains on P = 80000 sequences, far too slow on 2
cores: the population run is its P → ∞ limit) for 100001 epochs (t/τ = 4000; the paper shows 20001).
For each R, the slowest point of the loss in the band around each L(M_m) is compared with L(M_m)
for the m the theory predicts a long plateau at (m = 0, R, 2R, …, fastdyn.models.attn_s.theory
.plateau_steps, reached within the run), and the m with a pause (|d ln L/d ln t| < 0.02) that are
not multiples of R are listed and counted (theory: none).

    python scripts/icl_fig4.py            # full: R = 1, 2, 4, 8
    python scripts/icl_fig4.py --quick    # R = 1, 2 for 20001 epochs
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gallery import Gallery, band_pauses, log_steps, plt  # noqa: E402

CFG = "icl_fig4.toml"
POP = {"data.population": True, "attention.reduced": True}


def main(argv: list[str] | None = None) -> dict:
    from fastdyn.models.attn_s.theory import plateau_steps

    g = Gallery("icl_fig4", __doc__, argv)
    q = g.quick
    ranks = [1, 2] if q else [1, 2, 4, 8]
    ep = 20001 if q else 100001
    pl = plt()
    fig, axs = pl.subplots(1, len(ranks), figsize=(3.2 * len(ranks), 3.4), sharey=True)
    for ax, R in zip(np.atleast_1d(axs), ranks, strict=True):
        run = g.run(
            CFG,
            {
                **POP,
                "attention.R": R,
                "schedule.epochs": ep,
                "schedule.save_steps": log_steps(ep, 300),
            },
            tag=f"R{R}",
        )
        t, L = run.time, run["loss/train"]
        th = np.asarray(run["theory/plateaus"])
        D = th.size - 1
        bands = band_pauses(t, L, th)
        reached = [
            m
            for m in range(D + 1)
            if L[-1] <= (th[m] if m == D else 0.5 * (th[m] + th[m + 1])) or m == 0
        ]
        want = [m for m in sorted(set(plateau_steps(th[1:], R)) | {D}) if m in reached]
        no_pause = [m for m in want if not bands[m][2] < 0.02]
        if no_pause:
            g.notes.append(
                f"R = {R}: no pause (slope ≥ 0.02) at m = {no_pause} although divisible by R "
                "(nearby eigenvalues are learned together; the claim is that long plateaus occur only at multiples of R)"
            )
        for m in (m for m in want if m not in no_pause):
            val, tm, slope = bands[m]
            # population loss: a long plateau at M_m sits at L(M_m) to ≪ 1e-3; tolerance 5e-3
            g.row(f"R = {R}: slowest point near L(M_{m}) (t/τ = {tm:.3g})", val, th[m], 5e-3, "rel",
                  note=f"|dlnL/dlnt| = {slope:.1e}")  # fmt: skip
        extra = [m for m in reached if m % R and m != D and bands[m][2] < 0.02]
        g.row(f"R = {R}: pauses at m not divisible by R (count)", len(extra), 0, 0,
              note=f"m = {extra}" if extra else "")  # fmt: skip
        m0 = t > 0
        ax.semilogx(t[m0], L[m0], lw=2, color=f"C{R.bit_length() - 1}")
        for k, v in enumerate(th):
            ax.axhline(v, color="gray" if k % R == 0 else "lightgray", ls=":", lw=0.8)
        ax.set_title(f"rank R = {R}")
        ax.set_xlabel("t / τ")
    np.atleast_1d(axs)[0].set_ylabel("population loss (dotted: L(M_m); dark: m divisible by R)")
    fig.tight_layout()
    g.figure(fig, "icl_fig4")
    return g.finish()


if __name__ == "__main__":
    main()
