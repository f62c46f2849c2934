"""Plateaus a loss curve dwells on and the drops between them, from the curve alone.

On u = ln t, y = ln L (points with t > 0 and L finite and > 0):

- *local slope* g(t_i) = |dy/du|: the least-squares slope of y on u over the points with
  |u − u_i| ≤ :data:`HALF_WINDOW` (at least t_{i−1}, t_i, t_{i+1}), so one sample's noise does not
  decide it;
- *plateau*: a maximal run of consecutive samples with g ≤ :data:`FLAT` that lasts at least
  :data:`MIN_DWELL` in ln t (the curve stays there: a level it only crosses on a slope, e.g.
  g ≈ 0.3, is no plateau). Its level is L at its slowest sample (the start of the run for the
  initial plateau, the end for a curve that has settled). Neighbouring plateaus less than
  :data:`MIN_FALL` apart (|ln(L_a/L_b)| < ln(1 + MIN_FALL)) are one plateau;
- *drop*: the fall from one plateau to the next lower one, placed at its midpoint crossing: the
  first t after the upper plateau ends where ln L = (ln L_a + ln L_b)/2 (L = √(L_a L_b)),
  interpolated linearly in (ln t, ln L) between the two samples around it;
- *still falling*: after the last plateau the curve ends more than MIN_FALL below it without
  settling (no second plateau, so no midpoint): its steepest point (largest g) is reported.

Times in the file's units; losses dimensionless. Scale-free in t and L: multiplying either by a
constant changes no plateau and scales every time by the same factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "FLAT",
    "HALF_WINDOW",
    "MIN_DWELL",
    "MIN_FALL",
    "Drop",
    "Falling",
    "Plateau",
    "Shape",
    "find_shape",
    "local_slope",
]

#: |d ln L/d ln t| at or below this: the curve is flat there (the saddles of the shipped
#: figures are held at 1e-4..2e-2, their drops reach 2..15, a slow approach to a minimum 0.1..0.5)
FLAT = 0.05
#: half-width in ln t of the slope's least-squares window (±2.5 % in t)
HALF_WINDOW = 0.025
#: a plateau lasts at least this in ln t (5 % of its time; the shortest saddle of the shipped
#: Fig. 4 run at P = 80 000, L(M_2) from t/τ = 186 to 213, lasts 0.13)
MIN_DWELL = 0.05
#: plateaus closer than this relative gap are one plateau; a fall smaller than this is no drop
MIN_FALL = 0.02


@dataclass(frozen=True)
class Plateau:
    """Where the curve stays: from ``t0`` to ``t1``, at level ``L`` (at ``t_level``, its slowest
    sample, where |d ln L/d ln t| = ``slope``)."""

    t0: float
    t1: float
    L: float
    t_level: float
    slope: float


@dataclass(frozen=True)
class Drop:
    """A fall from plateau ``upper`` to plateau ``lower`` (indices into ``Shape.plateaus``) at its
    midpoint crossing ``t`` (L(t) = √(L_upper L_lower))."""

    upper: int
    lower: int
    t: float


@dataclass(frozen=True)
class Falling:
    """After plateau ``upper`` the curve falls to ``L_end`` at the last time ``t_end`` without
    settling; steepest at ``t_steep`` (|d ln L/d ln t| = ``slope``)."""

    upper: int
    t_steep: float
    slope: float
    t_end: float
    L_end: float


@dataclass(frozen=True)
class Shape:
    plateaus: tuple[Plateau, ...]
    drops: tuple[Drop, ...]
    falling: Falling | None


def local_slope(u: np.ndarray, y: np.ndarray, half_window: float = HALF_WINDOW) -> np.ndarray:
    """|dy/du| at each u_i: least-squares slope over |u − u_i| ≤ half_window, widened to at least
    the neighbours i − 1, i + 1 (``u`` strictly increasing, at least 2 points)."""
    n = u.size
    u = u - u.mean()  # centred: the window sums below do not cancel
    a = np.minimum(np.searchsorted(u, u - half_window, "left"), np.maximum(np.arange(n) - 1, 0))
    b = np.maximum(np.searchsorted(u, u + half_window, "right"), np.minimum(np.arange(n) + 2, n))
    c = [np.concatenate([[0.0], np.cumsum(v)]) for v in (np.ones(n), u, y, u * u, u * y)]
    s1, su, sy, suu, suy = (ck[b] - ck[a] for ck in c)
    # centred in each window too: Σ(u − ū)² and Σ(u − ū)(y − ȳ)
    var = suu - su * su / s1
    cov = suy - su * sy / s1
    return np.abs(cov / var)


def _runs(flat: np.ndarray) -> list[tuple[int, int]]:
    """[(i, j)]: maximal runs of True, inclusive."""
    edges = np.diff(np.concatenate([[0], flat.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def _crossing(u: np.ndarray, y: np.ndarray, i0: int, i1: int, level: float) -> float:
    """First u in samples i0..i1 where y falls to ``level``, interpolated (NaN: never)."""
    below = np.flatnonzero(y[i0 : i1 + 1] <= level)
    if below.size == 0:
        return math.nan
    k = i0 + int(below[0])
    if k == i0 or y[k] == level:
        return float(u[k])
    f = (y[k - 1] - level) / (y[k - 1] - y[k])
    return float(u[k - 1] + f * (u[k] - u[k - 1]))


def find_shape(
    t: np.ndarray,
    L: np.ndarray,
    *,
    flat: float = FLAT,
    min_dwell: float = MIN_DWELL,
    min_fall: float = MIN_FALL,
    half_window: float = HALF_WINDOW,
) -> Shape:
    """Plateaus, drops and an unsettled last fall of the curve L(t) (module docstring).

    ``t`` increasing; points with t ≤ 0 or L not finite and > 0 are left out. Fewer than 3 points
    left: no plateau."""
    t, L = np.asarray(t, np.float64), np.asarray(L, np.float64)
    ok = (t > 0) & np.isfinite(t) & np.isfinite(L) & (L > 0)
    t, L = t[ok], L[ok]
    if t.size < 3:
        return Shape((), (), None)
    u, y = np.log(t), np.log(L)
    g = local_slope(u, y, half_window)
    runs = [(i, j) for i, j in _runs(g <= flat) if u[j] - u[i] >= min_dwell]
    gap = math.log1p(min_fall)
    merged: list[list[int]] = []  # [i, j, slowest sample]
    for i, j in runs:
        k = i + int(np.argmin(g[i : j + 1]))
        if merged and abs(y[merged[-1][2]] - y[k]) < gap:
            last = merged[-1]
            last[1] = j
            last[2] = last[2] if g[last[2]] <= g[k] else k
        else:
            merged.append([i, j, k])
    plateaus = tuple(
        Plateau(float(t[i]), float(t[j]), float(L[k]), float(t[k]), float(g[k]))
        for i, j, k in merged
    )
    drops = []
    for p in range(len(merged) - 1):
        (_, j, ka), (i, _, kb) = merged[p], merged[p + 1]
        if y[ka] - y[kb] >= gap:
            uc = _crossing(u, y, j, i, 0.5 * (y[ka] + y[kb]))
            if math.isfinite(uc):
                drops.append(Drop(p, p + 1, math.exp(uc)))
    falling = None
    if merged and y[merged[-1][2]] - y[-1] >= gap and merged[-1][1] < t.size - 1:
        j = merged[-1][1]
        s = j + int(np.argmax(g[j:]))
        falling = Falling(len(merged) - 1, float(t[s]), float(g[s]), float(t[-1]), float(L[-1]))
    return Shape(plateaus, tuple(drops), falling)
