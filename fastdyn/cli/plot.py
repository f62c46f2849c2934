"""``fastdyn plot FILE... -o out.png --kind loss|scaling|frontier|tasks|weights``: figures from files.

``loss``: loss curves (theory dashed). ``scaling``: a power-law fit with its exponent ± CI and the
theory slope (``--x time`` per file; ``--x model_size|n_samples`` across files). ``frontier``: the
compute-optimal frontier of files at different model sizes. ``tasks``: per-task f_s/Λ_s curves and
emergence times. ``weights``: ATTN value weights and eigen-projections over time.
"""

from __future__ import annotations

import click

from ._common import UserError, guarded
from .fit import load_checked, parse_window

KINDS = ("loss", "scaling", "frontier", "tasks", "weights")


@click.command("plot")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="PNG (or PDF/SVG) to write.",
)
@click.option(
    "--kind", type=click.Choice(KINDS), default="loss", show_default=True, help="What to plot."
)
@click.option("--x", "x", type=click.Choice(("time", "model_size", "n_samples")), default="time",
              show_default=True, help="--kind scaling: the resource on the x axis.")  # fmt: skip
@click.option(
    "--y",
    "series",
    default="loss/test",
    show_default=True,
    help="Series to plot (e.g. loss/train).",
)
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
@click.option("--allow-running", is_flag=True, help="Plot files whose run is still running.")
@guarded
def command(files: tuple[str, ...], output: str, kind: str, x: str, series: str, window: str,
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
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            if kind == "loss":
                for r in runs:
                    if series not in r:
                        have = ", ".join(
                            k for k in sorted(r.series) if k.startswith(("loss", "theory"))
                        )
                        raise UserError(f"--y {series}: {r.path} has no such series; it has {have}")
                plot.plot_loss(runs, output, series=series)
            elif kind == "scaling":
                if x == "time":
                    reps = [
                        compare.fit_run(r, "time", series, win, bootstrap=bootstrap) for r in runs
                    ]
                else:
                    w = None if win == "all" else win
                    reps = [compare.scan(runs, x, series, at, w, bootstrap=bootstrap)]
                plot.plot_scaling(reps, output)
            elif kind == "frontier":
                plot.plot_frontier(
                    compare.compute_frontier(runs, series, bootstrap=bootstrap), output
                )
            elif kind == "tasks":
                plot.plot_tasks(runs, output)
            else:
                plot.plot_weights(runs, output)
    except (ValueError, KeyError) as e:
        msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        raise UserError(msg.splitlines()[0]) from None
    for m in sorted({str(w.message) for w in rec}):
        click.echo(f"fastdyn: warning: {m}", err=True)
    click.echo(f"wrote {output}", err=True)
