"""Single power laws y = A x^-p (+ L_inf), fitted in log-log space, with bootstrap intervals.

With u = ln x, v = ln y, weights w_i and log-space residuals r_i = v_i - ln model(x_i):

    power law      v = ln A - p u                   (y = A x^-p)
    with offset    v = ln(A e^{-p u} + L_inf)       (y = A x^-p + L_inf, L_inf >= 0)
    objective      min sum_i w_i rho(r_i),   rho(r) = r^2                      (loss="l2")
                   rho(r) = r^2 / 2 if |r| <= c else c |r| - c^2 / 2           (loss="huber")

The l2 line is the exact weighted least-squares solution, p = -sum w du dv / sum w du^2 (du, dv
centred on the weighted means); the Huber threshold is c = 1.345 x 1.4826 MAD(r), re-estimated
until stable; the offset model is a bounded trust-region least squares in ln y.

Uncertainty
-----------
``stderr`` is the asymptotic (Gauss-Newton) standard error, se_p^2 = s^2 [(J^T W J)^-1]_pp with
s^2 = RSS / (n - k) (Huber: the sandwich form). Confidence intervals are percentile bootstrap
intervals:

* 1-d ``y`` (one run): **pairs bootstrap** -- resample the (x, y) points with replacement and refit.
  We prefer it to a residual bootstrap because a residual bootstrap assumes i.i.d. residuals
  around a correct model; scaling curves are heteroscedastic in log space and usually keep some
  curvature inside any window, and the pairs bootstrap stays consistent under both, so its
  coverage is the honest one (measured: 95 % intervals cover the true exponent in ~92-94 % of
  trials at n = 40 points, see tests/analysis/test_fit.py).
* 2-d ``y`` of shape (n_runs, n_points) (several seeds on a shared x): **bootstrap over runs** --
  resample whole runs, because points of one run are correlated (one seed's curve), and refit the
  pooled data. ``stderr`` is then the between-run standard error, std(p_run) / sqrt(n_runs).

Resampling is counter-based (:mod:`fastdyn.analysis._boot`): resample k of seed s is a pure
function of (s, k), so bootstrap results do not depend on the thread count or on chunking. For
``loss="l2"`` with one run a compiled kernel draws each resample and solves its 2x2 normal
equations (no counts matrix); with several runs one batched weighted least-squares solve from
resampling-count weights; ``loss="huber"`` uses a batched IRLS with the scale fixed from the
full fit (it converges to the same minimiser as scipy's least_squares(loss="huber")); the offset
model refits each resample with scipy, warm-started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np
from scipy import optimize

from . import _boot
from ._common import (
    _arrays,
    _check_bootstrap,
    _check_ci,
    _f,
    _floats,
    _logs,
    _normal_ci,
    _pair,
    _percentile_ci,
    _resample_weights,
)
from .window import _window_mask, auto_window

__all__ = ["PowerLawFit", "fit_power_law"]

_CHUNK = 2_000_000  # elements per batched bootstrap block (about 16 MB of float64)


def _batched_wls(
    u: np.ndarray, v: np.ndarray, W: np.ndarray, w: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted LS of v = a + b u for each row of weights W (B, M) [times w (M,)]: (a, b), (B,).

    u, v are centred by the caller for accuracy; moments via one matrix product.
    """
    Q = np.stack([np.ones_like(u), u, v, u * u, u * v], axis=1)  # (M, 5)
    if w is not None:
        Q *= w[:, None]
    S = W @ Q  # (B, 5)
    s0, su, sv, suu, suv = S.T
    with np.errstate(invalid="ignore", divide="ignore"):
        mu, mv = su / s0, sv / s0
        b = (suv - s0 * mu * mv) / (suu - s0 * mu * mu)
        a = mv - b * mu
    rel = (suu - s0 * mu * mu) / np.maximum(s0, 1e-300)
    b = np.where(rel > 1e-12 * max(1.0, float(np.var(u))), b, np.nan)  # degenerate resample
    return a, b


