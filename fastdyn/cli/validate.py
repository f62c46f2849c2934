"""``fastdyn validate SWEEP``: where each law holds across a sweep (the validation map).

Every point's fitted time exponent (L ∝ t^-p, the automatic window and CI of ``fastdyn fit``)
beside the law its own config predicts (the regime's law; the local law of a task table or
family), the difference in units of the CI half-width, and a verdict; a CSV, and with ``-o`` a
figure of the map (:mod:`fastdyn.analysis.law_map`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from ._common import UserError, flag_option, guarded


def _index_of(sweep: str) -> Path:
    """A sweep output folder, its index, or the sweep file (→ its output folder)."""
    p = Path(sweep)
    if p.is_file() and p.suffix == ".toml":
        from ..sweep.runner import output_dir
        from ..sweep.spec import load

        out = output_dir(load(p), None)
        if not (out / "index.h5").is_file():
            raise UserError(f"{sweep}: its output folder {out} holds no index.h5; run "
                            f"`fastdyn sweep {sweep}` first")  # fmt: skip
        return out / "index.h5"
    from ..analysis.law_map import find_index

    return find_index(p)


@click.command("validate")
@click.argument("sweep", metavar="SWEEP")
@click.option("--threshold", type=click.FloatRange(0, min_open=True), default=1.0,
              show_default=True,
              help="The law holds where |fit − law| ≤ THRESHOLD × the CI half-width (1: the law lies inside the CI).")  # fmt: skip
@click.option("--ci", "ci_level", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.95, show_default=True, help="Confidence level of the fits.")  # fmt: skip
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples for the CI (0: Student-t interval from the stderr).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--cutoff-fraction", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Auto windows end where s_c(t) reaches this fraction of D [default 0.1].")  # fmt: skip
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="The CSV to write [default: validate.csv beside the sweep's index].")  # fmt: skip
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Also draw the map (heatmap over two grid axes, a line over one) to this file.")  # fmt: skip
@flag_option("--no-csv", help="Write no CSV.")
@guarded
def command(sweep, threshold, ci_level, bootstrap, seed, cutoff_fraction, csv_path, output,
            no_csv) -> None:  # fmt: skip
    """Map where the scaling laws hold across a sweep (SWEEP: its output folder, its
    index.h5, or the sweep file): each point's fitted time exponent beside the law its config
    predicts (docs/theory.md), the difference in units of the fit's CI, and a verdict."""
    from ..analysis.law_map import MapError, table_lines, validate

    index = _index_of(sweep)
    if output is not None and Path(output).suffix.lower() not in (".png", ".pdf", ".svg"):
        raise UserError(f"-o {output}: the figure must be .png, .pdf or .svg")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            m = validate(index, threshold=threshold, ci=ci_level, bootstrap=bootstrap, seed=seed,
                         cutoff_fraction=cutoff_fraction, figure=output is not None)  # fmt: skip
        except (MapError, ValueError) as e:
            raise UserError(str(e).splitlines()[0]) from None
    series = sorted({r.series for r in m.rows})
    click.echo(f"{index}: {len(m.rows)} points; time exponent p of L ∝ t^-p fitted to "
               f"{', '.join(series)} (auto window, {round(100 * ci_level)}% CI), beside the law "
               "each point's config predicts over the fitted window (docs/theory.md)")  # fmt: skip
    for line in table_lines(m):
        click.echo(line)
    verdicts = [r.verdict for r in m.rows]
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in ("holds", "breaks", "no law", "no fit")
                       if v in verdicts)  # fmt: skip
    click.echo(f"verdict: the law holds where |fit − law| ≤ {threshold:g} × the CI half-width "
               f"(diff/CI, --threshold); {counts}")  # fmt: skip
    for r in m.rows:
        if r.note or r.law.kind == "none":
            click.echo(f"  {r.name}: {r.note or r.law.text}")
    if not no_csv:
        path = Path(csv_path) if csv_path else index.parent / "validate.csv"
        try:
            m.write_csv(path)
        except OSError as e:
            raise UserError(f"--csv {path}: cannot write ({e.strerror or e})") from None
        click.echo(f"csv: {path}")
    if output is not None:
        from ..analysis.law_map_plot import plot_law_map

        try:
            plot_law_map(m, output)
        except ValueError as e:
            raise UserError(str(e).splitlines()[0]) from None
        click.echo(f"figure: {output}")
    for msg in sorted({str(w.message) for w in rec} | set(m.warnings)):
        click.echo(f"fastdyn: warning: {msg}", err=True)
