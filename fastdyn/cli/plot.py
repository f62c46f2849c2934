"""``fastdyn plot FILE... -o out.png``: figures from fastdyn files."""

from __future__ import annotations

import click

from ._common import UserError, guarded

KINDS = ("loss",)


@click.command("plot")
@click.argument("files", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="PNG (or PDF/SVG) to write.")
@click.option("--kind", type=click.Choice(KINDS), default="loss", show_default=True, help="What to plot.")
@click.option("--y", "series", default="loss/test", show_default=True, help="Series to plot (e.g. loss/train).")
@guarded
def command(files: tuple[str, ...], output: str, kind: str, series: str) -> None:
    """Plot FILES (fastdyn HDF5 outputs)."""
    from ..analysis.plot import plot_loss
    from ..h5.reader import load

    runs = [load(f) for f in files]
    for r in runs:
        if series not in r:
            raise UserError(f"--y {series}: {r.path} has no such series; it has {', '.join(k for k in sorted(r.series) if k.startswith(('loss', 'theory')))}")
    plot_loss(runs, output, series=series)
    click.echo(f"wrote {output}", err=True)
