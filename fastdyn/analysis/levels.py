"""What ``fastdyn fit`` reports for a loss curve that is not a power law in time.

- :func:`levels_report`: a model whose losses go from plateau to plateau declares its reference
  levels (``ModelEntry.loss_levels``: datasets of the file such as the plateau losses L(M_m) and
  the global minimum L*). For each level: how close the series comes (min |L/ℓ − 1| and when),
  the time span it stays within ``tol`` of it (the plateau), and the drop times between
  successive plateaus (where L first falls below the midpoint of two visited levels).
- :func:`theory_agreement`: the relative deviation of a series from the closed form the file
  carries beside it (``theory/<series>``), over the points above the float64 round-off floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..h5.reader import Run
from ._common import _f, _pair
from .labels import level_label, loss_levels, predicted_drops

__all__ = [
    "FLOOR",
    "LEVEL_TOL",
    "Agreement",
    "Level",
    "LevelsReport",
    "levels_report",
    "theory_agreement",
]

#: a series counts as on a level while |L/ℓ − 1| ≤ this (the plateaus of the shipped
#: saddle-to-saddle figures are met to 2e-4..4e-4 of their values at P = 80 000)
LEVEL_TOL = 0.02
#: theory values below this fraction of their maximum are left out of the agreement: a run's loss
#: flattens at its round-off (≈ 1e-16 of the initial loss, squared errors: ≈ 1e-18..1e-21 seen)
#: while the closed form goes on down
FLOOR = 1e-13


@dataclass(frozen=True)
class Level:
    """One reference level ℓ and how the series meets it (times in the file's units)."""

    name: str
    value: float
    closest: float  # min over t of |L(t)/ℓ − 1|
    t_closest: float
    span: tuple[float, float] | None  # first and last t with |L/ℓ − 1| ≤ tol (None: never)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": _f(self.value), "closest": _f(self.closest),
                "t_closest": _f(self.t_closest),
                "span": _pair(self.span)}  # fmt: skip


@dataclass(frozen=True)
class LevelsReport:
    """A series against its model's reference levels: plateaus visited and the drops between."""

    label: str
    y_name: str
    tol: float
    levels: tuple[Level, ...]
    drops: tuple[tuple[str, str, float, float], ...]  # (from, to, t, predicted t or NaN)
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "levels",
            "label": self.label,
            "x": "time",
            "y": self.y_name,
            "tol": self.tol,
            "levels": [lv.to_dict() for lv in self.levels],
            "drops": [
                {"from": a, "to": b, "t": _f(t), "theory_t": _f(th)} for a, b, t, th in self.drops
            ],
            "warnings": list(self.warnings),
        }


def _named_levels(run: Run) -> list[tuple[str, float, int | None]]:
    """(name, ℓ, m) of every finite positive level, in the order declared (m: its index in the
    first level dataset, else None); a value repeated (a last plateau that is the global minimum)
    keeps its first name and gains the second. A single level described in the file is named by
    its ``long_name``."""
    out: list[list] = []
    for j, (ds, vals) in enumerate(loss_levels(run)):
        base = ds.rsplit("/", 1)[-1]
        described = level_label(run, ds)
        if described and vals.size == 1:
            base = described
        for m, v in enumerate(vals):
            if not (math.isfinite(v) and v > 0):
                continue
            name = f"{base}[{m}]" if vals.size > 1 else base
            same = next((o for o in out if abs(o[1] - v) <= 1e-9 * v), None)
            if same is not None:
                same[0] += f" = {name}"
            else:
                out.append([name, float(v), m if j == 0 else None])
    return [(n, v, m) for n, v, m in out]


def levels_report(run: Run, y: str, tol: float = LEVEL_TOL) -> LevelsReport | None:
    """``y`` of ``run`` against its model's levels; None when the file has none of them."""
    named = _named_levels(run)
    if not named:
        return None
    t = np.asarray(run.time, float)
    L = np.asarray(run[y], float)
    ok = np.isfinite(t) & np.isfinite(L)
    t, L = t[ok], L[ok]
    if t.size == 0:
        raise ValueError(f"{run.path}: {y} has no finite values")
    levels, index = [], {}
    for name, v, m in named:
        index[name] = m
        dev = np.abs(L / v - 1.0)
        k = int(np.argmin(dev))
        on = np.nonzero(dev <= tol)[0]
        span = (float(t[on[0]]), float(t[on[-1]])) if on.size else None
        levels.append(Level(name, v, float(dev[k]), float(t[k]), span))
    visited = sorted((lv for lv in levels if lv.span is not None), key=lambda lv: lv.span[0])  # type: ignore[index]
    predicted = predicted_drops(run)
    drops = []
    for a, b in zip(visited, visited[1:], strict=False):
        mid = 0.5 * (a.value + b.value)
        after = np.nonzero((t > a.span[1]) & (L <= mid))[0] if a.value > b.value else []  # type: ignore[index]
        if len(after):
            m = index[b.name]  # the drop onto level m: the m-th predicted drop time (1-based)
            ok = predicted is not None and m is not None and 1 <= m <= predicted.size
            th = float(predicted[m - 1]) if ok else math.nan  # type: ignore[index]
            drops.append((a.name, b.name, float(t[after[0]]), th))
    notes = []
    missed = [lv.name for lv in levels if lv.span is None]
    if missed:
        notes.append(
            f"{y} never comes within {tol:.0%} of {', '.join(missed)} in the recorded times"
        )
    return LevelsReport(run.path.name, y, tol, tuple(levels), tuple(drops), tuple(notes))


@dataclass(frozen=True)
class Agreement:
    """max and median |y/theory − 1| over the points where theory ≥ FLOOR · max(theory)."""

    y_name: str
    theory_name: str
    max_rel: float
    t_max: float
    median_rel: float
    n_points: int

    def to_dict(self) -> dict[str, Any]:
        return {"y": self.y_name, "theory": self.theory_name, "max_rel": _f(self.max_rel),
                "t_max": _f(self.t_max), "median_rel": _f(self.median_rel),
                "n_points": self.n_points, "floor": FLOOR}  # fmt: skip


def theory_agreement(run: Run, y: str) -> Agreement | None:
    """``y`` against ``theory/<y>`` in the same file (None when it has no such series)."""
    th_name = f"theory/{y}"
    if y.startswith("theory/") or th_name not in run:
        return None
    t = np.asarray(run.time, float)
    a, b = np.asarray(run[y], float), np.asarray(run[th_name], float)
    n = min(a.size, b.size, t.size)
    t, a, b = t[:n], a[:n], b[:n]
    ok = np.isfinite(a) & np.isfinite(b) & (b > 0)
    if not ok.any():
        return None
    ok &= b >= FLOOR * np.max(b[ok])
    rel = np.abs(a[ok] / b[ok] - 1.0)
    k = int(np.argmax(rel))
    return Agreement(
        y, th_name, float(rel[k]), float(t[ok][k]), float(np.median(rel)), int(ok.sum())
    )
