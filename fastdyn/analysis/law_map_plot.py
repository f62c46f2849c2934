"""⑥ The figure of a validation map (:class:`fastdyn.analysis.law_map.LawMap`).

z = (p_fit − p_law) / h, h the half-width of the fit's CI, across the grid axes: a heatmap for two
axes (cells outlined where the law breaks, |z| > threshold), a line for one (the band |z| ≤
threshold shaded, breaking points marked). The colour and line scales are symmetric-log with the
linear range |z| ≤ threshold, so small and large misses both show.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from .law_map import LawMap, MapRow, check_figure_axes, format_value

__all__ = ["plot_law_map"]


#: regime labels in mathtext
_TEX = {"small": r"$\Lambda_s \ll 1$", "large": r"$\Lambda_s \gg 1$", "mixed": "mixed",
        "equal": r"$\Lambda_s$ equal", "": ""}  # fmt: skip


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _order(values: list[Any]) -> list[Any]:
    """Distinct values, numbers ascending (else first-seen order)."""
    seen = list(dict.fromkeys(values))
    if all(isinstance(v, int | float) for v in seen):
        return sorted(seen)
    return seen


def _short(key: str) -> str:
    return {"task.alpha": "α", "task.beta": "β", "task.gamma": "γ", "task.model_size": "D",
            "task.n_samples": "N", "task.strength0": "Λ0", "time.t_max": "t_max"}.get(key, key)  # fmt: skip


def _axis_label(key: str) -> str:
    short = _short(key)
    return key if short == key else f"{short} ({key})"


def _plain():
    """Tick labels 0, ±1, ±10, … (not 10^0) on the symmetric-log scales."""
    from matplotlib import ticker

    return ticker.FuncFormatter(lambda v, _: f"{v:g}")


def _title(m: LawMap) -> str:
    return (f"L ∝ t^-p: z = (fit − law) / half-width of the fit's {round(100 * m.ci_level)}% CI\n"
            f"the law breaks where |z| > {m.threshold:g}")  # fmt: skip


def _cell_text(r: MapRow) -> str:
    if r.exponent is None:
        return "no fit"
    if r.law.exponent is None:
        return f"p = {r.exponent:.3f}\nno law"
    return (f"p = {r.exponent:.3f}\nlaw {r.law.exponent:.3f}\n{_TEX.get(r.law.regime, r.law.regime)}"
            f"\nz = {r.z:+.2f}")  # fmt: skip


def plot_law_map(m: LawMap, out: str | os.PathLike) -> None:
    """Write the figure of ``m`` to ``out`` (ValueError unless it has one or two grid axes and one
    point per grid cell)."""
    axes = check_figure_axes(m.keys, [r.params for r in m.rows])
    plt = _mpl()
    (_heatmap if len(axes) == 2 else _line)(plt, m, axes, out)


def _vmax(m: LawMap) -> float:
    zs = [abs(r.z) for r in m.rows if r.z is not None and math.isfinite(r.z)]
    return max([3.0 * m.threshold, *zs])


def _heatmap(plt, m: LawMap, axes: list[str], out) -> None:
    from matplotlib import colors

    ky, kx = axes
    ys, xs = _order([r.params[ky] for r in m.rows]), _order([r.params[kx] for r in m.rows])
    z = np.full((len(ys), len(xs)), np.nan)
    where = {}
    for r in m.rows:
        i, j = ys.index(r.params[ky]), xs.index(r.params[kx])
        where[i, j] = r
        if r.z is not None:
            z[i, j] = np.clip(r.z, -1e300, 1e300)
    vmax = _vmax(m)
    norm = colors.SymLogNorm(linthresh=m.threshold, vmin=-vmax, vmax=vmax, base=10)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 + 1.35 * len(xs)), 1.6 + 1.05 * len(ys)), dpi=110)
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="0.85")
    im = ax.imshow(np.ma.masked_invalid(z), cmap=cmap, norm=norm, origin="lower", aspect="auto")
    for (i, j), r in where.items():
        breaks = r.verdict == "breaks"
        strong = r.z is not None and abs(r.z) > 0.3 * vmax
        ax.text(j, i, _cell_text(r), ha="center", va="center", fontsize=7,
                color="white" if strong else "black")  # fmt: skip
        if breaks:
            ax.add_patch(plt.Rectangle((j - 0.47, i - 0.47), 0.94, 0.94, fill=False, lw=2.0,
                                       ec="black", ls="--"))  # fmt: skip
    ax.set_xticks(range(len(xs)), [format_value(v) for v in xs])
    ax.set_yticks(range(len(ys)), [format_value(v) for v in ys])
    ax.set_xlabel(_axis_label(kx))
    ax.set_ylabel(_axis_label(ky))
    cb = fig.colorbar(im, ax=ax, shrink=0.9)
    cb.set_label("z = (p_fit − p_law) / CI half-width")
    cb.ax.yaxis.set_major_formatter(_plain())
    for t in (-m.threshold, m.threshold):
        cb.ax.axhline(t, color="black", lw=1.2, ls="--")
    ax.set_title(_title(m) + " (dashed outline); grey: no fit or no law", fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def _line(plt, m: LawMap, axes: list[str], out) -> None:
    (k,) = axes
    rows = sorted(m.rows, key=lambda r: _order([q.params[k] for q in m.rows]).index(r.params[k]))
    vals = [r.params[k] for r in rows]
    numeric = all(isinstance(v, int | float) for v in vals)
    x = np.asarray(vals, float) if numeric else np.arange(len(vals), dtype=float)
    z = np.array([np.nan if r.z is None else r.z for r in rows], float)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    ax.axhspan(-m.threshold, m.threshold, color="tab:green", alpha=0.15,
               label=f"holds: |z| ≤ {m.threshold:g}")  # fmt: skip
    ax.axhline(0, color="0.4", lw=0.8)
    ax.plot(x, z, "-", color="0.3", lw=1.0)
    br = np.array([r.verdict == "breaks" for r in rows])
    ok = np.array([r.verdict == "holds" for r in rows])
    none = np.isnan(z)
    if ok.any():
        ax.plot(x[ok], z[ok], "o", color="tab:green", label="holds")
    if br.any():
        ax.plot(x[br], z[br], "X", color="tab:red", ms=9, label="breaks")
    if none.any():
        ax.plot(x[none], np.zeros(int(none.sum())), "o", mfc="none", color="0.5",
                label="no fit / no law")  # fmt: skip
    for xi, zi, r in zip(x, z, rows, strict=True):
        if r.z is None:
            ax.annotate("no fit" if r.exponent is None else "no law", (xi, 0), fontsize=7,
                        textcoords="offset points", xytext=(4, 6), color="0.4")  # fmt: skip
        else:
            ax.annotate(f"{r.exponent:.3f} vs {r.law.exponent:.3f}", (xi, zi), fontsize=7,
                        textcoords="offset points", xytext=(4, 6))  # fmt: skip
    ax.set_yscale("symlog", linthresh=m.threshold)
    if numeric and np.all(x > 0) and x.max() / x.min() > 20:
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(x, [format_value(v) for v in vals])
    ax.set_xlabel(_axis_label(k))
    ax.set_ylabel("z = (p_fit − p_law) / CI half-width")
    ax.yaxis.set_major_formatter(_plain())
    ax.set_title(_title(m) + " (labels: fit p vs law p)", fontsize=8)
    ax.margins(x=0.1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
