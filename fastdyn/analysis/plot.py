"""⑥ Plots from files only (log-log where it belongs). Every function either makes its own figure,
saves it to ``out`` and returns the (closed) Figure, or, given ``ax=`` (matplotlib Axes; a pair for
the two-panel kinds), draws into those axes, returns them and leaves their figure open (saved to
``out`` too when it is given), so figures compose::

    fig, (a, b) = plt.subplots(1, 2)
    plot_loss(runs, ax=a)
    plot_scaling([report], ax=b)

Kinds: ``loss`` (loss curves, theory dashed), ``scaling`` (a fit with its exponent ± CI, theory
dashed), ``frontier`` (L*(C), D*(C)), ``tasks`` (per-task f_s/Λ_s and emergence times), ``weights``
(attention value weights and eigen-projections over time).
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Sequence

import numpy as np

from ..h5.reader import Run
from .compare import FitReport, FrontierReport
from .labels import (
    default_series,
    level_label,
    loss_levels,
    run_labels,
    series_name,
    time_label,
    y_label,
)
from .levels import FLOOR

STYLES = ("default", "paper")
#: residuals below float64 epsilon are drawn at it (equal to round-off)
EPS = 2.0**-52

#: paper style: one journal column (3.4 in) wide, 8 pt text, fonts embedded as text in PDF/SVG
_PAPER_RC = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 6,
    "lines.linewidth": 1.0,
    "axes.linewidth": 0.6,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.fonttype": "none",
    "savefig.dpi": 300,
}
_SIZES = {"default": ((6.4, 4.4), (10.5, 4.4)), "paper": ((3.4, 2.6), (7.0, 2.6))}


def _mpl():
    """pyplot; on first use without a caller's pyplot, on the file-only Agg backend (a caller's
    own backend, e.g. a notebook's, is left alone: switching it would close their figures)."""
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"--style: must be one of {', '.join(STYLES)}, got {style!r}")


def _subplots(style: str, ncols: int = 1, rows: int = 1):
    """A figure of one or two panels sized for ``style`` (inside :func:`_style_rc`); ``rows=2``:
    a main panel over a residual panel a third its height, sharing the x axis."""
    _check_style(style)
    plt = _mpl()
    w, h = _SIZES[style][0 if ncols == 1 else 1]
    dpi = 110 if style == "default" else 100
    if rows == 2:
        return plt.subplots(2, ncols, figsize=(w, h * 1.3), dpi=dpi, sharex=True,
                            gridspec_kw={"height_ratios": (3, 1)})  # fmt: skip
    return plt.subplots(1, ncols, figsize=(w, h), dpi=dpi)


def _panels(ax, style: str, n: int, what: str, rows: int = 1):
    """``(fig, axes, own)``: with ``ax`` None a new figure of ``n`` panels (``rows=2``: a main
    panel over a residual panel) and ``own=True``; else the caller's ``ax`` (one Axes, or ``n``
    of them for an ``n``-panel kind) and its figure, ``own=False``."""
    if ax is None:
        fig, axes = _subplots(style, n, rows)
        return fig, (list(axes) if n * rows > 1 else [axes]), True
    axes = list(ax) if isinstance(ax, list | tuple | np.ndarray) else [ax]
    if len(axes) != n or not all(hasattr(a, "plot") and hasattr(a, "figure") for a in axes):
        want = (
            "one matplotlib Axes"
            if n == 1
            else f"{n} matplotlib Axes, e.g. plt.subplots(1, {n})[1]"
        )
        raise ValueError(f"{what}: ax must be {want}, got {type(ax).__name__}")
    return axes[0].figure, axes, False


def _check_out(out, ax, what: str) -> None:
    if out is None and ax is None:
        raise ValueError(f"{what}: give out= (a file to write) or ax= (axes to draw into)")


