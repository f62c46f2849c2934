"""Compute-optimal frontier of a grid of runs: L*(C) = min_D L(C/D, D) and its minimiser D*(C).

Run j (model size D_j) is read at t = C / D_j by linear interpolation in (ln t, ln L). Where the
minimiser j over the D grid is interior, the minimum is refined by the vertex of the parabola
through (x, y) = (ln D, ln L) at j - 1, j, j + 1:

    P(x) = y_1 + c_1 (x - x_1) + a_2 (x - x_1)^2,    ln D* = x_1 - c_1 / (2 a_2),   ln L* = P(ln D*)

(taken when a_2 > 0 and ln D* lies in [x_0, x_2]). The interior points are fitted as
L* = A C^-p (``loss_exponent`` p) and D* = A' C^d (``d_star_exponent`` d) by
:func:`~fastdyn.analysis.power_law.fit_power_law`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._common import _f, _floats
from .power_law import PowerLawFit, fit_power_law

__all__ = ["Frontier", "frontier"]


@dataclass(frozen=True, eq=False)
class Frontier:
    """Compute-optimal frontier: L*(C) = min_D L(C/D, D) and its minimiser D*(C).

    ``interior`` marks C where the minimum lies strictly inside the D grid (only those are fitted);
    ``fit_L`` fits L* = A C^-p; ``fit_D`` fits D* = A C^-p' so D* grows as C^(+d_star_exponent).
    """

    C: np.ndarray
    L_star: np.ndarray
    D_star: np.ndarray
    interior: np.ndarray
    fit_L: PowerLawFit | None
    fit_D: PowerLawFit | None

    @property
    def loss_exponent(self) -> float:
        return math.nan if self.fit_L is None else self.fit_L.exponent

    @property
    def d_star_exponent(self) -> float:
        return math.nan if self.fit_D is None else -self.fit_D.exponent

    def to_dict(self) -> dict[str, Any]:
        return {
            "C": _floats(self.C),
            "L_star": _floats(self.L_star),
            "D_star": _floats(self.D_star),
            "interior": [bool(b) for b in self.interior],
            "loss_exponent": _f(self.loss_exponent),
            "d_star_exponent": _f(self.d_star_exponent),
            "fit_L": None if self.fit_L is None else self.fit_L.to_dict(),
            "fit_D": None if self.fit_D is None else self.fit_D.to_dict(),
        }


def frontier(
    t: Any,
    D: Any,
    L: Any,
    n_C: int = 64,
    C: Any = None,
    fit: bool = True,
    bootstrap: int = 0,
    seed: int = 0,
    ci: float = 0.95,
) -> Frontier:
    """Compute-optimal frontier from a grid of runs with model sizes D_j and loss curves L_j(t).

    ``t``: one shared time grid (n_t,) or one per run (a list, or an (n_D, n_t) array); ``L``:
    (n_D, n_t) or a list of per-run curves. For each C on a log grid of ``n_C`` values spanning
    [min_j t_j[0] D_j, max_j t_j[-1] D_j] (or the given ``C``), each run's loss at t = C/D_j is
    interpolated linearly in (ln t, ln L) (NaN outside the run's t range); L*(C) = min_j, and
    where the minimiser is interior the minimum is refined by the vertex of the parabola through
    (ln D, ln L) at the minimiser and its two neighbours. Fits use :func:`fit_power_law` on the
    interior points.
    """
    D = np.asarray(D, dtype=float)
    if D.ndim != 1 or D.size < 3:
        raise ValueError(f"D must be 1-d with at least 3 model sizes, got shape {D.shape}")
    if not np.all(np.isfinite(D)) or np.any(D <= 0):
        raise ValueError("D must be finite and > 0")
    if isinstance(L, np.ndarray) and L.ndim == 2:
        Ls = list(L)
    else:
        Ls = [np.asarray(q, dtype=float) for q in L]
    if len(Ls) != D.size:
        raise ValueError(f"L must hold one curve per model size: {len(Ls)} curves, {D.size} sizes")
    try:
        t_arr = np.asarray(t, dtype=float)
    except ValueError:  # ragged: one grid per run
        t_arr = None
    if t_arr is not None and t_arr.ndim == 1:
        ts = [t_arr] * D.size
    elif t_arr is not None and t_arr.ndim == 2:
        ts = list(t_arr)
    else:
        ts = [np.asarray(q, dtype=float) for q in t]
    if len(ts) != D.size:
        raise ValueError(f"t must be shared or one grid per run: got {len(ts)} grids")
    lts, lLs = [], []
    for j, (tj, Lj) in enumerate(zip(ts, Ls, strict=True)):
        Lj = np.asarray(Lj, dtype=float)
        if tj.shape != Lj.shape or tj.size < 2:
            raise ValueError(f"run {j}: t and L must have the same length >= 2")
        ok = (tj > 0) & (Lj > 0) & np.isfinite(tj) & np.isfinite(Lj)
        if ok.sum() < 2:
            raise ValueError(f"run {j}: needs at least 2 points with t > 0 and L > 0")
        o = np.argsort(tj[ok])
        lts.append(np.log(tj[ok][o]))
        lLs.append(np.log(Lj[ok][o]))
    order = np.argsort(D)
    D = D[order]
    lts = [lts[i] for i in order]
    lLs = [lLs[i] for i in order]
    lD = np.log(D)
    if C is None:
        if n_C < 2:
            raise ValueError(f"n_C must be >= 2, got n_C={n_C}")
        lo = min(lt[0] + d for lt, d in zip(lts, lD, strict=True))
        hi = max(lt[-1] + d for lt, d in zip(lts, lD, strict=True))
        lC = np.linspace(lo, hi, n_C)
    else:
        Carr = np.asarray(C, dtype=float)
        if Carr.ndim != 1 or np.any(Carr <= 0):
            raise ValueError("C must be a 1-d array of positive values")
        lC = np.log(Carr)
    grid = np.full((D.size, lC.size), np.nan)
    for j in range(D.size):
        lt = lC - lD[j]
        inside = (lt >= lts[j][0]) & (lt <= lts[j][-1])
        grid[j, inside] = np.interp(lt[inside], lts[j], lLs[j])
    Ls_star = np.full(lC.size, np.nan)
    Ds_star = np.full(lC.size, np.nan)
    interior = np.zeros(lC.size, bool)
    for k in range(lC.size):
        col = grid[:, k]
        if not np.isfinite(col).any():
            continue
        j = int(np.nanargmin(col))
        Ls_star[k], Ds_star[k] = col[j], lD[j]
        if 0 < j < D.size - 1 and np.isfinite(col[j - 1]) and np.isfinite(col[j + 1]):
            x0, x1, x2 = lD[j - 1 : j + 2]
            y0, y1, y2 = col[j - 1 : j + 2]
            # vertex of the parabola through three points
            d0, d2 = (y0 - y1) / (x0 - x1), (y2 - y1) / (x2 - x1)
            a2 = (d2 - d0) / (x2 - x0)
            if a2 > 0:
                # P(x) = y1 + c1 (x - x1) + a2 (x - x1)^2 through the three points
                c1 = (d0 * (x2 - x1) + d2 * (x1 - x0)) / (x2 - x0)
                xs = x1 - c1 / (2 * a2)
                if x0 <= xs <= x2:
                    Ls_star[k] = y1 + c1 * (xs - x1) + a2 * (xs - x1) ** 2
                    Ds_star[k] = xs
                    interior[k] = True
    Cv, Lv, Dv = np.exp(lC), np.exp(Ls_star), np.exp(Ds_star)
    fL = fD = None
    if fit:
        if interior.sum() < 3:
            raise ValueError(
                "frontier: fewer than 3 compute values with an interior optimum; widen the D grid"
            )
        fL = fit_power_law(Cv[interior], Lv[interior], bootstrap=bootstrap, seed=seed, ci=ci)
        fD = fit_power_law(Cv[interior], Dv[interior], bootstrap=bootstrap, seed=seed, ci=ci)
    return Frontier(Cv, Lv, Dv, interior, fL, fD)
