"""④ Output time grids ("when to save"), turned into arrays the kernels take.

Times are gradient-flow time t (dimensionless; for gd t = η · step). Grids:

- ``log``: n points geometrically spaced on [t_min, t_max] (t_min > 0);
- ``linear``: n points evenly spaced on [t_min, t_max] (t_min ≥ 0);
- ``explicit``: given times, strictly increasing, finite, ≥ 0;

each optionally preceded by t = 0 (``include_zero``; not duplicated if the grid starts at 0).
For ``gd`` the output step indices are k_j = round(t_j / η) (round half to even; a positive time
maps to at least step 1), made unique and increasing, and the actual output times are η · k_j.
"""

from __future__ import annotations

from typing import Any

import numpy as np

GRIDS = ("log", "linear", "explicit")


def _with_zero(t: np.ndarray, include_zero: bool) -> np.ndarray:
    if include_zero and (t.size == 0 or t[0] != 0.0):
        t = np.concatenate(([0.0], t))
    return t


def check_times(times: Any, name: str = "times") -> np.ndarray:
    """``times`` as a contiguous float64 array, or ValueError naming what is wrong."""
    t = np.ascontiguousarray(np.asarray(times, dtype=np.float64).reshape(-1))
    if t.size == 0:
        raise ValueError(f"{name}: must hold at least one time")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{name}: must be finite")
    if t[0] < 0.0:
        raise ValueError(f"{name}: must be ≥ 0, got {t[0]:g}")
    if t.size > 1 and not np.all(np.diff(t) > 0.0):
        raise ValueError(f"{name}: must be strictly increasing")
    return t


def log_grid(t_min: float, t_max: float, n: int, include_zero: bool = False) -> np.ndarray:
    """n log-spaced times t_min … t_max (both included), optionally preceded by 0."""
    if not (np.isfinite(t_min) and np.isfinite(t_max) and 0.0 < t_min < t_max):
        raise ValueError(f"log grid: need 0 < t_min < t_max, got t_min={t_min:g}, t_max={t_max:g}")
    if n < 1:
        raise ValueError(f"log grid: n must be ≥ 1, got {n}")
    t = np.array([t_max]) if n == 1 else np.geomspace(t_min, t_max, int(n))
    t[-1] = t_max
    if n > 1:
        t[0] = t_min
    return check_times(_with_zero(t, include_zero))


def linear_grid(t_min: float, t_max: float, n: int, include_zero: bool = False) -> np.ndarray:
    """n evenly spaced times t_min … t_max (both included), optionally preceded by 0."""
    if not (np.isfinite(t_min) and np.isfinite(t_max) and 0.0 <= t_min < t_max):
        raise ValueError(
            f"linear grid: need 0 ≤ t_min < t_max, got t_min={t_min:g}, t_max={t_max:g}"
        )
    if n < 1:
        raise ValueError(f"linear grid: n must be ≥ 1, got {n}")
    t = np.array([t_max]) if n == 1 else np.linspace(t_min, t_max, int(n))
    return check_times(_with_zero(t, include_zero))


def explicit_grid(times: Any, include_zero: bool = False) -> np.ndarray:
    """The given times (validated), optionally preceded by 0."""
    return check_times(_with_zero(check_times(times), include_zero))


def make_times(
    grid: str,
    t_min: float = 1e-2,
    t_max: float = 1e12,
    n_times: int = 256,
    times: Any = (),
    include_zero: bool = False,
) -> np.ndarray:
    """Output times of a grid named ``grid`` (one of :data:`GRIDS`)."""
    if grid == "log":
        return log_grid(t_min, t_max, n_times, include_zero)
    if grid == "linear":
        return linear_grid(t_min, t_max, n_times, include_zero)
    if grid == "explicit":
        return explicit_grid(times, include_zero)
    raise ValueError(f"grid: must be one of {', '.join(GRIDS)}, got {grid!r}")


