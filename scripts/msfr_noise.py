"""MSFR with approximately sparse features (the paper's App. H.2): how far noise σ on the off-task
feature coordinates moves trained attention from the closed form f⁰.

Runs data/configs/msfr_noise.toml (msfr-attn, dense features, 8 task types, ψ = 20) for
σ = 0 (exact sparse features, the sparse kernel), 0.01, 0.03, 0.1, 0.3, and compares the tracked f_s(t) (the response to a noise-free sequence, from the weights) with

- the msfr-core gd map of the same counts and init (``/ode/tasks/f``, exact H, the same steps):
  the σ = 0 run must equal it to round-off; the deviation D(σ) = max_{s,t} |f_s − f_s^gd|/Λ_s
  measures what the noise alone does, and its log-log slope over σ is reported (measured, no
  theory is claimed for it);
- the leading-order closed form f⁰_s(t) (docs/theory.md) at t = η·step: the paper's statement is that
  f⁰ stays accurate for approximately sparse features, i.e. that max |f − f⁰|/Λ stays at its σ = 0
  value (the O(1/ψ) and O(η) floor) for small σ. Rows: the floor, and each σ's excess over it.

    python scripts/msfr_noise.py            # full (about a minute)
    python scripts/msfr_noise.py --quick    # seconds
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gallery import Gallery, plt  # noqa: E402


def _closed_form(run, sigma_sets: dict) -> np.ndarray:
    """f⁰_s(t) (leading order) of the tracked tasks with the run's own counts and init."""
    import fastdyn
    from fastdyn.models.msfr import theory
    from fastdyn.models.msfr.problem import MsfrProblem

    cfg = fastdyn.load_config(
        Path(__file__).resolve().parents[1] / "data" / "configs" / "msfr_noise.toml",
        [f"{k}={v}" for k, v in sigma_sets.items()],
    )
    p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    ch = p.chunk(0, p.d)
    i = np.asarray(run["tasks/index"]).astype(int) - 1
    cols = [np.ascontiguousarray(getattr(ch, k)[i]) for k in ("lam", "psi", "rate", "v0x", "v0y", "w0x", "w0y")]  # fmt: skip
    return theory.f_curves(np.asarray(run.time), *cols, level="leading").T


def main(argv: list[str] | None = None) -> dict:
    g = Gallery("msfr_noise", __doc__, argv)
    sigmas = [0.0, 0.01, 0.1] if g.quick else [0.0, 0.01, 0.03, 0.1, 0.3]
    base = (
        {"schedule.epochs": 1000, "schedule.n_saves": 16, "task.n_samples": 400} if g.quick else {}
    )
    dev, excess, curves = [], [], {}
    floor = None
    for sg in sigmas:
        sets = dict(base) | {"data.feature_noise": sg}
        run = g.run("msfr_noise.toml", sets, tag=f"sigma{sg:g}")
        f = np.asarray(run["tasks/f"])
        gd = np.asarray(run["ode/tasks/f"])
        f0 = _closed_form(run, {k: v for k, v in sets.items()})
        d = float(np.max(np.abs(f - gd)))  # Λ_s = 1
        e = float(np.max(np.abs(f - f0)))
        curves[sg] = (np.asarray(run.time), f, f0)
        if sg == 0.0:
            # exact sparse features: trained attention is the gd map to round-off (measured 3e-16;
            # the bound allows for the logistic's gain on rounding over 5000 steps)
            g.row("σ = 0: max |f − f(gd map)|", d, 0.0, 1e-10)
            floor = e
            g.info("σ = 0: max |f − f⁰| (the O(1/ψ) + O(η) floor)", e)
            continue
        dev.append((sg, d))
        excess.append((sg, e - floor))
        g.info(f"σ = {sg:g}: max |f − f(gd map)| (the noise's own effect)", d)
        g.info(f"σ = {sg:g}: max |f − f⁰| minus the σ = 0 floor", e - floor)
    s_arr = np.array([s for s, _ in dev])
    d_arr = np.array([d for _, d in dev])
    slope = float(np.polyfit(np.log(s_arr), np.log(d_arr), 1)[0])
    g.info("d ln D(σ) / d ln σ (noise-only deviation vs σ)", slope)
    # the paper's claim (App. H.2): f⁰ stays as accurate as for exact sparse features when the
    # noise is small. Held to 20 % of the σ = 0 floor at the smallest σ (no theory gives the
    # noise's own O(σ) share; measured 1.8e-3 at σ = 0.03 against a floor of 1.8e-2)
    s_small, e_small = excess[0]
    g.row(
        f"σ = {s_small:g}: max |f − f⁰| against the σ = 0 floor", floor + e_small, floor, 0.2, "rel"
    )
    pl = plt()
    fig, ax = pl.subplots(1, 2, figsize=(10, 4))
    for k, (sg, (t, f, _f0)) in enumerate(curves.items()):
        m = t > 0
        ax[0].semilogx(t[m], f[m, -1], color=f"C{k}", label=f"σ = {sg:g}")
    t, _, f0 = curves[0.0]
    ax[0].semilogx(t[t > 0], f0[t > 0, -1], "k--", lw=1, label="f⁰ (closed form)")
    ax[0].set_xlabel("t = η·step")
    ax[0].set_ylabel("f_s(t), s = 8")
    ax[0].legend(fontsize=7)
    ax[1].loglog(s_arr, d_arr, "o-", label="max |f − f(gd map)|")
    ax[1].axhline(floor, color="k", ls=":", label="σ = 0: max |f − f⁰|")
    ax[1].set_xlabel("feature noise σ")
    ax[1].legend(fontsize=7)
    fig.suptitle("MSFR, approximately sparse features (App. H.2)")
    fig.tight_layout()
    g.figure(fig, "msfr_noise")
    return g.finish()


if __name__ == "__main__":
    main()
