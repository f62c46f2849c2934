"""⑥ Plots from files only (log-log where it belongs); every function saves ``out`` and returns
the matplotlib Figure.

Kinds: ``loss`` (loss curves, theory dashed), ``scaling`` (a fit with its exponent ± CI, theory
dashed), ``frontier`` (L*(C), D*(C)), ``tasks`` (per-task f_s/Λ_s and emergence times), ``weights``
(ATTN value weights and eigen-projections over time).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from ..h5.reader import Run
from .compare import FitReport, FrontierReport
from .load import config_value


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_loss(
    runs: Sequence[Run],
    out: str | os.PathLike,
    *,
    series: str = "loss/test",
    title: str | None = None,
):
    """Loss vs time for each run, with ``/theory/<series>`` dashed beside it; returns the Figure.

    Log-log axes; t = 0 (not representable on a log axis) is dropped from the plot only.
    """
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    for run in runs:
        t = run.time
        label = run.path.stem
        keep = t > 0
        if series in run:
            y = run[series]
            m = keep & np.isfinite(y) & (y > 0)
            ax.plot(t[m], y[m], lw=2, label=f"{label}: {series} (simulation)")
        th = f"theory/{series}"
        if th in run:
            y = run[th]
            m = keep & np.isfinite(y) & (y > 0)
            ax.plot(t[m], y[m], "k--", lw=1.2, label=f"{label}: {th}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    units = "t (gradient-flow time)"
    ax.set_xlabel(units)
    ax.set_ylabel(series.replace("loss/", "loss: "))
    ax.set_title(title or ", ".join(sorted({r.model for r in runs})))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return fig


# ----------------------------------------------------------------------------------------------
# scaling fits, frontiers, per-task curves, weights
# ----------------------------------------------------------------------------------------------

#: axis labels with units, by resource
X_LABELS = {
    "time": "t (gradient-flow time)",
    "model_size": "model size D (represented tasks)",
    "n_samples": "training sequences N",
    "compute": "compute C = t·D (gradient-flow time × tasks)",
}


def _y_label(series: str) -> str:
    return series.replace("theory/", "theory ").replace("loss/", "loss: ") + " (dimensionless)"


def _fit_label(fit, x: str) -> str:
    lo, hi = fit.ci
    sym = {"time": "t", "model_size": "D", "n_samples": "N", "compute": "C"}.get(x, "x")
    return (
        f"fit: ∝ {sym}^-p, p = {fit.exponent:.4f} ± {fit.stderr:.2g} "
        f"({round(100 * fit.ci_level)}% CI [{lo:.4f}, {hi:.4f}])"
    )


def _theory_line(ax, fit, theory_p: float, window: tuple[float, float], label: str, **kw) -> None:
    """Theory slope drawn dashed through the fitted line at the window's geometric centre."""
    lo, hi = window
    xc = math.sqrt(lo * hi)
    yc = float(fit.predict(xc))
    xs = np.geomspace(lo, hi, 32)
    ax.plot(xs, yc * (xs / xc) ** (-theory_p), "k--", lw=1.2, label=label, **kw)


def _finish(fig, ax_list, out) -> None:
    plt = _mpl()
    for ax in ax_list:
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_scaling(reports: Sequence[FitReport], out: str | os.PathLike, *, title: str | None = None):
    """Log-log data, fitted power law (exponent ± stderr and CI in the legend) and theory (dashed).

    Per report: the data (a curve for time fits, markers for scans), the fit over its window and,
    when the run has a theory exponent, the theory slope through the fit at the window centre.
    """
    plt = _mpl()
    if not reports:
        raise ValueError("plot_scaling: no fits to plot")
    fig, ax = plt.subplots(figsize=(6.4, 4.6), dpi=110)
    for rep in reports:
        keep = (rep.x > 0) & (rep.y > 0)
        style = "-" if rep.x_name == "time" else "o"
        (ln,) = ax.plot(rep.x[keep], rep.y[keep], style, lw=1.6, ms=5, alpha=0.8, label=rep.label)
        lo, hi = rep.fit.window
        xs = np.geomspace(lo, hi, 64)
        ax.plot(xs, rep.fit.predict(xs), "-", color=ln.get_color(), lw=3, alpha=0.45,
                label=_fit_label(rep.fit, rep.x_name))  # fmt: skip
        if rep.theory is not None:
            _theory_line(ax, rep.fit, rep.theory.exponent, (lo, hi),
                         f"theory: p = {rep.theory.exponent:.4f} (Δ = {rep.difference:+.4f})")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(X_LABELS.get(reports[0].x_name, reports[0].x_name))
    ax.set_ylabel(_y_label(reports[0].y_name))
    ax.set_title(title or f"{reports[0].y_name} vs {reports[0].x_name}")
    _finish(fig, [ax], out)
    return fig