def gd_steps(times: Any, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """(step indices k_j = round(t_j/η), unique and increasing, int64; actual times η·k_j)."""
    t = check_times(times)
    if not (np.isfinite(eta) and eta > 0.0):
        raise ValueError(f"eta: must be a finite number > 0, got {eta!r}")
    kf = np.rint(t / eta)
    kf = np.where(t > 0.0, np.maximum(kf, 1.0), 0.0)
    if kf[-1] >= 2.0**62:
        raise ValueError(f"times: t_max/η = {kf[-1]:.3g} steps does not fit an int64 step counter")
    k = np.unique(kf.astype(np.int64))
    return k, eta * k.astype(np.float64)


def output_grid(time_cfg: Any, integrator: str, lr: float) -> tuple[np.ndarray, np.ndarray | None]:
    """From a config's [time] section (attributes grid, t_min, t_max, n_times, times,
    include_zero): (output times, step indices for gd else None). For gd the times are η·k_j."""
    t = make_times(
        time_cfg.grid,
        time_cfg.t_min,
        time_cfg.t_max,
        time_cfg.n_times,
        getattr(time_cfg, "times", ()),
        bool(getattr(time_cfg, "include_zero", False)),
    )
    if integrator == "gd":
        k, tk = gd_steps(t, lr)
        return tk, k
    return t, None


#: floats tried on each side of a continued grid point for the new t_max (see :func:`continue_grid`)
_ULPS = 8


def continue_grid(
    grid: str,
    t_min: float,
    t_max: float,
    n_times: int,
    t_new: float,
    include_zero: bool = False,
) -> tuple[float, int, np.ndarray, bool]:
    """The grid ``make_times(grid, t_min, t_max, n_times)`` continued at its own spacing to its
    first point at or beyond ``t_new``: for ``log`` the same ratio r = (t_max/t_min)^(1/(n−1))
    between consecutive times (t_j = t_min·r^j), for ``linear`` the same step
    Δ = (t_max − t_min)/(n−1) (t_j = t_min + jΔ).

    Returns ``(t_max', n', times, plain)``: ``times`` the old grid (without t = 0) followed by the
    continued points t_n … t_{n'−1} = t_max'; ``plain`` whether the grid ``make_times(grid,
    t_min, t_max', n')`` starts with the old grid bit for bit, t_max' then being the float within
    a few ulps of the continued point that does so (else t_max' = times[-1]). Floating point
    makes that fail for some grids (the old end is t_max exactly, the continued formula's value
    at its index may differ in the last bit): such a grid grows exactly only as explicit times.

    ValueError (naming the field) for an explicit grid (give ``time.times`` instead), a grid of
    one time (no spacing), or ``t_new`` before ``t_max``."""
    if grid not in ("log", "linear"):
        raise ValueError(
            "time.t_max: an explicit grid has no spacing to continue; give time.times starting with the times written"
        )
    if n_times < 2:
        raise ValueError("time.t_max: a grid of one output time has no spacing to continue")
    if not t_new >= t_max:
        raise ValueError(
            f"time.t_max: {t_new:g} is before the end of the run, {t_max:g}; a run only grows"
        )
    old = make_times(grid, t_min, t_max, n_times)
    if t_new == t_max:
        return t_max, n_times, old, True
    if grid == "log":
        a = np.log10(t_min)
        step = (np.log10(t_max) - a) / (n_times - 1)
        m = int(np.ceil((np.log10(t_new) - a) / step - 1e-9))
        ext = 10.0 ** (a + np.arange(n_times, m + 1) * step)
    else:
        step = (t_max - t_min) / (n_times - 1)
        m = int(np.ceil((t_new - t_min) / step - 1e-9))
        ext = t_min + np.arange(n_times, m + 1) * step
    times = check_times(np.concatenate((old, ext)))
    x = float(times[-1])
    tries, up, down = [x], x, x
    for _ in range(_ULPS):
        up, down = float(np.nextafter(up, np.inf)), float(np.nextafter(down, -np.inf))
        tries += [down, up]
    for y in tries:
        if y > t_max and np.array_equal(make_times(grid, t_min, y, m + 1)[:n_times], old):
            return y, m + 1, times, True
    return x, m + 1, times, False
