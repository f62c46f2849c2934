"""``fastdyn plot FILE... -o out.png --kind loss|scaling|frontier|tasks|weights``: figures from files.

``loss``: loss curves (theory dashed). ``scaling``: a power-law fit with its exponent ± CI and the
theory slope (``--x time`` per file; ``--x model_size|n_samples`` across files). ``frontier``: the
compute-optimal frontier of files at different model sizes. ``tasks``: per-task f_s/Λ_s curves and
emergence times. ``weights``: attention value weights and eigen-projections over time.

Each file has its own colour (its theory curves and reference levels in the same colour), legend
labels from ``--label``, the time axis in the units the files state, and ``--style paper`` sizes
the figure for one journal column (write .pdf or .svg for vector output).
"""

from __future__ import annotations

import click

from ._common import UserError, flag_option, guarded, output_option
from .fit import _hint, _one, load_checked, parse_window, resolve_series

KINDS = ("loss", "scaling", "frontier", "tasks", "weights")


@click.command("plot")
@click.argument("files", nargs=-1, required=True)
@output_option("PNG (or PDF/SVG) to write.", required=True)
@click.option(
    "--kind", type=click.Choice(KINDS), default="loss", show_default=True, help="What to plot."
)
@click.option("--x", "x", type=click.Choice(("time", "model_size", "n_samples")), default="time",
              show_default=True, help="--kind scaling: the resource on the x axis.")  # fmt: skip
@click.option(
    "--y",
    "series",
    default=None,
    help="Series to plot (e.g. loss/train) [default: each model's default series].",
)
@click.option("--label", "labels", multiple=True,
              help="Legend label of each file, in order (repeat once per file) [default: file names].")  # fmt: skip
@click.option("--title", default=None, help="Figure title [default: what is plotted; paper: none].")
@click.option("--style", type=click.Choice(("default", "paper")), default="default", show_default=True,
              help="paper: one journal column (3.4 in), 8 pt fonts; write .pdf or .svg for vector output.")  # fmt: skip
@click.option(
    "--window",
    default=None,
    help="--kind scaling: auto, all or LO:HI [default: auto for --x time, else all].",
)
@click.option(
    "--at", "at", type=float, default=None, help="--kind scaling scans: loss at this time."
)
@click.option("--bootstrap", type=click.IntRange(min=0), default=200, show_default=True,
              help="Bootstrap resamples for the CI in the legend.")  # fmt: skip
@flag_option("--allow-running", help="Plot files whose run is still running.")
@guarded
def command(files: tuple[str, ...], output: str, kind: str, x: str, series: str | None,
            labels: tuple[str, ...], title: str | None, style: str, window: str,
            at: float | None, bootstrap: int, allow_running: bool) -> None:  # fmt: skip
    """Plot FILES (fastdyn HDF5 outputs)."""
    import warnings
    from pathlib import Path

    from ..analysis import compare, plot

    if not Path(output).resolve().parent.is_dir():
        raise UserError(f"--output {output}: directory {Path(output).parent} does not exist")
    win = parse_window(window or ("auto" if x == "time" else "all"))
    needs_y = kind in ("scaling", "frontier")
    # loss curves of a running run are fine to look at; fits of one need --allow-running
    runs = load_checked(files, allow_running or kind == "loss", series if needs_y else None)
    ys = resolve_series(runs, series) if kind in ("loss", "scaling", "frontier") else []
    if labels and len(labels) != len(runs):
        raise UserError(f"--label: give one per file ({len(runs)} files), got {len(labels)}")
    kw = {"title": title, "style": style}
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            if kind == "loss":
                for r, y in zip(runs, ys, strict=True):
                    if y not in r:
                        have = ", ".join(
                            k for k in sorted(r.series) if k.startswith(("loss", "theory"))
                        )
                        raise UserError(f"--y {y}: {r.path} has no such series; it has {have}")
                plot.plot_loss(runs, output, series=series, labels=labels or None, **kw)
            elif kind == "scaling":
                if x == "time":
                    reps = [
                        compare.fit_run(r, "time", y, win, bootstrap=bootstrap)
                        for r, y in zip(runs, ys, strict=True)
                    ]
                    plot.plot_scaling(reps, output, labels=labels or None, **kw)
                else:
                    w = None if win == "all" else win
                    reps = [compare.scan(runs, x, _one(ys), at, w, bootstrap=bootstrap)]
                    plot.plot_scaling(reps, output, **kw)
            elif kind == "frontier":
                rep = compare.compute_frontier(runs, _one(ys), bootstrap=bootstrap)
                plot.plot_frontier(rep, output, **kw)
            elif kind == "tasks":
                plot.plot_tasks(runs, output, labels=labels or None, **kw)
            else:
                plot.plot_weights(runs, output, labels=labels or None, **kw)
    except (ValueError, KeyError) as e:
        msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        raise UserError(_hint(msg.splitlines()[0])) from None
    for m in sorted({str(w.message) for w in rec}):
        click.echo(f"fastdyn: warning: {m}", err=True)
    click.echo(f"wrote {output}", err=True)
