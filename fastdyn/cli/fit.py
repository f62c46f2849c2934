"""``fastdyn fit FILE... --x time|model_size|n_samples|compute``: scaling exponents beside theory.

``--x time`` fits each file's loss curve; ``--x model_size`` / ``n_samples`` fit the final loss
(or the loss at ``--at T``) of several files against their config value; ``--x compute`` builds the
compute-optimal frontier from files with different model sizes. ``--json`` prints one object (one
fit) or a list (``--x time`` with several files).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import click

from ._common import UserError, flag_option, guarded

X_CHOICES = ("time", "model_size", "n_samples", "compute")


def parse_window(text: str) -> Any:
    """ "auto" | "all" | "LO:HI" (either side may be empty) → fit window argument."""
    t = text.strip().lower()
    if t in ("auto", "all"):
        return t
    parts = t.split(":")
    if len(parts) != 2:
        raise UserError(f"--window: must be auto, all or LO:HI (e.g. 1e2:1e6), got {text!r}")
    try:
        lo, hi = (float(p) if p else None for p in parts)
    except ValueError:
        raise UserError(f"--window: LO and HI must be numbers, got {text!r}") from None
    if lo is not None and hi is not None and not lo < hi:
        raise UserError(f"--window: must have LO < HI, got {text!r}")
    return (lo, hi)


def load_checked(files: tuple[str, ...], allow_running: bool, y: str | None = None) -> list:
    """Load files (paths, globs or sweep indexes); a running run is a user error unless
    ``allow_running``; check ``y`` exists."""
    from ..analysis.load import expand_paths
    from ..h5.layout import STATUS_COMPLETE, STATUS_RUNNING
    from ..h5.reader import load

    runs = []
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        paths = expand_paths(files)
    for w in rec:
        click.echo(f"fastdyn: warning: {w.message}", err=True)
    for f in paths:
        r = load(f)
        if r.status == STATUS_RUNNING and not allow_running:
            raise UserError(_unfinished(f, r.status))
        if "time" in r and r.time.size == 0:  # stopped before its first row
            raise UserError(f"{f}: no rows written yet (status {r.status}); nothing to use")
        if r.status not in (STATUS_COMPLETE, STATUS_RUNNING):
            click.echo(f"fastdyn: warning: {f}: run status is {r.status!r}", err=True)
        if y is not None and y not in r:
            have = ", ".join(k for k in sorted(r.series) if k.startswith(("loss", "theory/loss")))
            raise UserError(f"--y {y}: {f} has no such dataset; it has {have or 'no loss series'}")
        if y is not None and "time" not in r:
            raise UserError(f"{f}: no /time dataset (damaged or not a run output)")
        runs.append(r)
    return runs


def _unfinished(f: str, status: str) -> str:
    """Why an unfinished file is refused, in the words of ``fastdyn inspect``'s state line."""
    from ..h5.repair import killed_line, run_state

    kind, who = run_state(f, status)
    if kind == "running":
        return f"{f}: the run is still running (being written by {who}); pass --allow-running to use the rows written so far"
    return f"{f}: the run was {killed_line(status)}; pass --allow-running to use the rows written so far, or continue it with `fastdyn simulate --resume {f}`"


def resolve_series(runs: list, y: str | None) -> list[str]:
    """The series to use for each run: ``y`` (``--y``), else its model's default series (the
    closed form ``theory/…`` of a file with no simulated loss, said on stderr)."""
    from ..analysis.labels import default_series, is_theory_series

    out = []
    for r in runs:
        try:
            out.append(y or default_series(r))
        except KeyError as e:
            raise UserError(f"--y: {e.args[0]}; name one with --y") from None
        if "time" not in r:
            raise UserError(f"{r.path}: no /time dataset (damaged or not a run output)")
    theory = [
        r.path.name for r, s in zip(runs, out, strict=True) if y is None and is_theory_series(s)
    ]
    if theory:
        names = theory[0] if len(theory) == 1 else f"{len(theory)} files ({theory[0]}, …)"
        click.echo(f"fastdyn: {names}: no simulated loss (theory only): using the closed form "
                   f"{', '.join(sorted(set(s for s in out if is_theory_series(s))))}", err=True)  # fmt: skip
    return out