def plot_frontier(report: FrontierReport, out: str | os.PathLike, *, title: str | None = None):
    """Left: L(C = tD) of every run, L*(C) and its fit; right: D*(C) and its fit; theory dashed."""
    plt = _mpl()
    fr = report.frontier
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 4.4), dpi=110)
    for D, t, L in zip(report.D, report.times, report.losses, strict=True):
        m = (t > 0) & (L > 0)
        ax.plot(t[m] * D, L[m], "-", color="0.6", lw=0.9, label=f"D = {D:g}")
    m = fr.interior
    ax.plot(fr.C[m], fr.L_star[m], "o", color="C0", ms=4, label="L*(C) (interior optimum)")
    bx.plot(fr.C[m], fr.D_star[m], "o", color="C1", ms=4, label="D*(C)")
    for axis, f, p_th, sign, name in (
        (ax, fr.fit_L, None if report.theory is None else report.theory.exponent, 1, "L*"),
        (bx, fr.fit_D, None if report.theory is None else report.theory.d_star, -1, "D*"),
    ):
        if f is None:
            continue
        xs = np.geomspace(*f.window, 64)
        lo, hi = sorted((sign * f.ci[0], sign * f.ci[1]))
        axis.plot(xs, f.predict(xs), "-", color="C3", lw=2.5, alpha=0.6,
                  label=f"fit: {name} ∝ C^{-sign}q, q = {sign * f.exponent:.4f} "
                        f"({round(100 * f.ci_level)}% CI [{lo:.4f}, {hi:.4f}])")  # fmt: skip
        if p_th is not None:
            _theory_line(axis, f, sign * p_th, f.window, f"theory: q = {p_th:.4f}")
    for axis in (ax, bx):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel(X_LABELS["compute"])
    ax.set_ylabel(_y_label(report.y_name))
    bx.set_ylabel("compute-optimal model size D* (tasks)")
    fig.suptitle(title or f"compute-optimal frontier of {report.y_name}")
    _finish(fig, [ax, bx], out)
    return fig


def _task_strengths(run: Run, index: np.ndarray) -> np.ndarray | None:
    if run.model != "msfr":
        return None
    lam0 = float(config_value(run, "task.strength0", 1.0))
    gamma = float(config_value(run, "task.gamma", 0.0))
    return lam0 * index.astype(float) ** -gamma


