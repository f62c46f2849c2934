"""Shared pieces of the scaling-law fits: argument checks, log-log data, bootstrap intervals.

* data: ``x`` (n,), ``y`` (n,) or (n_runs, n) on a shared x, weights broadcast to y's shape and
  > 0; a log-log fit needs x, y finite and > 0 and works on u = ln x, v = ln y;
* bootstrap resampling weights, counter-based (:mod:`fastdyn.analysis._boot`): resample b is a
  vector of counts c_b with sum c_b = n over the n points (pairs bootstrap, one run) or over the
  runs, repeated over each run's points (runs bootstrap);
* intervals at level ``ci``: percentile [q_{(1-ci)/2}, q_{(1+ci)/2}] of the bootstrap samples,
  widened to contain the point estimate, or normal est -+ t_{(1+ci)/2, dof} se (Student t);
* JSON-safe floats: nan / inf -> None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _boot


def _f(v: Any) -> Any:
    """JSON-safe float (nan/inf -> None)."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _floats(values: Any) -> list[Any]:
    """JSON-safe list of floats (:func:`_f` of each)."""
    return [_f(v) for v in values]


def _pair(a: Sequence[float] | None) -> list[Any] | None:
    return None if a is None else [_f(a[0]), _f(a[1])]


def _check_ci(ci: float) -> None:
    if not (0.0 < ci < 1.0):
        raise ValueError(f"ci must lie in (0, 1), got ci={ci!r}")


def _check_bootstrap(bootstrap: int) -> int:
    if isinstance(bootstrap, bool) or int(bootstrap) != bootstrap or bootstrap < 0:
        raise ValueError(f"bootstrap must be a non-negative integer, got bootstrap={bootstrap!r}")
    return int(bootstrap)


def _arrays(x: Any, y: Any, weights: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: (n,), y: (n,) or (n_runs, n), weights: broadcastable to y -> float arrays, y 2-d."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"x must be 1-d, got shape {x.shape}")
    if y.ndim == 1:
        y = y[None, :]
    if y.ndim != 2 or y.shape[1] != x.shape[0]:
        raise ValueError(
            f"y must have shape (n,) or (n_runs, n) with n = len(x) = {x.size}, got {y.shape}"
        )
    if weights is None:
        w = np.ones_like(y)
    else:
        try:
            w = np.broadcast_to(np.asarray(weights, dtype=float), y.shape).copy()
        except ValueError:
            raise ValueError(
                f"weights must broadcast to y's shape {y.shape}, got {np.shape(weights)}"
            ) from None
        if not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError("weights must be finite and > 0")
    return x, y, w


def _logs(
    x: np.ndarray, y: np.ndarray, min_points: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    if x.size < min_points:
        raise ValueError(
            f"too few points for {what}: need at least {min_points} (in the window), got {x.size}"
        )
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        bad = x[~(np.isfinite(x) & (x > 0))][0]
        raise ValueError(f"x must be finite and > 0 for a log-log fit (found x = {bad:g})")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        bad = y[~(np.isfinite(y) & (y > 0))][0]
        raise ValueError(f"y must be finite and > 0 for a log-log fit (found y = {bad:g})")
    if np.unique(x).size < 2:
        raise ValueError("x must take at least 2 distinct values")
    return np.log(x), np.log(y)


def _resample_weights(
    seed: int, start: int, n_boot: int, n_runs: int, n: int
) -> tuple[np.ndarray, str]:
    """Resampling counts as weights, shape (n_boot, n_runs * n), of resamples start..start+n_boot-1.

    Pairs bootstrap (one run): counts over the n points; runs bootstrap: counts over the runs,
    repeated over each run's points. Counter-based (:mod:`fastdyn.analysis._boot`): resample k's
    counts depend only on (seed, k), not on the chunking or the thread count.
    """
    if n_runs > 1:
        return np.repeat(_boot.counts(seed, start, n_boot, n_runs), n, axis=1), "runs"
    return _boot.counts(seed, start, n_boot, n), "pairs"


def _percentile_ci(samples: np.ndarray, ci: float, est: float | None = None) -> tuple[float, float]:
    """Percentile interval of the bootstrap ``samples``; given the point estimate ``est``, the
    interval is widened to contain it (on exact data every resample equals ``est`` up to
    rounding, and the interval must not exclude it by one ulp)."""
    s = samples[np.isfinite(samples)]
    if s.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.quantile(s, [(1 - ci) / 2, (1 + ci) / 2])
    if est is not None and math.isfinite(est):
        lo, hi = min(lo, est), max(hi, est)
    return (float(lo), float(hi))


def _normal_ci(est: float, se: float, ci: float, dof: int) -> tuple[float, float]:
    from scipy.stats import t as student_t

    z = float(student_t.ppf((1 + ci) / 2, max(dof, 1)))
    return (est - z * se, est + z * se)
