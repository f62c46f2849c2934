"""What ``fastdyn fit`` reports for a loss curve that is not a power law in time.

- :func:`levels_report`: the plateaus the curve dwells on and the drops between them
  (:func:`fastdyn.analysis.plateaus.find_shape`: a plateau is where |d ln L/d ln t| stays ≤ 0.05
  for at least 5 % of its time; a drop is the fall between two plateaus, at its midpoint crossing
  L = √(L_a L_b)), set against the reference levels the model declares
  (``ModelEntry.analysis.loss_levels``: datasets of the file such as the saddle losses L(M_m), the
  global minimum L* and a finite train set's own minimum). A plateau within ``tol`` of a level
  is named by it; a level the curve only crosses is reported as crossed, with no plateau. Where
  the model predicts a drop's time (paper Eq. 21), it is set beside the measured drop from one
  level to the next, with the file's note on where that prediction does not apply.
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
from .plateaus import find_shape, local_slope

__all__ = [
    "FLOOR",
    "LEVEL_TOL",
    "Agreement",
    "Level",
    "LevelsReport",
    "levels_report",
    "theory_agreement",
]

#: a plateau within this relative distance |L_plateau/ℓ − 1| of a reference level ℓ is on it
#: (the plateaus of the shipped saddle-to-saddle figures are met to 2e-4..4e-3 of their values at
#: P = 80 000; Fig. 1 at P = 5000 settles 1.1 % above its train set's minimum by the last save)
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
    span: tuple[float, float] | None  # the plateau on this level (None: the curve has none there)
    plateau: float = math.nan  # that plateau's loss
    crossed: float = math.nan  # no plateau: where L first falls to ℓ (NaN: it never does)
    slope: float = math.nan  # no plateau: the smallest |d ln L/d ln t| within tol of ℓ

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": _f(self.value), "closest": _f(self.closest),
                "t_closest": _f(self.t_closest), "span": _pair(self.span),
                "plateau": _f(self.plateau), "crossed": _f(self.crossed),
                "slope": _f(self.slope)}  # fmt: skip


@dataclass(frozen=True)
class LevelsReport:
    """A series against its model's reference levels: the plateaus it dwells on, the drops
    between them and, where it ends still falling, that fall."""

    label: str
    y_name: str
    tol: float
    levels: tuple[Level, ...]
    #: (from, to, t at the midpoint crossing, predicted t or NaN, L_from, L_to)
    drops: tuple[tuple[str, str, float, float, float, float], ...]
    #: (name, L, t0, t1): the plateaus in time order, named by their level (else by position)
    plateaus: tuple[tuple[str, float, float, float], ...] = field(default=())
    #: after the last plateau the curve ends lower without settling: (from, L_from, t of the
    #: steepest fall, its |d ln L/d ln t|, last t, last L)
    falling: tuple[str, float, float, float, float, float] | None = None
    warnings: tuple[str, ...] = field(default=())
    #: the file's note on where the predicted drop times do not apply ("" if none)
    theory_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        fall = self.falling
        return {
            "kind": "levels",
            "label": self.label,
            "x": "time",
            "y": self.y_name,
            "tol": self.tol,
            "levels": [lv.to_dict() for lv in self.levels],
            "plateaus": [
                {"name": n, "L": _f(v), "span": _pair((a, b))} for n, v, a, b in self.plateaus
            ],
            "drops": [
                {
                    "from": a,
                    "to": b,
                    "t": _f(t),
                    "theory_t": _f(th),
                    "L_from": _f(la),
                    "L_to": _f(lb),
                }
                for a, b, t, th, la, lb in self.drops
            ],  # fmt: skip
            "falling": None
            if fall is None
            else {
                "from": fall[0],
                "L_from": _f(fall[1]),
                "t_steepest": _f(fall[2]),
                "slope": _f(fall[3]),
                "t_end": _f(fall[4]),
                "L_end": _f(fall[5]),
            },  # fmt: skip
            "theory_note": self.theory_note,
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


def _match(plateau_L: list[float], named: list[tuple[str, float, int | None]], tol: float):
    """{plateau index: level index}: each plateau on the nearest level within ``tol`` (relative),
    each level taking its nearest such plateau only."""
    best: dict[int, tuple[float, int]] = {}
    for p, v in enumerate(plateau_L):
        dist = [abs(math.log(v / lv)) for _, lv, _ in named]
        k = int(np.argmin(dist))
        if dist[k] <= math.log1p(tol) and (k not in best or dist[k] < best[k][0]):
            best[k] = (dist[k], p)
    return {p: k for k, (_, p) in best.items()}


def _theory_note(run: Run) -> str:
    """The file's root note on the predicted drop times (``theory/eq21: …``), or ""."""
    note = str(run.attrs.get("note", "") or "")
    return note if note.startswith("theory/eq21") else ""


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
    shape = find_shape(t, L)
    on = _match([p.L for p in shape.plateaus], named, tol)
    pos = (t > 0) & (L > 0)
    g = local_slope(np.log(t[pos]), np.log(L[pos])) if pos.sum() >= 2 else np.array([])
    levels = []
    for k, (name, v, _m) in enumerate(named):
        dev = np.abs(L / v - 1.0)
        i = int(np.argmin(dev))
        mine = [p for p, kk in on.items() if kk == k]
        if mine:
            p = shape.plateaus[mine[0]]
            levels.append(Level(name, v, float(dev[i]), float(t[i]), (p.t0, p.t1), p.L))
            continue
        below = np.flatnonzero(L <= v)
        crossed = float(t[below[0]]) if below.size and below[0] > 0 else math.nan
        near = dev[pos] <= tol
        slope = float(g[near].min()) if g.size and near.any() else math.nan
        levels.append(Level(name, v, float(dev[i]), float(t[i]), None, math.nan, crossed, slope))
    names = [
        named[on[p]][0] if p in on else ("initial plateau" if p == 0 else f"plateau {q.L:.4g}")
        for p, q in enumerate(shape.plateaus)
    ]
    predicted = predicted_drops(run)
    drops = []
    for d in shape.drops:
        ma = named[on[d.upper]][2] if d.upper in on else None
        mb = named[on[d.lower]][2] if d.lower in on else None
        # the drop from level m − 1 onto level m: the m-th predicted drop time (1-based)
        ok = predicted is not None and ma is not None and mb == ma + 1 and mb <= predicted.size
        th = float(predicted[mb - 1]) if ok else math.nan  # type: ignore[index,operator]
        a, b = shape.plateaus[d.upper], shape.plateaus[d.lower]
        drops.append((names[d.upper], names[d.lower], d.t, th, a.L, b.L))
    fall = shape.falling
    falling = None
    if fall is not None:
        top = shape.plateaus[fall.upper]
        falling = (names[fall.upper], top.L, fall.t_steep, fall.slope, fall.t_end, fall.L_end)
    notes = []
    missed = [lv.name for lv in levels if lv.span is None and float(np.min(L)) > lv.value]
    if missed:
        notes.append(f"{y} stays above {', '.join(missed)} in the recorded times")
    note = _theory_note(run) if any(math.isfinite(x[3]) for x in drops) else ""
    plateaus = tuple((n, p.L, p.t0, p.t1) for n, p in zip(names, shape.plateaus, strict=True))
    return LevelsReport(run.path.name, y, tol, tuple(levels), tuple(drops), plateaus, falling,
                        tuple(notes), note)  # fmt: skip


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