def _style_rc(style: str):
    """The rc settings of ``style`` as a context (restored after the figure is saved)."""
    _check_style(style)
    import matplotlib

    return matplotlib.rc_context(_PAPER_RC if style == "paper" else {"legend.fontsize": 7})


def _tidy_log_y(ax) -> None:
    """Readable ticks on a log y axis whose data spans less than a decade: a few plain-number
    ticks (not every minor tick as ``1.0119 × 10^0``); a flat curve gets a ±5% range."""
    from matplotlib import ticker

    ys = [np.asarray(ln.get_ydata(), float) for ln in ax.get_lines()]
    ys = [y[np.isfinite(y) & (y > 0)] for y in ys]
    ys = np.concatenate(ys) if ys else np.array([])
    if ys.size == 0:
        return
    lo, hi = float(ys.min()), float(ys.max())
    if hi / lo >= 10:
        return
    if hi / lo < 1.1:
        mid = math.sqrt(lo * hi)
        ax.set_ylim(mid / 1.05 * min(1.0, lo / mid), mid * 1.05 * max(1.0, hi / mid))
    ax.yaxis.set_major_locator(ticker.MaxNLocator(5))
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.4g"))
    ax.yaxis.set_minor_locator(ticker.NullLocator())


def _styled(fn):
    """Run a plot function under the rc settings of its ``style`` keyword."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, style: str = "default", **kw):
        with _style_rc(style):
            return fn(*args, style=style, **kw)

    return wrapper


def _level_lines(run: Run) -> list[tuple[float, str, str, str | None]]:
    """The model's reference levels (``loss_levels``) as lines ``(value, kind, style, gid)``:
    plateau losses dotted (kind "plateaus L(M_m), m = 0..D"), L* dash-dotted, a level the file
    describes (its ``long_name``, e.g. a finite train set's own minimum) dashed; a plateau equal
    to L* is drawn once, as L*."""
    levels = loss_levels(run)
    stars = [v for n, vals in levels if n.endswith("L_star") for v in vals]
    out = []
    for n, vals in levels:
        star = n.endswith("L_star")
        described = None if star or vals.size != 1 else level_label(run, n)
        for m, v in enumerate(vals):
            if not (math.isfinite(v) and v > 0):
                continue
            if not star and any(abs(v - s) <= 1e-9 * abs(s) for s in stars):
                continue
            if star:
                out.append((float(v), "L* (global minimum, population)", "-.", n))
            elif described:
                out.append((float(v), described, "--", n))
            else:
                out.append((float(v), f"plateaus L(M_m), m = 0..{vals.size - 1}", ":", f"{n}[{m}]"))
    return out


def _levels(ax, runs: Sequence[Run], colors: Sequence[str], names: Sequence[str]) -> None:
    """Each run's reference levels (:func:`_level_lines`) in its colour, one legend entry per
    kind; a level of the same kind and value in several runs (two runs with the same L*) is
    drawn once, in grey, labelled with the runs that share it."""
    lines: dict[tuple[str, float], list[tuple[int, str, str | None]]] = {}
    for i, run in enumerate(runs):
        for v, kind, ls, gid in _level_lines(run):
            key = next((k for k in lines if k[0] == kind and abs(k[1] - v) <= 1e-9 * v), (kind, v))
            lines.setdefault(key, []).append((i, ls, gid))
    labelled: set[tuple[str, ...]] = set()
    for (kind, v), users in lines.items():
        who = tuple(dict.fromkeys(names[i] for i, _, _ in users))
        shared = len(who) > 1
        tag = (kind, *who)
        lab = None
        if tag not in labelled:
            lab = f"{' and '.join(who)}: {kind}" + (" (shared)" if shared else "")
            labelled.add(tag)
        i, ls, gid = users[0]
        ln = ax.axhline(v, color="0.35" if shared else colors[i], lw=0.8, ls=ls, label=lab)
        ln.set_gid(gid)


def _residuals(bx, t: np.ndarray, y: np.ndarray, th: np.ndarray, color: str) -> bool:
    """|y/θ − 1| on the lower panel where θ is above the round-off floor (values below
    :data:`~fastdyn.analysis.levels.FLOOR` of its maximum are not compared); True if some
    points were left out for that reason."""
    n = min(t.size, y.size, th.size)
    t, y, th = t[:n], y[:n], th[:n]
    ok = (t > 0) & np.isfinite(y) & np.isfinite(th) & (th > 0)
    if not ok.any():
        return False
    above = ok & (th >= FLOOR * np.max(th[ok]))
    rel = np.maximum(np.abs(y[above] / th[above] - 1.0), EPS)
    bx.plot(t[above], rel, "-", color=color, lw=1.0)
    return bool((ok & ~above).any())


def _note(ax, y: float, text: str, va: str = "bottom") -> None:
    """A small grey note at the left of ``ax`` (axes coordinates), on a white ground."""
    ax.text(0.01, y, text, transform=ax.transAxes, fontsize="x-small", color="0.3", va=va,
            zorder=5, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})  # fmt: skip


def _clip_round_off(ax) -> bool:
    """Clip a log y axis at FLOOR × its largest value when the data go further down (a run's
    loss flattens at float64 round-off while a closed form goes on); True if it clipped."""
    ys = [np.asarray(ln.get_ydata(), float) for ln in ax.get_lines()]
    ys = np.concatenate([y[np.isfinite(y) & (y > 0)] for y in ys]) if ys else np.array([])
    if ys.size == 0 or ys.min() >= FLOOR * ys.max():
        return False
    # the top too: autoscaling padded it by 5 % of the unclipped range (to 1e11 for a closed form
    # that falls to 1e-241); pad by 5 % of the clipped one
    ax.set_ylim(FLOOR * ys.max(), ys.max() * FLOOR**-0.05)
    return True


@_styled
def plot_loss(
    runs: Sequence[Run],
    out: str | os.PathLike | None = None,
    *,
    series: str | None = None,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    style: str = "default",
    ax=None,
):
    """Loss vs time for each run in its own colour: the simulation as a broad pale line,
    ``/theory/<series>`` dashed on top of it and the model's reference levels (plateaus L(M_m)
    dotted, L* dash-dotted); with theory, a lower panel of |L/L_th − 1|.

    Values below :data:`~fastdyn.analysis.levels.FLOOR` of the largest one are round-off (a run's
    loss flattens there while the closed form goes on down): the loss axis is clipped there and
    the residuals leave them out, each saying so on the figure.

    ``series`` None: each run's model default (:func:`fastdyn.analysis.labels.default_series`);
    ``labels``: one legend label per run (default: file names); returns the Figure.
    ``ax``: draw into this Axes (the loss only), or a pair (loss, residuals), and return it.
    Log-log axes; t = 0 (not representable on a log axis) is dropped from the plot only.
    """
    _check_out(out, ax, "plot_loss")
    target = ax
    names = run_labels(runs, labels)
    xlabel = time_label(runs)
    used = [series or default_series(r) for r in runs]
    with_theory = any(f"theory/{s}" in r and s in r for r, s in zip(runs, used, strict=True))
    pair = isinstance(target, list | tuple | np.ndarray)
    fig, axes, own = _panels(target, style, 2 if pair else 1, "plot_loss",
                             rows=2 if with_theory and target is None else 1)  # fmt: skip
    ax = axes[0]
    bx = axes[1] if len(axes) > 1 and with_theory else None  # no theory: no residuals
    one = len(set(used)) == 1
    theory = left_out = False
    level_runs: list[tuple[Run, str, str]] = []
    for i, (run, name, s) in enumerate(zip(runs, names, used, strict=True)):
        color = f"C{i % 10}"
        name = name if one else f"{name} ({series_name(s)})"
        t = run.time
        keep = t > 0
        th = f"theory/{s}"
        broad = th in run and s in run  # drawn under its dashed theory: keep both visible
        if s in run:
            y = run[s]
            m = keep & np.isfinite(y) & (y > 0)
            lw = (
                (3.2 if style == "default" else 2.0)
                if broad
                else (1.8 if style == "default" else 1.1)
            )
            ax.plot(t[m], y[m], "-", color=color, lw=lw, alpha=0.45 if broad else 1.0,
                    label=name, gid=s)  # fmt: skip
        if th in run:
            y = run[th]
            m = keep & np.isfinite(y) & (y > 0)
            ax.plot(
                t[m], y[m], "--", color=color, lw=1.0, label=f"{name}: theory", gid=th, zorder=3
            )
            theory = True
            if bx is not None and s in run:
                left_out |= _residuals(bx, t, run[s], run[th], color)
        if s.startswith("loss/") and _level_lines(run):
            level_runs.append((run, color, name))
    if level_runs:
        _levels(ax, *zip(*level_runs, strict=True))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylabel(y_label(used[0]) if one else "loss (dimensionless)")
    if _clip_round_off(ax):
        _note(ax, 0.02, f"clipped at {FLOOR:g} × the largest value (float64 round-off below)")
    if bx is not None:
        bx.set_xscale("log")
        bx.set_yscale("log")
        bx.set_ylabel("|L/L_th − 1|")
        bx.set_xlabel(xlabel)
        if left_out:
            _note(bx, 0.93, f"compared where theory ≥ {FLOOR:g} × its largest value", va="top")
    else:
        ax.set_xlabel(xlabel)
    if title or style == "default":
        default = (series_name(used[0]) if one else "losses") + (
            " (dashed: theory)" if theory else ""
        )
        ax.set_title(title or default)
    if bx is not None and own:
        fig.align_ylabels([ax, bx])
    side = None if not level_runs else "below" if style == "paper" else "right"
    return _finish(fig, [ax] if bx is None else [ax, bx], out, own, target, outside=side)


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


def _x_label(rep) -> str:
    return (
        (rep.x_label or X_LABELS["time"])
        if rep.x_name == "time"
        else X_LABELS.get(rep.x_name, rep.x_name)
    )


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
    kw.setdefault("color", "k")
    ax.plot(xs, yc * (xs / xc) ** (-theory_p), "--", lw=1.2, label=label, **kw)


def _finish(fig, ax_list, out, own: bool = True, ax=None, outside: str | None = None):
    """Tidy the axes; a figure of our own is laid out, saved to ``out`` and closed (returns it);
    the caller's axes ``ax`` are returned with their figure left open (saved when ``out``).
    ``outside`` "right" or "below" (a figure of our own only): the first axes' legend goes
    outside the axes there, the figure grown by its size, so that it hides no data (reference
    levels span the whole width: no corner of a loss plot is free of them); "below" keeps the
    width (paper style: one journal column)."""
    rect = (0.0, 0.0, 1.0, 1.0)
    for k, a in enumerate(ax_list):
        if a.get_yscale() == "log":
            _tidy_log_y(a)
        a.grid(True, which="major", alpha=0.3)
        if not a.get_legend_handles_labels()[0]:
            continue
        if outside and own and k == 0:
            w, h = fig.get_size_inches()
            if outside == "right":
                leg = a.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
                fig.canvas.draw()
                fig.set_size_inches(w + leg.get_window_extent().width / fig.dpi + 0.1, h)
            else:
                import textwrap

                hs, labs = a.get_legend_handles_labels()
                labs = ["\n".join(textwrap.wrap(lb, 60)) for lb in labs]  # within the column
                leg = fig.legend(hs, labs, loc="lower center", ncol=1)
                fig.canvas.draw()
                lh = leg.get_window_extent().height / fig.dpi + 0.05
                fig.set_size_inches(w, h + lh)
                rect = (0.0, lh / (h + lh), 1.0, 1.0)
        else:
            a.legend()
    if not own:
        if out is not None:
            fig.savefig(out)
        return ax
    fig.tight_layout(rect=rect)
    fig.savefig(out)
    _mpl().close(fig)
    return fig


@_styled
def plot_scaling(reports: Sequence[FitReport], out: str | os.PathLike | None = None, *,
                 title: str | None = None, labels: Sequence[str] | None = None,
                 style: str = "default", ax=None):  # fmt: skip
    """Log-log data, fitted power law (exponent ± stderr and CI in the legend) and theory (dashed),
    each report in its own colour.

    Per report: the data (a curve for time fits, markers for scans), the fit over its window and,
    when the run has a theory exponent, the theory slope through the fit at the window centre.
    ``ax``: draw into this Axes and return it.
    """
    _check_out(out, ax, "plot_scaling")
    target = ax
    if not reports:
        raise ValueError("plot_scaling: no fits to plot")
    if labels and len(labels) != len(reports):
        raise ValueError(f"--label: give one per fit ({len(reports)}), got {len(labels)} labels")
    fig, (ax,), own = _panels(target, style, 1, "plot_scaling")
    notes: list[str] = []
    for i, rep in enumerate(reports):
        keep = (rep.x > 0) & (rep.y > 0)
        mark = "-" if rep.x_name == "time" else "o"
        name = labels[i] if labels else rep.label
        (ln,) = ax.plot(rep.x[keep], rep.y[keep], mark, color=f"C{i % 10}", lw=1.6, ms=5,
                        alpha=0.8, label=name)  # fmt: skip
        lo, hi = rep.fit.window
        xs = np.geomspace(lo, hi, 64)
        ax.plot(xs, rep.fit.predict(xs), "-", color=ln.get_color(), lw=3, alpha=0.45,
                label=_fit_label(rep.fit, rep.x_name))  # fmt: skip
        if rep.theory is not None:
            local = rep.theory.source.startswith("local law")
            what = "theory (local law of the tasks in the window)" if local else "theory"
            _theory_line(ax, rep.fit, rep.theory.exponent, (lo, hi),
                         f"{what}: p = {rep.theory.exponent:.4f} (Δ = {rep.difference:+.4f})",
                         color=ln.get_color())  # fmt: skip
        elif rep.theory_note:
            notes.append(f"{name}: no theory line: {rep.theory_note}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_x_label(reports[0]))
    ax.set_ylabel(y_label(reports[0].y_name))
    if title or style == "default":
        ax.set_title(title or f"{series_name(reports[0].y_name)} vs {reports[0].x_name}")
    if notes:
        _note(ax, 0.02, "\n".join(textwrap.fill(n, 100) for n in notes))
    return _finish(fig, [ax], out, own, target)


@_styled
def plot_frontier(report: FrontierReport, out: str | os.PathLike | None = None, *,
                  title: str | None = None, style: str = "default", ax=None):  # fmt: skip
    """Left: L(C = tD) of every run, L*(C) and its fit; right: D*(C) and its fit; theory dashed.
    ``ax``: a pair of Axes (left, right) to draw into; returned."""
    _check_out(out, ax, "plot_frontier")
    target = ax
    fr = report.frontier
    fig, (ax, bx), own = _panels(target, style, 2, "plot_frontier")
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
    ax.set_ylabel(y_label(report.y_name))
    bx.set_ylabel("compute-optimal model size D* (tasks)")
    if own and (title or style == "default"):
        fig.suptitle(title or f"compute-optimal frontier of the {series_name(report.y_name)}")
    elif title:
        ax.set_title(title)
    return _finish(fig, [ax, bx], out, own, target)


def _task_strengths(run: Run, index: np.ndarray) -> np.ndarray | None:
    """Λ_s of the tasks ``index`` from the run's model (``task_strengths`` hook), else None."""
    from ..models.registry import get_model

    try:
        hook = get_model(run.model).analysis.task_strengths
    except KeyError:
        return None
    return hook(run, index) if hook is not None else None