def plot_tasks(runs: Sequence[Run], out: str | os.PathLike, *, title: str | None = None):
    """Per-task f_s/Λ_s(t) (log t), closed form dashed, emergence times t_s as dotted verticals."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(6.8, 4.6), dpi=110)
    normalised = True
    for run in runs:
        sim, th = "tasks/f" in run, "theory/tasks/f" in run
        if not (sim or th):
            raise KeyError(f"{run.path}: no per-task series (tasks/f or theory/tasks/f)")
        idx = np.asarray(run["tasks/index"]).astype(int) if "tasks/index" in run else None
        ref = run["tasks/f" if sim else "theory/tasks/f"]
        if idx is None:
            idx = np.arange(1, ref.shape[1] + 1)
        lam = _task_strengths(run, idx)
        if lam is None:
            normalised = False
            lam = np.ones(idx.size)
        t = run.time
        keep = t > 0
        emerg = run["tasks/emergence"] if "tasks/emergence" in run else None
        for j, s in enumerate(idx):
            color = f"C{j % 10}"
            if sim:
                ax.plot(t[keep], run["tasks/f"][keep, j] / lam[j], "-", color=color, lw=1.8,
                        label=f"{run.path.stem}: s = {s}")  # fmt: skip
            if th:
                ax.plot(t[keep], run["theory/tasks/f"][keep, j] / lam[j], "--", color="k" if sim else color,
                        lw=1.0, label=f"closed form s = {s}" if not sim else None)  # fmt: skip
            if emerg is not None and np.isfinite(emerg[j]) and emerg[j] > 0:
                ax.axvline(emerg[j], color=color, ls=":", lw=1.0)
    ax.set_xscale("log")
    ax.set_xlabel(X_LABELS["time"])
    ax.set_ylabel("f_s(t) / Λ_s (fraction learned)" if normalised else "f_s(t)")
    ax.set_title(title or "per-task outputs (dotted: emergence times t_s)")
    _finish(fig, [ax], out)
    return fig


def _gamma_star_eig(run: Run) -> np.ndarray | None:
    """e_dᵀ Γ* e_d = 1 / (λ_d (1 + (1 + trΛ/λ_d)/N)) from the stored data config (None if absent)."""
    D, N = config_value(run, "data.D"), config_value(run, "data.N")
    if D is None or N is None:
        return None
    try:
        from ..models.attn_m.theory import shrink
        from ..problems.icl import spectrum_eigenvalues

        lam = spectrum_eigenvalues(
            int(D), str(config_value(run, "data.spectrum", "linear")),
            float(config_value(run, "data.exponent", 1.0)),
            tuple(config_value(run, "data.eigenvalues", ()) or ()),
            bool(config_value(run, "data.normalize_trace", True)),
        )  # fmt: skip
        return 1.0 / shrink(lam, float(N))
    except (ValueError, TypeError):
        return None


def plot_weights(runs: Sequence[Run], out: str | os.PathLike, *, title: str | None = None):
    """ATTN runs: value weights v_i(t) (left) and eigen-projections e_dᵀΓe_d(t) (right), log t;
    dashed: the global-minimum projections e_dᵀΓ*e_d (spec icl.md §4) when the config has them."""
    plt = _mpl()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 4.4), dpi=110)
    for run in runs:
        have = [k for k in ("params/value_weights", "params/Gamma_eig") if k in run]
        if not have:
            raise KeyError(
                f"{run.path}: no weight snapshots (params/value_weights, params/Gamma_eig)"
            )
        t = run.time
        keep = t > 0
        if "params/value_weights" in run:
            V = np.atleast_2d(run["params/value_weights"].reshape(len(t), -1))
            for i in range(V.shape[1]):
                ax.plot(t[keep], V[keep, i], lw=1.5, label=f"{run.path.stem}: head {i + 1}")
        if "params/Gamma_eig" in run:
            G = run["params/Gamma_eig"].reshape(len(t), -1)
            for d in range(G.shape[1]):
                bx.plot(
                    t[keep], G[keep, d], lw=1.5, color=f"C{d % 10}", label=f"e_{d + 1}ᵀ Γ e_{d + 1}"
                )
            star = _gamma_star_eig(run)
            if star is not None and star.size == G.shape[1]:
                for d, g in enumerate(star):
                    bx.axhline(g, color=f"C{d % 10}", ls="--", lw=1.0,
                               label="global minimum Γ*" if d == 0 else None)  # fmt: skip
    for axis in (ax, bx):
        axis.set_xscale("log")
        axis.set_xlabel("t (units of τ; gd: 2η·step)")
    ax.set_ylabel("value weight v_i (dimensionless)")
    bx.set_ylabel("eigen-projection e_dᵀ Γ e_d (paper units)")
    fig.suptitle(title or "weights over training")
    _finish(fig, [ax, bx], out)
    return fig
