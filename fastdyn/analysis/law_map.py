"""⑥ The validation map of a sweep: each point's fitted time exponent against the law its own
config predicts.

For every point of a sweep index: the power-law fit L ∝ t^-p of its default series (the
simulation, else the closed form) with the automatic window and bootstrap CI of ``fastdyn fit``
(:func:`fastdyn.analysis.compare.fit_run`); the law p_law its config predicts over that window
(:func:`fastdyn.analysis.predicted_law.predicted_time_law`); the difference d = p − p_law and
z = d / h in units of the CI half-width h = (CI_hi − CI_lo)/2. The law *holds* at the point when
|z| ≤ threshold (threshold 1: the law lies inside the fit's CI), else it *breaks*.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..h5.reader import FileFormatError, Run, load
from .predicted_law import REGIME_LABELS, PredictedLaw, no_law, predicted_time_law

__all__ = ["MapError", "MapRow", "LawMap", "find_index", "validate", "DEFAULT_THRESHOLD"]

#: |z| ≤ this: the law holds (1: the law lies inside the fit's confidence interval)
DEFAULT_THRESHOLD = 1.0
_PARAM = "param:"


class MapError(ValueError):
    """A sweep that cannot be mapped (no point with a scaling law, a point not finished)."""


@dataclass(frozen=True)
class MapRow:
    """One sweep point: its grid values, the fit, the law and the verdict."""

    name: str
    params: dict[str, Any]
    path: str
    series: str
    exponent: float | None
    ci: tuple[float, float] | None
    window: tuple[float, float] | None
    law: PredictedLaw
    threshold: float
    note: str = ""

    @property
    def difference(self) -> float | None:
        """p_fit − p_law (None without a fit or a law)."""
        if self.exponent is None or self.law.exponent is None:
            return None
        return self.exponent - self.law.exponent

    @property
    def ci_half(self) -> float | None:
        return None if self.ci is None else 0.5 * (self.ci[1] - self.ci[0])

    @property
    def z(self) -> float | None:
        """The difference in units of the CI half-width."""
        d, h = self.difference, self.ci_half
        if d is None or h is None:
            return None
        if h > 0:
            return d / h
        return 0.0 if d == 0 else math.copysign(math.inf, d)

    @property
    def verdict(self) -> str:
        if self.exponent is None:
            return "no fit"
        if self.z is None:
            return "no law"
        return "holds" if abs(self.z) <= self.threshold else "breaks"


@dataclass
class LawMap:
    """The rows of a sweep, its index, its grid axes (parameters with more than one value)."""

    index: Path
    rows: list[MapRow]
    keys: list[str]
    threshold: float
    ci_level: float
    warnings: list[str] = field(default_factory=list)

    @property
    def axes(self) -> list[str]:
        return varying_axes(self.keys, [r.params for r in self.rows])

    def csv_rows(self) -> list[dict[str, Any]]:
        """One dict per point: grid values, fit, law, difference, CI, regime, verdict."""
        out = []
        for r in self.rows:
            d: dict[str, Any] = {"point": r.name}
            d.update({k: r.params[k] for k in self.keys})
            ci = r.ci or (None, None)
            w = r.window or (None, None)
            tasks = r.law.tasks or (None, None)
            d.update({
                "series": r.series, "fit_p": r.exponent, "ci_lo": ci[0], "ci_hi": ci[1],
                "ci_half": r.ci_half, "law_p": r.law.exponent, "difference": r.difference,
                "diff_over_ci": r.z, "threshold": self.threshold, "verdict": r.verdict,
                "law_kind": r.law.kind, "regime": r.law.regime, "window_t_lo": w[0],
                "window_t_hi": w[1], "tasks_lo": tasks[0], "tasks_hi": tasks[1],
                "law_text": r.law.text, "note": r.note, "path": r.path,
            })  # fmt: skip
            out.append(d)
        return out

    def write_csv(self, path: str | Path) -> Path:
        p = Path(path)
        rows = self.csv_rows()
        with open(p, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            for row in rows:
                w.writerow({k: _cell(v) for k, v in row.items()})
        return p


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return v


def _key(v: Any) -> Any:
    return repr(v)


def varying_axes(keys: Sequence[str], params: Sequence[dict[str, Any]]) -> list[str]:
    """The grid parameters that take more than one value."""
    return [k for k in keys if len({_key(p[k]) for p in params}) > 1]


def check_figure_axes(keys: Sequence[str], params: Sequence[dict[str, Any]]) -> list[str]:
    """The figure's axes: one or two varying parameters, one point per cell (ValueError else)."""
    axes = varying_axes(keys, params)
    if len(axes) not in (1, 2):
        raise ValueError(f"-o: the figure needs one or two grid axes that vary, the sweep has "
                         f"{len(axes)} ({', '.join(axes) or 'none'})")  # fmt: skip
    cells = [tuple(_key(p[k]) for k in axes) for p in params]
    if len(set(cells)) < len(cells):
        raise ValueError(f"-o: several points share a cell of {' × '.join(axes)} (zipped axes or "
                         "seeds); the figure needs one point per cell")  # fmt: skip
    return axes