def _predicted(drop: dict) -> str:
    """`` (theory t = …, ±x %)`` where the model predicts this drop's time."""
    th = drop.get("theory_t")
    if th is None or not th:
        return ""
    return f" (theory {_fmt(th)}, {100 * (drop['t'] / th - 1):+.1f} %)"


def _fmt(v: float | None, spec: str = ".5g") -> str:
    return "n/a" if v is None or not math.isfinite(v) else format(v, spec)


def _describe(d: dict[str, Any], echo) -> None:
    ci = d["ci"] or [None, None]
    echo(f"{d['label']}: {d['y']} vs {d['x']}")
    echo(
        f"  exponent   p = {_fmt(d['exponent'], '.5f')} ± {_fmt(d['stderr'], '.2g')} (stderr)   "
        f"{round(100 * d.get('ci_level', 0.95))}% CI [{_fmt(ci[0], '.5f')}, {_fmt(ci[1], '.5f')}]"
        f"   (L ∝ x^-p)"
    )
    w = d["window"] or [None, None]
    sym = {"time": "t", "model_size": "D", "n_samples": "N", "compute": "C"}.get(d["x"], d["x"])
    why = f": {d['window_reason']}" if d.get("window_reason") else ""
    echo(f"  window     {sym} in [{_fmt(w[0])}, {_fmt(w[1])}] ({d['window_mode']}{why})")
    if d["x"] == "time" and d.get("x_label"):
        echo(f"  time       {d['x_label']}")
    if d.get("cutoff_text"):
        echo(f"  cutoff     {d['cutoff_text']}")
    if d["theory"] is not None:
        echo(f"  theory     p = {_fmt(d['theory'], '.5f')}   ({d['theory_source']})")
        echo(f"  diff       {d['difference']:+.5f} (fit - theory)")
        if d.get("regime_text"):
            echo(f"  regime     {d['regime_text']}")
    elif d.get("theory_note"):
        echo(f"  theory     none: {d['theory_note']}")
    else:
        echo("  theory     none for this model/config")
    if "d_star_exponent" in d:
        dci = d["d_star_ci"] or [None, None]
        line = (
            f"  D*(C)      q = {_fmt(d['d_star_exponent'], '.5f')}   "
            f"CI [{_fmt(dci[0], '.5f')}, {_fmt(dci[1], '.5f')}]   (D* ∝ C^+q)"
        )
        if d["d_star_theory"] is not None:
            line += f"   theory q = {d['d_star_theory']:.5f}, diff {d['d_star_difference']:+.5f}"
        echo(line)


class _NoPowerLaw:
    """A time series in which the automatic window found no power-law range: why, and how the
    series meets the closed form the file carries (if any)."""

    def __init__(self, run: Any, y: str, reason: str) -> None:
        from ..analysis.labels import time_label
        from ..analysis.levels import theory_agreement

        self.run, self.y, self.reason = run, y, reason
        self.agreement = theory_agreement(run, y)
        self.x_label = time_label([run])

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "no power law",
            "label": self.run.path.name,
            "x": "time",
            "y": self.y,
            "reason": self.reason,
            "x_label": self.x_label,
            "agreement": None if self.agreement is None else self.agreement.to_dict(),
            "warnings": [],
        }


def _time_report(run: Any, y: str, win: Any, default_window: bool, **kw: Any) -> Any:
    """One file against time: with the default window, a model's reference levels when it
    declares them (plateaus and drops), else the power-law fit; an automatic window that finds no
    power-law range is reported as such (exit 0), with the agreement with theory."""
    from ..analysis import compare
    from ..analysis.levels import levels_report

    if default_window:
        rep = levels_report(run, y)
        if rep is not None:
            return rep
    try:
        return compare.fit_run(run, "time", y, win, **kw)
    except ValueError as e:
        msg = str(e).splitlines()[0]
        if win == "auto" and msg.startswith(("auto window:", "too few points for an automatic")):
            return _NoPowerLaw(run, y, _hint(msg))
        raise