@_styled
def plot_tasks(runs: Sequence[Run], out: str | os.PathLike | None = None, *,
               title: str | None = None, labels: Sequence[str] | None = None,
               style: str = "default", ax=None):  # fmt: skip
    """Per-task f_s/Λ_s(t) (log t), closed form dashed, emergence times t_s as dotted verticals.
    ``ax``: draw into this Axes and return it."""
    _check_out(out, ax, "plot_tasks")
    target = ax
    names = run_labels(runs, labels)
    xlabel = time_label(runs)
    fig, (ax,), own = _panels(target, style, 1, "plot_tasks")
    normalised = True
    theory_in_legend = False
    for run, rname in zip(runs, names, strict=True):
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
                        label=f"{rname}: s = {s}")  # fmt: skip
            if th:  # beside a simulation: black dashed, one legend entry for all of them
                th_label = f"closed form s = {s}" if not sim else None
                if sim and not theory_in_legend:
                    th_label, theory_in_legend = "closed form (dashed)", True
                ax.plot(t[keep], run["theory/tasks/f"][keep, j] / lam[j], "--", color="k" if sim else color,
                        lw=1.0, label=th_label)  # fmt: skip
            if emerg is not None and np.isfinite(emerg[j]) and emerg[j] > 0:
                ax.axvline(emerg[j], color=color, ls=":", lw=1.0)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("f_s(t) / Λ_s (fraction learned)" if normalised else "f_s(t)")
    if title or style == "default":
        ax.set_title(title or "per-task outputs (dotted: emergence times t_s)")
    return _finish(fig, [ax], out, own, target)