def find_index(path: str | Path) -> Path:
    """The index file of a sweep output folder (``DIR/index.h5``) or the index itself
    (FileFormatError, one line, for anything else)."""
    p = Path(path)
    idx = p / "index.h5" if p.is_dir() else p
    if p.is_dir() and not idx.is_file():
        raise FileFormatError(f"{p}: not a sweep output folder (no index.h5 in it)")
    if not idx.exists():
        raise FileFormatError(f"{p}: no such sweep folder or index")
    return idx


def default_series(run: Run) -> str:
    """The simulation's default series, else the closed form's (``theory/`` of the same)."""
    from .labels import default_series as simulated

    try:
        return simulated(run)
    except KeyError:
        for s in ("theory/loss/test", "theory/loss/train"):
            if s in run:
                return s
        raise


def validate(
    path: str | Path,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    ci: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
    cutoff_fraction: float | None = None,
    figure: bool = False,
) -> LawMap:
    """Fit and compare every point of the sweep at ``path`` (its folder or index); ``figure``:
    check first that the grid can be drawn (:func:`check_figure_axes`)."""
    from ..h5.sweep_index import COMPLETE, read
    from ..models.registry import get_model

    index = find_index(path)
    table = read(index)
    names, status = table["name"], table["status"]
    if not names:
        raise MapError(f"{index}: the sweep has no points")
    for n, st in zip(names, status, strict=True):
        if st != COMPLETE:
            raise MapError(f"point {n} is {st!r}, not complete: finish the sweep first "
                           "(fastdyn sweep SWEEP --resume) or map another")  # fmt: skip
    keys = [c[len(_PARAM) :] for c in table if c.startswith(_PARAM)]
    params = [{k: table[_PARAM + k][i] for k in keys} for i in range(len(names))]
    if figure:
        check_figure_axes(keys, params)
    runs = [load(index.parent / rel) for rel in table["path"]]
    models = sorted({r.model for r in runs})
    with_laws = []
    for m in models:
        try:
            with_laws.append(get_model(m).analysis.scaling is not None)
        except KeyError:
            with_laws.append(False)
    if not any(with_laws):
        raise MapError(f"{index}: no point has a scaling law to validate (model "
                       f"{', '.join(map(repr, models))} declares none)")  # fmt: skip
    from . import compare

    cf = compare.DEFAULT_CUTOFF_FRACTION if cutoff_fraction is None else cutoff_fraction
    rows, notes = [], []
    for n, p, run in zip(names, params, runs, strict=True):
        rows.append(_row(n, p, run, threshold, ci, bootstrap, seed, cf, notes))
    return LawMap(index, rows, keys, threshold, ci, notes)


def _row(name: str, params: dict, run: Run, threshold: float, ci: float, bootstrap: int,
         seed: int, cutoff_fraction: float, notes: list[str]) -> MapRow:  # fmt: skip
    from . import compare

    y = default_series(run)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            rep = compare.fit_run(run, "time", y, "auto", bootstrap=bootstrap, seed=seed, ci=ci,
                                  cutoff_fraction=cutoff_fraction)  # fmt: skip
        except ValueError as e:
            law = no_law("no fit window")
            note = str(e).splitlines()[0]
            return MapRow(name, params, str(run.path), y, None, None, None, law, threshold, note)
    notes.extend(f"{name}: {w.message}" for w in rec if "cutoff" not in str(w.message))
    f = rep.fit
    lo, hi = f.ci if f.ci is not None else (math.nan, math.nan)
    window = (float(f.window[0]), float(f.window[1]))
    law = predicted_time_law(run, window)
    return MapRow(name, params, str(run.path), y, float(f.exponent), (float(lo), float(hi)),
                  window, law, threshold)  # fmt: skip


def format_value(v: Any) -> str:
    """A grid value for the table and the figure (``1e+06`` → ``1e6``)."""
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e6:
            return str(int(v))
        return f"{v:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")
    return str(v)


def regime_label(regime: str) -> str:
    return REGIME_LABELS.get(regime, regime)


def table_lines(m: LawMap, keys: Sequence[str] | None = None) -> list[str]:
    """The printed table: grid values, fit, law, difference, CI, z, regime, verdict."""
    keys = list(m.keys if keys is None else keys)
    head = [*keys, "fit p", "law p", "diff", f"{round(100 * m.ci_level)}% CI", "diff/CI",
            "regime", "verdict"]  # fmt: skip
    cells = []
    for r in m.rows:
        ci = "n/a" if r.ci is None else f"[{r.ci[0]:.4f}, {r.ci[1]:.4f}]"
        z = r.z
        cells.append([
            *(format_value(r.params[k]) for k in keys),
            _num(r.exponent, ".4f"), _num(r.law.exponent, ".4f"), _num(r.difference, "+.4f"), ci,
            _num(z, "+.2f"), regime_label(r.law.regime) if r.law.exponent is not None else "—",
            r.verdict,
        ])  # fmt: skip
    width = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(head)]
    right = {*range(len(keys) + 3), len(keys) + 4}  # numbers right-aligned, words left

    def line(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if j in right else c.ljust(w)
                         for j, (c, w) in enumerate(zip(row, width, strict=True))).rstrip()  # fmt: skip

    return [line(head), *(line(c) for c in cells)]


def _num(v: float | None, spec: str) -> str:
    return "n/a" if v is None or not math.isfinite(v) else format(v, spec)