def _wls(u: np.ndarray, v: np.ndarray, w: np.ndarray) -> tuple[float, float, float]:
    """Exact weighted LS line v = a + b u: returns (a, b, se_b)."""
    sw = w.sum()
    mu, mv = (w * u).sum() / sw, (w * v).sum() / sw
    du, dv = u - mu, v - mv
    sxx = (w * du * du).sum()
    b = (w * du * dv).sum() / sxx
    a = mv - b * mu
    r = dv - b * du
    dof = max(u.size - 2, 1)
    s2 = (w * r * r).sum() / dof / (sw / u.size)  # weights normalised to mean 1
    return float(a), float(b), float(math.sqrt(s2 / (sxx / (sw / u.size))))


def _data_entries(fit: Any) -> dict[str, Any]:
    """A fit's ``to_dict`` entries for its level, window, data and residual sum of squares."""
    return {
        "ci_level": fit.ci_level,
        "window": _pair(fit.window),
        "n_points": fit.n_points,
        "n_runs": fit.n_runs,
        "rss": _f(fit.rss),
    }


def _data_fields(ci: float, window: tuple[float, float], resid: np.ndarray, rss: float) -> dict:
    """A fit result's keyword arguments for :func:`_data_entries`' fields: ``resid`` (runs ×
    points) is stored as one row for one run, like the fitted y."""
    n_runs, n = resid.shape
    return {"ci_level": ci, "window": window, "n_points": n, "n_runs": n_runs,
            "residuals": resid if n_runs > 1 else resid[0], "rss": rss}  # fmt: skip


def _bootstrap_entries(fit: Any) -> dict[str, Any]:
    """A fit's ``to_dict`` entries for its bootstrap and its log-space residuals (nested lists)."""
    return {
        "bootstrap": fit.bootstrap,
        "bootstrap_method": fit.bootstrap_method,
        "residuals": [_floats(row) for row in np.atleast_2d(fit.residuals)],
    }


@dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class FitData:
    """What every fit result holds about the data it was fitted to: the interval level
    ``ci_level``, the x ``window`` used, ``n_points`` per run and ``n_runs``, the log-space
    ``residuals`` ln y - ln model (shaped like the fitted y) and their weighted sum of squares
    ``rss``. Keyword-only; a subclass's repr shows its own fields first, then these."""

    ci_level: float
    window: tuple[float, float]
    n_points: int
    n_runs: int
    residuals: np.ndarray = field(repr=False)
    rss: float

    def __repr__(self) -> str:
        mine = FitData.__dataclass_fields__
        shown = sorted((f for f in fields(self) if f.repr), key=lambda f: f.name in mine)
        body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in shown)
        return f"{type(self).__name__}({body})"