def _level_text(lv: dict[str, Any], tol: float) -> str:
    """How the curve meets one reference level: its plateau there, else where it crosses it."""
    if lv["span"] is not None:
        off = round(100 * (lv["plateau"] / lv["value"] - 1), 1) + 0.0  # (+ 0.0: no "-0.0")
        return (f"plateau for t in [{_fmt(lv['span'][0])}, {_fmt(lv['span'][1])}] at "
                f"L = {lv['plateau']:.5f} ({off:+.1f} %)")  # fmt: skip
    if lv["crossed"] is not None:
        slope = "" if lv["slope"] is None else f", |dlnL/dlnt| ≥ {lv['slope']:.2g} within {tol:.0%}"
        return f"no plateau: crossed at t = {_fmt(lv['crossed'])}{slope}"
    return f"no plateau: closest |L/ℓ-1| = {lv['closest']:.1e} at t = {_fmt(lv['t_closest'])}"


def _describe_levels(d: dict[str, Any], echo) -> None:
    echo(f"{d['label']}: {d['y']} vs time: plateaus and drops (the model's reference levels; "
         "a power law does not describe them: give --window to fit one anyway)")  # fmt: skip
    on = {lv["name"] for lv in d["levels"]}
    rows = [(lv["value"], lv["name"], _level_text(lv, d["tol"])) for lv in d["levels"]]
    rows += [(p["L"], p["name"], f"plateau for t in [{_fmt(p['span'][0])}, {_fmt(p['span'][1])}]"
              " (no reference level)") for p in d["plateaus"] if p["name"] not in on]  # fmt: skip
    rows.sort(key=lambda r: -r[0])
    w = max(len("level"), *(len(n) for _, n, _ in rows))
    from ..analysis.plateaus import FLAT, MIN_DWELL

    echo(f"  {'level':<{w}s}  {'value':>10s}  the curve there (a plateau: |dlnL/dlnt| ≤ {FLAT:g} "
         f"for ≥ {math.expm1(MIN_DWELL):.0%} of its time)")  # fmt: skip
    for v, n, text in rows:
        echo(f"  {n:<{w}s}  {v:>10.5f}  {text}")
    if d["drops"]:
        echo("  drops      " + "; ".join(f"{x['from']} → {x['to']} at t = {_fmt(x['t'])}" + _predicted(x)
                                         for x in d["drops"]))  # fmt: skip
    elif not d["falling"]:
        n = len(d["plateaus"])
        why = "no plateau" if n == 0 else "one plateau" if n == 1 else "no fall between plateaus"
        echo(f"  drops      none ({why})")
    f = d["falling"]
    if f:
        echo(f"  falling    after {f['from']}: steepest at t = {_fmt(f['t_steepest'])}, still "
             f"falling at the last time (L = {f['L_end']:.5f} at t = {_fmt(f['t_end'])}; no "
             "lower plateau)")  # fmt: skip
    if d.get("theory_note"):
        echo(f"  note       {d['theory_note']}")


def _describe_none(d: dict[str, Any], echo) -> None:
    echo(f"{d['label']}: {d['y']} vs time: no power-law range")
    echo(f"  window     none: {d['reason']}")
    echo(f"  time       {d['x_label']}")
    a = d["agreement"]
    if a is None and d["y"].startswith("theory/"):
        echo("  theory     the series is the closed form itself")
    elif a is None:
        echo("  theory     none in the file for this series")
    else:
        echo(f"  theory     |{a['y']} / {a['theory']} - 1|: max {a['max_rel']:.2e} at t = "
             f"{_fmt(a['t_max'])}, median {a['median_rel']:.2e} ({a['n_points']} points; values "
             f"below {a['floor']:g} of the theory's maximum left out: round-off)")  # fmt: skip