def _param_targets(run: Run) -> dict[str, np.ndarray]:
    """The values the run's ``params/`` series approach, from its model (``param_targets``)."""
    from ..models.registry import get_model

    try:
        hook = get_model(run.model).analysis.param_targets
    except KeyError:
        return {}
    return hook(run) if hook is not None else {}


@_styled
def plot_weights(runs: Sequence[Run], out: str | os.PathLike | None = None, *,
                 title: str | None = None, labels: Sequence[str] | None = None,
                 style: str = "default", ax=None):  # fmt: skip
    """Attention runs: value weights v_i(t) (left) and eigen-projections e_dᵀΓe_d(t) (right), log t;
    dashed: where the model says they go (``param_targets``, e.g. the global minimum's
    projections e_dᵀΓ*e_d). ``ax``: a pair of Axes (left, right) to draw into; returned."""
    _check_out(out, ax, "plot_weights")
    target = ax
    names = run_labels(runs, labels)
    xlabel = time_label(runs)
    fig, (ax, bx), own = _panels(target, style, 2, "plot_weights")
    for run, rname in zip(runs, names, strict=True):
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
                ax.plot(t[keep], V[keep, i], lw=1.5, label=f"{rname}: head {i + 1}")
        if "params/Gamma_eig" in run:
            G = run["params/Gamma_eig"].reshape(len(t), -1)
            for d in range(G.shape[1]):
                bx.plot(
                    t[keep], G[keep, d], lw=1.5, color=f"C{d % 10}", label=f"e_{d + 1}ᵀ Γ e_{d + 1}"
                )
            star = _param_targets(run).get("params/Gamma_eig")
            if star is not None and star.size == G.shape[1]:
                for d, g in enumerate(star):
                    bx.axhline(g, color=f"C{d % 10}", ls="--", lw=1.0,
                               label="global minimum Γ*" if d == 0 else None)  # fmt: skip
    for axis in (ax, bx):
        axis.set_xscale("log")
        axis.set_xlabel(xlabel)
    ax.set_ylabel("value weight v_i (dimensionless)")
    bx.set_ylabel("eigen-projection e_dᵀ Γ e_d (paper units)")
    if own and (title or style == "default"):
        fig.suptitle(title or "weights over training")
    elif title:
        ax.set_title(title)
    return _finish(fig, [ax, bx], out, own, target)