@dataclass(frozen=True, eq=False, repr=False)
class PowerLawFit(FitData):
    """Result of :func:`fit_power_law`: y = prefactor * x^-exponent (+ offset).

    ``residuals`` are log-space residuals ln y - ln model, shape of the fitted y (runs x points);
    ``rss`` their weighted sum of squares; ``ci`` the percentile bootstrap interval at level
    ``ci_level`` (``bootstrap_method`` "pairs", "runs", or "normal" = Student-t from ``stderr``
    when ``bootstrap == 0``).
    """

    exponent: float
    prefactor: float
    offset: float | None
    stderr: float
    ci: tuple[float, float]
    prefactor_ci: tuple[float, float]
    offset_ci: tuple[float, float] | None
    loss: str
    bootstrap: int
    bootstrap_method: str

    def predict(self, x: Any) -> np.ndarray:
        """Model value A x^-p (+ L_inf)."""
        x = np.asarray(x, dtype=float)
        return self.prefactor * x ** (-self.exponent) + (self.offset or 0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (nan -> None, residuals as nested lists)."""
        return {
            "model": "power_law_offset" if self.offset is not None else "power_law",
            "exponent": _f(self.exponent),
            "prefactor": _f(self.prefactor),
            "offset": _f(self.offset),
            "stderr": _f(self.stderr),
            "ci": _pair(self.ci),
            "prefactor_ci": _pair(self.prefactor_ci),
            "offset_ci": _pair(self.offset_ci),
            **_data_entries(self),
            "loss": self.loss,
            **_bootstrap_entries(self),
        }


def _huber_scale(r: np.ndarray) -> float:
    """1.345 * robust sigma (1.4826 MAD) of the l2 residuals: the usual 95 %-efficiency Huber c."""
    s = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    return 1.345 * s if s > 0 else 1.345 * max(float(np.std(r)), 1e-12)


def _huber_irls(
    u: np.ndarray, v: np.ndarray, W: np.ndarray, c: float, a0: float, b0: float, iters: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """Batched IRLS for the Huber line fit (threshold c) with base weights W (B, M)."""
    a = np.full(W.shape[0], a0)
    b = np.full(W.shape[0], b0)
    for _ in range(iters):
        r = np.abs(v[None, :] - a[:, None] - b[:, None] * u[None, :])
        hw = np.minimum(1.0, c / np.maximum(r, 1e-300))
        a_new, b_new = _batched_wls(u, v, W * hw)
        done = np.nanmax(np.abs(b_new - b)) < 1e-13 if np.isfinite(b_new).any() else True
        a, b = a_new, b_new
        if done:
            break
    return a, b


def _offset_model(theta: np.ndarray, u: np.ndarray) -> np.ndarray:
    c, p, linf = theta
    return np.logaddexp(c - p * u, np.log(linf) if linf > 0 else -np.inf)


def _fit_offset(
    u: np.ndarray, v: np.ndarray, w: np.ndarray, theta0: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """least_squares in ln y for (ln A, p, L_inf >= 0); returns (theta, jacobian)."""
    sw = np.sqrt(w)
    ymin = float(np.exp(v.min()))
    if theta0 is None:
        best = None
        for frac in (0.0, 0.25, 0.5, 0.75, 0.9, 0.97, 0.99):
            linf = frac * ymin
            vv = np.log(np.exp(v) - linf)
            a, b, _ = _wls(u, vv, w)
            th = np.array([a, -b, linf])
            sse = float(np.sum(w * (v - _offset_model(th, u)) ** 2))
            if best is None or sse < best[0]:
                best = (sse, th)
        theta0 = best[1]

    def res(th: np.ndarray) -> np.ndarray:
        return sw * (v - _offset_model(th, u))

    def jac(th: np.ndarray) -> np.ndarray:
        c, p, linf = th
        m = np.exp(_offset_model(th, u))
        pw = np.exp(c - p * u)
        return -sw[:, None] * np.stack([pw / m, -u * pw / m, 1.0 / m], axis=1)

    theta0 = np.array(theta0, dtype=float)
    theta0[2] = max(theta0[2], 0.0)
    sol = optimize.least_squares(
        res,
        theta0,
        jac=jac,
        bounds=([-np.inf, -np.inf, 0.0], [np.inf, np.inf, np.inf]),
        x_scale="jac",
        ftol=1e-15,
        xtol=1e-15,
        gtol=1e-15,
        max_nfev=2000,
        method="trf",
    )
    return sol.x, sol.jac


def _fit_core(
    u: np.ndarray, v: np.ndarray, w: np.ndarray, offset: bool, loss: str, scale: float | None
) -> tuple[np.ndarray, float, float | None, np.ndarray | None]:
    """Point fit on pooled data. Returns (theta=(ln A, p[, L_inf]), se_p, huber_scale, jac)."""
    a, b, se = _wls(u, v, w)
    if offset:
        th, J = _fit_offset(u, v, w)
        try:
            cov = np.linalg.inv(J.T @ J)
            r = np.sqrt(w) * (v - _offset_model(th, u))
            s2 = float(r @ r) / max(u.size - 3, 1)
            se = float(math.sqrt(max(cov[1, 1] * s2, 0.0)))
        except np.linalg.LinAlgError:
            se = math.nan
        return th, se, None, J
    if loss == "huber":
        sw = np.sqrt(w)
        th = np.array([a, b])
        c = scale if scale is not None else _huber_scale(v - a - b * u)
        for _ in range(1 if scale is not None else 20):
            sol = optimize.least_squares(
                lambda q: sw * (v - q[0] - q[1] * u),
                th,
                loss="huber",
                f_scale=c,
                ftol=1e-15,
                xtol=1e-15,
                gtol=1e-15,
                method="trf",
            )
            th = sol.x
            if scale is not None:
                break
            c_new = _huber_scale(v - th[0] - th[1] * u)  # re-estimate the scale robustly
            if abs(c_new - c) <= 1e-6 * c:
                break
            c = c_new
        a, b = th
        # Huber's asymptotic (sandwich) standard error, weights normalised to mean 1
        wn = w / w.mean()
        r = v - a - b * u
        psi = np.clip(r, -c, c)
        dpsi = float(np.sum(wn * (np.abs(r) <= c))) / u.size
        du = u - np.sum(wn * u) / wn.sum()
        num = float(np.sum(wn * psi**2)) / max(u.size - 2, 1)
        se = math.sqrt(num / max(dpsi, 1e-12) ** 2 / float(np.sum(wn * du * du)))
        return np.array([a, -b]), se, c, None
    return np.array([a, -b]), se, None, None


def fit_power_law(
    x: Any,
    y: Any,
    window: None | Literal["auto"] | tuple[float | None, float | None] = None,
    offset: bool = False,
    weights: Any = None,
    bootstrap: int = 1000,
    loss: Literal["l2", "huber"] = "l2",
    seed: int = 0,
    ci: float = 0.95,
    *,
    huber_scale: float | None = None,
    cutoff_x: float | None = None,
    auto_kwargs: dict[str, Any] | None = None,
) -> PowerLawFit:
    """Fit y = A x^-p (+ L_inf if ``offset``) by least squares in log-log space.

    Minimises sum_i w_i rho(ln y_i - ln(A x_i^-p [+ L_inf])) with rho = r^2 (``loss="l2"``) or
    the Huber function with threshold ``huber_scale`` (default c = 1.345 x 1.4826 MAD of the
    residuals, re-estimated from the Huber fit's own residuals until it is stable, starting from
    the l2 fit). ``y`` may be 2-d (n_runs, n_points) over a shared ``x``: the runs are pooled and
    the bootstrap resamples runs. ``window``: None (all points), ``(lo, hi)`` (inclusive, None for
    open) or ``"auto"`` (:func:`auto_window`, with ``cutoff_x`` and ``auto_kwargs``).
    """
    _check_ci(ci)
    n_boot = _check_bootstrap(bootstrap)
    seed = _boot.check_seed(seed)
    if loss not in ("l2", "huber"):
        raise ValueError(f'loss must be "l2" or "huber", got loss={loss!r}')
    if offset and loss == "huber":
        raise ValueError('offset=True supports loss="l2" only')
    x, y, w = _arrays(x, y, weights)
    if isinstance(window, str):
        if window != "auto":
            raise ValueError(f'window must be None, "auto" or (lo, hi), got {window!r}')
        window = auto_window(x, y, cutoff_x=cutoff_x, **(auto_kwargs or {}))
    mask, win = _window_mask(x, window)
    xm, ym, wm = x[mask], y[:, mask], w[:, mask]
    n_runs, n = ym.shape
    min_pts = 4 if offset else 3
    u1, _ = _logs(xm, ym[0], min_pts, "an offset power-law fit" if offset else "a power-law fit")
    _logs(np.repeat(xm, n_runs), ym.ravel(), min_pts, "a power-law fit")
    # pooled, centred log data (centring keeps the batched moment sums accurate)
    u0 = float(np.mean(u1))
    u = np.tile(u1 - u0, n_runs)
    vfull = np.log(ym).ravel()
    v0 = float(np.mean(vfull))
    v = vfull - v0
    wf = wm.ravel()

    theta, se, hscale, _ = _fit_core(u, v, wf, offset, loss, huber_scale)

    def uncentre(th: np.ndarray) -> tuple[float, float, float | None]:
        # ln y - v0 = th0 - p (ln x - u0)  [no offset]; offset: y e^{-v0} = e^{th0} (...) + L e^{-v0}
        lnA = th[0] + v0 + th[1] * u0
        return float(th[1]), float(np.exp(lnA)), (float(th[2] * np.exp(v0)) if offset else None)

    p, A, Linf = uncentre(theta)
    model_c = _offset_model(theta, u) if offset else theta[0] - theta[1] * u
    resid = (v - model_c).reshape(n_runs, n)
    rss = float(np.sum(wf * (v - model_c) ** 2))

    if n_runs > 1:  # between-run standard error
        per_run = []
        for r in range(n_runs):
            sl = slice(r * n, (r + 1) * n)
            th_r, *_ = _fit_core(u[sl], v[sl], wf[sl], offset, loss, hscale)
            per_run.append(th_r[1])
        se = float(np.std(per_run, ddof=1) / math.sqrt(n_runs))

    if n_boot == 0:
        dof = (n_runs - 1) if n_runs > 1 else (n - (3 if offset else 2))
        pci = _normal_ci(p, se, ci, dof)
        return PowerLawFit(
            exponent=p, prefactor=A, offset=Linf, stderr=se, ci=pci,
            prefactor_ci=(math.nan, math.nan), offset_ci=(math.nan, math.nan) if offset else None,
            **_data_fields(ci, win, resid, rss), loss=loss, bootstrap=0, bootstrap_method="normal",
        )  # fmt: skip

    boot_p = np.empty(n_boot)
    boot_A = np.empty(n_boot)
    boot_L = np.empty(n_boot) if offset else None
    method = "runs" if n_runs > 1 else "pairs"
    fast = n_runs == 1 and not offset and loss == "l2"
    if fast:  # the common case: one compiled pass per resample (draw, moments, 2x2 solve)
        a_b, b_b = _boot.line_fits(seed, 0, n_boot, u, v, wf)
        boot_p[:] = -b_b
        boot_A[:] = np.exp(a_b + v0 - b_b * u0)
    step = max(1, _CHUNK // u.size)  # other fits: counts matrices in blocks of ~16 MB
    for s in () if fast else range(0, n_boot, step):
        b = min(step, n_boot - s)
        counts, method = _resample_weights(seed, s, b, n_runs, n)
        if offset:
            Wb = counts * wf[None, :]
            for k in range(b):
                keep = Wb[k] > 0
                try:
                    th, _ = _fit_offset(u[keep], v[keep], Wb[k][keep], theta)
                    pk, Ak, Lk = uncentre(th)
                except (ValueError, np.linalg.LinAlgError):
                    pk = Ak = Lk = math.nan
                boot_p[s + k], boot_A[s + k], boot_L[s + k] = pk, Ak, Lk
            continue
        if loss == "huber":
            a_b, b_b = _huber_irls(u, v, counts * wf[None, :], hscale, theta[0], -theta[1])
        else:
            a_b, b_b = _batched_wls(u, v, counts, wf)
        boot_p[s : s + b] = -b_b
        boot_A[s : s + b] = np.exp(a_b + v0 - b_b * u0)
    return PowerLawFit(
        exponent=p,
        prefactor=A,
        offset=Linf,
        stderr=se,
        ci=_percentile_ci(boot_p, ci, p),
        prefactor_ci=_percentile_ci(boot_A, ci, A),
        offset_ci=_percentile_ci(boot_L, ci, Linf) if offset else None,
        **_data_fields(ci, win, resid, rss),
        loss=loss,
        bootstrap=n_boot,
        bootstrap_method=method,
    )
