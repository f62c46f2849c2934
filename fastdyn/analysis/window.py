"""Fit windows: an explicit x-range ``(lo, hi)`` or ``window="auto"``.

Explicit: the points with lo <= x <= hi (inclusive; None for an open end).

Automatic (:func:`auto_window`), with u = ln x and v = ln y (mean of ln y over runs):

1. plateau skipping: drop the points before the first i with |v_i - v_0| > plateau_tol;
2. cutoff: drop x > cutoff_x, with a warning (for a model with a task law, the time where the
   learned-task cutoff s_c(t) reaches a fraction of the represented tasks);
3. local slopes on n_centres centres c_k evenly spaced in u:
   s_k = sum (u - mean u)(v - mean v) / sum (u - mean u)^2 over the points with |u - c_k| <= h;
4. the window is the longest run of centres [c_i, c_j] with max s - min s <= tol,
   |median s| >= min_slope and at least min_points points, returned as (e^{c_i}, e^{c_j}).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ._common import _logs

__all__ = ["auto_window", "auto_window_explained"]


def _window_mask(x: np.ndarray, window: tuple[float, float] | None) -> tuple[np.ndarray, tuple]:
    if window is None:
        return np.ones(x.shape, bool), (float(np.min(x)), float(np.max(x)))
    try:
        lo, hi = window
    except (TypeError, ValueError):
        raise ValueError(f'window must be None, "auto" or (lo, hi), got {window!r}') from None
    lo = -np.inf if lo is None else float(lo)
    hi = np.inf if hi is None else float(hi)
    if not lo < hi:
        raise ValueError(f"window must satisfy lo < hi, got window=({lo:g}, {hi:g})")
    if hi < np.min(x) or lo > np.max(x):
        raise ValueError(
            f"window=({lo:g}, {hi:g}) lies outside the data x in [{np.min(x):g}, {np.max(x):g}]"
        )
    m = (x >= lo) & (x <= hi)
    return m, (float(np.min(x[m])) if m.any() else lo, float(np.max(x[m])) if m.any() else hi)


def auto_window(x: Any, y: Any, *args: Any, **kw: Any) -> tuple[float, float]:
    """Widest x-range over which the local log-log slope is constant within ``tol``; the
    arguments and the criterion are those of :func:`auto_window_explained`."""
    (lo, hi), _ = auto_window_explained(x, y, *args, **kw)
    return lo, hi


def auto_window_explained(
    x: Any,
    y: Any,
    tol: float = 0.03,
    plateau_tol: float = 0.05,
    cutoff_x: float | None = None,
    *,
    n_centres: int = 64,
    half_width: float | None = None,
    min_slope: float = 0.01,
    min_points: int = 5,
) -> tuple[tuple[float, float], dict[str, Any]]:
    """Widest x-range over which the local log-log slope is constant within ``tol``, and why it
    starts and ends there: ``(lo, hi), {"start": text, "end": text, "range": text, "end_kind": "cutoff"
    | "data" | "slope", "n_cut": points dropped beyond the cutoff}``.

    Criterion, exactly (u = ln x, v = ln y; for 2-d y, v is the mean of ln y over runs):

    1. sort by x; drop the initial plateau: the points before the first one with
       |v_i - v_0| > plateau_tol (y still within a factor e^plateau_tol of its start value);
    2. if ``cutoff_x`` is given, drop x > cutoff_x and warn, naming the cutoff (a task law's
       time where the learned-task cutoff s_c(t) reaches a fraction of the represented tasks);
    3. on ``n_centres`` centres c_k evenly spaced in u over what remains, the local slope
       s_k is the least-squares slope of v against u over points with |u - c_k| <= h
       (h = ``half_width`` in ln x, default 1/16 of the remaining ln-x span; centres with fewer
       than 3 points have no slope);
    4. the window is the longest run of consecutive centres [c_i, c_j] (longest in u) whose slopes
       all exist and satisfy max s - min s <= tol and |median s| >= min_slope (a flat stretch is not
       a power-law regime), containing at least ``min_points`` data points; it is returned as
       (e^{c_i}, e^{c_j}).
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 1 or y.shape[-1] != x.size or y.ndim > 2:
        raise ValueError(f"x must be 1-d and y (n,) or (n_runs, n), got {x.shape} and {y.shape}")
    if tol <= 0 or plateau_tol < 0:
        raise ValueError(
            f"tol must be > 0 and plateau_tol >= 0, got tol={tol}, plateau_tol={plateau_tol}"
        )
    order = np.argsort(x, kind="stable")
    x = x[order]
    yy = np.atleast_2d(y)[:, order]
    u, _ = _logs(x, yy[0], 2 * min_points, "an automatic window")
    _logs(np.repeat(x, yy.shape[0]), yy.ravel(), 2 * min_points, "an automatic window")
    v = np.log(yy).mean(axis=0)
    moved = np.nonzero(np.abs(v - v[0]) > plateau_tol)[0]
    if moved.size == 0:
        raise ValueError("auto window: y never leaves its initial plateau (plateau_tol)")
    keep = np.arange(x.size) >= moved[0]
    if cutoff_x is not None:
        beyond = x > cutoff_x
        n_cut = int(np.sum(beyond & keep))
        if n_cut:
            warnings.warn(
                f"auto window: excluded the {n_cut} points beyond the cutoff x = {cutoff_x:g}",
                stacklevel=2,
            )
        keep &= ~beyond
    else:
        n_cut = 0
    plateau = bool(moved[0] > 0)
    u, v = u[keep], v[keep]
    if u.size < min_points or u[-1] <= u[0]:
        raise ValueError(
            f"auto window: too few points left after removing plateau/cutoff ({u.size})"
        )
    span = u[-1] - u[0]
    h = span / 16.0 if half_width is None else float(half_width)
    cs = np.linspace(u[0], u[-1], n_centres)
    lo_i = np.searchsorted(u, cs - h, side="left")
    hi_i = np.searchsorted(u, cs + h, side="right")
    cu, cv, cuu, cuv = (np.concatenate([[0.0], np.cumsum(q)]) for q in (u, v, u * u, u * v))
    m = (hi_i - lo_i).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        su, sv = cu[hi_i] - cu[lo_i], cv[hi_i] - cv[lo_i]
        sxx = (cuu[hi_i] - cuu[lo_i]) - su * su / m
        sxy = (cuv[hi_i] - cuv[lo_i]) - su * sv / m
        s = np.where((m >= 3) & (sxx > 0), sxy / sxx, np.nan)
    best = None
    for i in range(n_centres):
        if not np.isfinite(s[i]):
            continue
        smax = smin = s[i]
        for j in range(i, n_centres):
            if not np.isfinite(s[j]):
                break
            smax, smin = max(smax, s[j]), min(smin, s[j])
            if smax - smin > tol:
                break
            if j == i:
                continue
            npts = int(np.searchsorted(u, cs[j], "right") - np.searchsorted(u, cs[i], "left"))
            if npts < min_points or abs(float(np.median(s[i : j + 1]))) < min_slope:
                continue
            if best is None or cs[j] - cs[i] > best[1] - best[0]:
                best = (cs[i], cs[j], i, j)
    if best is None:
        raise ValueError(
            f"auto window: no range where the local log-log slope is constant within tol={tol}"
        )
    lo, hi = float(np.exp(best[0])), float(np.exp(best[1]))
    i, j = best[2], best[3]
    inside = s[i : j + 1]
    rng = f"local exponent {-inside.max():.3f}..{-inside.min():.3f}"
    first = int(np.argmax(np.isfinite(s)))
    if i <= first:
        start = "starts after the initial plateau" if plateau else "starts at the first point"
    else:
        start = f"starts where it settles within tol = {tol:g} ({-s[i - 1]:.3f} before)"
    if j == n_centres - 1:
        kind = "cutoff" if n_cut else "data"
        end = f"ends at the cutoff x = {cutoff_x:g}" if n_cut else "ends at the last point"
    else:
        kind = "slope"
        nxt = s[j + 1]
        after = f"{-nxt:.3f} after" if np.isfinite(nxt) else "too few points after"
        end = f"ends where it drifts by more than tol = {tol:g} ({after})"
    return (lo, hi), {"start": start, "end": end, "end_kind": kind, "n_cut": n_cut, "range": rng}