def _hint(msg: str) -> str:
    """An auto window that found no power-law range: say how to choose one."""
    if msg.startswith("auto window:"):
        return msg + "; choose the range with --window LO:HI (or --window all)"
    return msg


def _one(ys: list[str]) -> str:
    if len(set(ys)) > 1:
        raise UserError(f"--y: the files' default series differ ({', '.join(sorted(set(ys)))}); "
                        "name one with --y")  # fmt: skip
    return ys[0]


@click.command("fit")
@click.argument("files", nargs=-1, required=True, metavar="FILE|INDEX...")
@click.option("--x", "x", type=click.Choice(X_CHOICES), default="time", show_default=True,
              help="Resource to fit the loss against.")  # fmt: skip
@click.option("--y", "y", default=None,
              help="Series to fit [default: the model's default series, e.g. loss/test or loss/train].")  # fmt: skip
@click.option("--window", default=None,
              help="auto, all, or LO:HI in x units [default: auto for --x time, else all].")  # fmt: skip
@flag_option("--offset", help="Fit L = A x^-p + L_inf (irreducible offset).")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples for the CI (0: Student-t interval from the stderr).")  # fmt: skip
@click.option("--loss", "loss", type=click.Choice(("l2", "huber")), default="l2", show_default=True,
              help="Fit loss in log space.")  # fmt: skip
@click.option("--at", "at", type=float, default=None,
              help="model_size/n_samples scans: the loss at this time instead of the final loss.")  # fmt: skip
@click.option("--cutoff-fraction", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Auto windows of models with a task law end where s_c(t) reaches this fraction of D [default 0.1].")  # fmt: skip
@click.option("--ci", "ci_level", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.95, show_default=True, help="Confidence level.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@flag_option("--json", "as_json", help="Print JSON instead of text.")
@flag_option("--allow-running", help="Fit files whose run is still running.")
@guarded
def command(files, x, y, window, offset, bootstrap, loss, at, cutoff_fraction, ci_level, seed,
            as_json, allow_running) -> None:  # fmt: skip
    """Fit power laws to FILES (fastdyn HDF5 outputs, globs, or sweep indexes: index.h5 or its
    folder) and compare with theory."""
    from ..analysis import compare

    win = parse_window(window or ("auto" if x == "time" else "all"))
    runs = load_checked(files, allow_running, y)
    ys = resolve_series(runs, y)
    kw = {"bootstrap": bootstrap, "seed": seed, "ci": ci_level}
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            if x == "time":
                cf = compare.DEFAULT_CUTOFF_FRACTION if cutoff_fraction is None else cutoff_fraction
                reps = [
                    _time_report(
                        r,
                        yr,
                        win,
                        window is None,
                        offset=offset,
                        loss=loss,
                        cutoff_fraction=cf,
                        **kw,
                    )  # fmt: skip
                    for r, yr in zip(runs, ys, strict=True)
                ]
            elif x in ("model_size", "n_samples"):
                w = None if win == "all" else win
                reps = [compare.scan(runs, x, _one(ys), at, w, offset=offset, loss=loss, **kw)]
            else:
                if offset or win not in ("auto", "all") or loss != "l2":
                    raise UserError(
                        "--x compute: --offset, --window LO:HI and --loss huber do not apply"
                    )
                reps = [compare.compute_frontier(runs, _one(ys), **kw)]
        except (ValueError, KeyError) as e:
            msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
            raise UserError(_hint(msg.splitlines()[0])) from None
    dicts = [r.to_dict() for r in reps]
    for d in dicts:
        d.setdefault("kind", "power law")
    if as_json:
        click.echo(json.dumps(dicts[0] if len(dicts) == 1 else dicts, indent=2))
    else:
        for d in dicts:
            {"levels": _describe_levels, "no power law": _describe_none}.get(d["kind"], _describe)(
                d, click.echo
            )
    shown = {str(w.message) for w in rec}
    for d in dicts:
        shown.update(d["warnings"])
    for m in sorted(shown):
        click.echo(f"fastdyn: warning: {m}", err=True)
