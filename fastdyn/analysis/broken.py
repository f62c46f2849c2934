"""Broken power laws, continuous in log space, and the choice of the number of breaks by BIC.

With u = ln x, v = ln y and m = 1 or 2 knots k_j = ln x_j:

    v = c + s_0 u + sum_j d_j max(u - k_j, 0),     p_j = -(s_0 + d_1 + ... + d_j)

For fixed knots (c, s_0, d) is a weighted linear least-squares fit on the hinge design
[1, u, max(u - k_j, 0)]; the knots minimise that profile RSS(k) (one break: 96-point grid and a
bounded Brent refinement; two: 24 x 24 grid and Nelder-Mead; knots between the min_points-th
smallest and largest distinct u). Standard errors are Gauss-Newton over (c, s_0, d_j, k_j);
intervals are pairs or runs bootstrap as for :func:`~fastdyn.analysis.power_law.fit_power_law`,
each resample refitted.

Regime detection: BIC_m = n ln(RSS_m / n) + (3 + 2m) ln n (Gaussian errors in ln y), and the
chosen number of breaks minimises BIC_m + min_delta_bic * m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

from . import _boot
from . import _common as common
from .power_law import (
    FitData,
    PowerLawFit,
    _bootstrap_entries,
    _data_entries,
    _data_fields,
    _wls,
    fit_power_law,
)
from .window import _window_mask

__all__ = ["BrokenPowerLawFit", "RegimeReport", "fit_broken_power_law", "detect_regimes"]


def _hinge_design(u: np.ndarray, knots: np.ndarray) -> np.ndarray:
    cols = [np.ones_like(u), u] + [np.maximum(u - k, 0.0) for k in knots]
    return np.stack(cols, axis=1)


def _hinge_solve(u: np.ndarray, v: np.ndarray, w: np.ndarray, knots: np.ndarray):
    X = _hinge_design(u, knots)
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(X * sw[:, None], v * sw, rcond=None)
    r = v - X @ coef
    return coef, float(np.sum(w * r * r))


def _knot_bounds(u: np.ndarray, min_points: int) -> tuple[float, float]:
    us = np.unique(u)
    if us.size < 2 * min_points:
        raise ValueError(
            f"too few distinct x for a broken power law: need at least {2 * min_points}, got {us.size}"
        )
    return float(us[min_points - 1]), float(us[us.size - min_points])


def _best_one_knot(u, v, w, lo, hi, grid: int = 96) -> float:
    ks = np.linspace(lo, hi, grid)
    # batched normal equations over the grid: design columns [1, u, relu(u - k)]
    R = np.maximum(u[None, :] - ks[:, None], 0.0)  # (G, M)
    s1, su, suu = w.sum(), w @ u, w @ (u * u)
    sv, suv = w @ v, w @ (u * v)
    sr, sur, srr, srv = R @ w, R @ (w * u), (R * R) @ w, R @ (w * v)
    G = np.empty((ks.size, 3, 3))
    G[:, 0, 0], G[:, 0, 1], G[:, 1, 1] = s1, su, suu
    G[:, 0, 2], G[:, 1, 2], G[:, 2, 2] = sr, sur, srr
    G[:, 1, 0], G[:, 2, 0], G[:, 2, 1] = G[:, 0, 1], G[:, 0, 2], G[:, 1, 2]
    rhs = np.stack([np.full(ks.size, sv), np.full(ks.size, suv), srv], axis=1)
    with np.errstate(all="ignore"):
        try:
            coef = np.linalg.solve(G, rhs[..., None])[..., 0]
            sse = (w @ (v * v)) - np.einsum("gi,gi->g", coef, rhs)
        except np.linalg.LinAlgError:
            sse = np.array([_hinge_solve(u, v, w, np.array([k]))[1] for k in ks])
    sse = np.where(np.isfinite(sse), sse, np.inf)
    j = int(np.argmin(sse))
    a, b = ks[max(j - 1, 0)], ks[min(j + 1, ks.size - 1)]
    if b <= a:
        return float(ks[j])
    res = optimize.minimize_scalar(
        lambda k: _hinge_solve(u, v, w, np.array([k]))[1],
        bounds=(a, b),
        method="bounded",
        options={"xatol": 1e-10 * max(1.0, hi - lo)},
    )
    return float(res.x) if res.fun <= sse[j] else float(ks[j])


def _refine_knots(u, v, w, knots0: np.ndarray, lo: float, hi: float, gap: float) -> np.ndarray:
    def obj(k: np.ndarray) -> float:
        ks = np.sort(k)
        if ks[0] < lo or ks[-1] > hi or np.any(np.diff(ks) < gap):
            return np.inf
        return _hinge_solve(u, v, w, ks)[1]

    res = optimize.minimize(
        obj, knots0, method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-14, "maxiter": 4000}
    )
    k = np.sort(res.x)
    return k if np.isfinite(res.fun) and res.fun <= obj(knots0) else np.asarray(knots0)


def _fit_knots(u, v, w, n_breaks: int, min_points: int, knots0: np.ndarray | None = None):
    lo, hi = _knot_bounds(u, min_points)
    gap = (hi - lo) / 50.0
    if n_breaks == 1:  # the grid + Brent search is cheap and global: no warm start needed
        return np.array([_best_one_knot(u, v, w, lo, hi)])
    if knots0 is None:  # coarse grid over ordered knot tuples, then Nelder-Mead
        g = np.linspace(lo, hi, 24)
        best = (np.inf, None)
        if n_breaks == 2:
            for i in range(g.size):
                for j in range(i + 1, g.size):
                    if g[j] - g[i] < gap:
                        continue
                    sse = _hinge_solve(u, v, w, np.array([g[i], g[j]]))[1]
                    if sse < best[0]:
                        best = (sse, np.array([g[i], g[j]]))
        else:
            raise ValueError(f"n_breaks must be 1 or 2, got n_breaks={n_breaks!r}")
        knots0 = best[1]
    return _refine_knots(u, v, w, knots0, lo, hi, gap)


def _bic(rss: float, n: int, k: int) -> float:
    """Gaussian BIC, n ln(RSS/n) + k ln n (k counts the noise variance too)."""
    return n * math.log(max(rss, 1e-300) / n) + k * math.log(n)


@dataclass(frozen=True, eq=False, repr=False)
class BrokenPowerLawFit(FitData):
    """Result of :func:`fit_broken_power_law`: continuous piecewise power law.

    y = prefactor x^-exponents[0] for x <= breakpoints[0], and each later segment j has slope
    -exponents[j] in log-log space, joined continuously at the breakpoints.
    """

    exponents: tuple[float, ...]
    exponents_stderr: tuple[float, ...]
    exponents_ci: tuple[tuple[float, float], ...]
    breakpoints: tuple[float, ...]
    breakpoints_ci: tuple[tuple[float, float], ...]
    prefactor: float
    bic: float
    bootstrap: int
    bootstrap_method: str
    _coef: tuple[float, ...] = field(repr=False, default=())

    def predict(self, x: Any) -> np.ndarray:
        u = np.log(np.asarray(x, dtype=float))
        X = _hinge_design(np.atleast_1d(u), np.log(np.array(self.breakpoints)))
        return np.exp(X @ np.array(self._coef)).reshape(np.shape(u))

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": "broken_power_law",
            "exponents": common._floats(self.exponents),
            "exponents_stderr": common._floats(self.exponents_stderr),
            "exponents_ci": [common._pair(c) for c in self.exponents_ci],
            "breakpoints": common._floats(self.breakpoints),
            "breakpoints_ci": [common._pair(c) for c in self.breakpoints_ci],
            "prefactor": common._f(self.prefactor),
            **_data_entries(self),
            "bic": common._f(self.bic),
            **_bootstrap_entries(self),
        }


def _prep_pooled(x, y, weights, window, min_points, what):
    x, y, w = common._arrays(x, y, weights)
    mask, win = _window_mask(x, window)
    xm, ym, wm = x[mask], y[:, mask], w[:, mask]
    n_runs, n = ym.shape
    u1, _ = common._logs(xm, ym[0], min_points, what)
    common._logs(np.repeat(xm, n_runs), ym.ravel(), min_points, what)
    return np.tile(u1, n_runs), np.log(ym).ravel(), wm.ravel(), n_runs, n, win


def fit_broken_power_law(
    x: Any,
    y: Any,
    n_breaks: int = 1,
    window: tuple[float | None, float | None] | None = None,
    weights: Any = None,
    bootstrap: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    min_points: int = 3,
) -> BrokenPowerLawFit:
    """Continuous broken power law in log space, fitted by least squares (profile over knots).

    ln y = c + s_0 u + sum_j d_j max(u - k_j, 0), u = ln x; exponents p_j = -(s_0 + d_1 + ... + d_j),
    breakpoints x_j = e^{k_j}. For one break the knot is found by a 96-point grid over
    [u_(min_points), u_(n - min_points + 1)] of the profile RSS and a bounded Brent refinement; two
    breaks use a 24 x 24 grid then Nelder-Mead. Bootstrap as in :func:`fit_power_law` (pairs or
    runs), each resample refitted (one break: from scratch; two: warm-started).
    """
    common._check_ci(ci)
    n_boot = common._check_bootstrap(bootstrap)
    seed = _boot.check_seed(seed)
    if n_breaks not in (1, 2):
        raise ValueError(f"n_breaks must be 1 or 2, got n_breaks={n_breaks!r}")
    if int(min_points) != min_points or min_points < 2:
        raise ValueError(f"min_points must be an integer >= 2, got min_points={min_points!r}")
    need = (n_breaks + 1) * min_points
    u, v, w, n_runs, n, win = _prep_pooled(x, y, weights, window, need, "a broken power law")
    knots = _fit_knots(u, v, w, n_breaks, min_points)
    coef, rss = _hinge_solve(u, v, w, knots)

    def derived(coef: np.ndarray, knots: np.ndarray):
        slopes = coef[1] + np.concatenate([[0.0], np.cumsum(coef[2:])])
        return -slopes, np.exp(knots)

    p, xb = derived(coef, knots)
    # Gauss-Newton covariance over (c, s0, d_j, k_j)
    X = _hinge_design(u, knots)
    Jk = np.stack([-coef[2 + j] * (u > knots[j]) for j in range(n_breaks)], axis=1)
    J = np.concatenate([X, Jk], axis=1) * np.sqrt(w)[:, None]
    dof = max(u.size - (2 + 2 * n_breaks), 1)
    s2 = rss / dof
    try:
        cov = np.linalg.inv(J.T @ J) * s2
        L = np.zeros((n_breaks + 1, J.shape[1]))
        L[:, 1] = -1.0
        for j in range(1, n_breaks + 1):
            L[j, 2 : 2 + j] = -1.0
        se_p = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", L, cov, L), 0.0))
    except np.linalg.LinAlgError:
        se_p = np.full(n_breaks + 1, np.nan)
    if n_runs > 1:
        per_run = []
        for r in range(n_runs):
            sl = slice(r * n, (r + 1) * n)
            kr = _fit_knots(u[sl], v[sl], w[sl], n_breaks, min_points, knots)
            per_run.append(derived(_hinge_solve(u[sl], v[sl], w[sl], kr)[0], kr)[0])
        se_p = np.std(per_run, axis=0, ddof=1) / math.sqrt(n_runs)

    method = "normal"
    if n_boot > 0:
        bp = np.full((n_boot, n_breaks + 1), np.nan)
        bx = np.full((n_boot, n_breaks), np.nan)
        counts, method = common._resample_weights(seed, 0, n_boot, n_runs, n)
        for k in range(n_boot):
            wk = counts[k] * w
            keep = wk > 0
            try:
                kk = _fit_knots(u[keep], v[keep], wk[keep], n_breaks, min_points, knots)
                ck, _ = _hinge_solve(u[keep], v[keep], wk[keep], kk)
                bp[k], bx[k] = derived(ck, kk)
            except (ValueError, np.linalg.LinAlgError):
                pass
        p_ci = tuple(common._percentile_ci(bp[:, j], ci) for j in range(n_breaks + 1))
        x_ci = tuple(common._percentile_ci(bx[:, j], ci) for j in range(n_breaks))
    else:
        d = dof if n_runs == 1 else n_runs - 1
        p_ci = tuple(common._normal_ci(p[j], se_p[j], ci, d) for j in range(n_breaks + 1))
        x_ci = tuple((math.nan, math.nan) for _ in range(n_breaks))
    resid = (v - X @ coef).reshape(n_runs, n)
    return BrokenPowerLawFit(
        exponents=tuple(float(q) for q in p),
        exponents_stderr=tuple(float(q) for q in se_p),
        exponents_ci=p_ci,
        breakpoints=tuple(float(q) for q in xb),
        breakpoints_ci=x_ci,
        prefactor=float(np.exp(coef[0])),
        **_data_fields(ci, win, resid, rss),
        bic=_bic(rss, u.size, 3 + 2 * n_breaks),
        bootstrap=n_boot,
        bootstrap_method=method,
        _coef=tuple(float(c) for c in coef),
    )


@dataclass(frozen=True, eq=False)
class RegimeReport:
    """Result of :func:`detect_regimes`.

    ``bic[m]`` is the BIC of the model with m breaks (m = 0: single power law); the chosen
    ``n_breaks`` minimises bic[m] + min_delta_bic * m. ``regimes`` lists one dict per power-law
    segment: x_lo, x_hi, exponent, ci.
    """

    n_breaks: int
    bic: tuple[float, ...]
    min_delta_bic: float
    fit: PowerLawFit | BrokenPowerLawFit
    regimes: tuple[dict[str, Any], ...]

    @property
    def broken(self) -> bool:
        return self.n_breaks > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_breaks": self.n_breaks,
            "broken": self.broken,
            "bic": common._floats(self.bic),
            "min_delta_bic": self.min_delta_bic,
            "regimes": [
                {k: (common._pair(v) if k == "ci" else common._f(v)) for k, v in r.items()}
                for r in self.regimes
            ],
            "fit": self.fit.to_dict(),
        }


def detect_regimes(
    x: Any,
    y: Any,
    max_breaks: int = 2,
    min_delta_bic: float = 10.0,
    window: tuple[float | None, float | None] | None = None,
    weights: Any = None,
    bootstrap: int = 200,
    seed: int = 0,
    ci: float = 0.95,
    min_points: int = 3,
) -> RegimeReport:
    """Choose between a single power law and broken power laws (1..max_breaks) by BIC.

    BIC_m = n ln(RSS_m / n) + (3 + 2m) ln n (Gaussian errors in ln y); a model with more breaks
    is chosen only if it lowers BIC by more than ``min_delta_bic`` per extra break (default 10,
    "very strong" evidence on the Kass-Raftery scale, which keeps the false-break rate of a pure
    power law with noise negligible). The chosen model is then refitted with the bootstrap.
    """
    if max_breaks not in (0, 1, 2):
        raise ValueError(f"max_breaks must be 0, 1 or 2, got max_breaks={max_breaks!r}")
    u, v, wf, n_runs, n, win = _prep_pooled(x, y, weights, window, 3, "regime detection")
    a, b, _ = _wls(u, v, wf)
    rss0 = float(np.sum(wf * (v - a - b * u) ** 2))
    bics = [_bic(rss0, u.size, 3)]
    for m in range(1, max_breaks + 1):
        try:
            f = fit_broken_power_law(x, y, m, window, weights, 0, seed, ci, min_points)
            bics.append(f.bic)
        except ValueError:
            break
    score = [bb + min_delta_bic * m for m, bb in enumerate(bics)]
    best = int(np.argmin(score))
    if best == 0:
        fit = fit_power_law(x, y, window, weights=weights, bootstrap=bootstrap, seed=seed, ci=ci)
        regimes = ({"x_lo": win[0], "x_hi": win[1], "exponent": fit.exponent, "ci": fit.ci},)
    else:
        fit = fit_broken_power_law(x, y, best, window, weights, bootstrap, seed, ci, min_points)
        edges = (win[0], *fit.breakpoints, win[1])
        regimes = tuple(
            {"x_lo": edges[j], "x_hi": edges[j + 1], "exponent": fit.exponents[j],
             "ci": fit.exponents_ci[j]}
            for j in range(best + 1)
        )  # fmt: skip
    return RegimeReport(best, tuple(bics), float(min_delta_bic), fit, regimes)
