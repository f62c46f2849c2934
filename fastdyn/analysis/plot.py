"""⑥ Plots from files only: loss curves with the theory overlay (log-log where it belongs)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..h5.reader import Run


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_loss(runs: Sequence[Run], out: str | os.PathLike, *, series: str = "loss/test", title: str | None = None):
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
