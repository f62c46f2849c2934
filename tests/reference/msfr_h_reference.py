"""Slow, readable numpy/scipy reference of the msfr-h per-task gradient flow (docs/msfr-h.md).

Independent of fastdyn: given one task's d×d symmetric H, its strength Λ, its training weight
rate = #/N and (v0, w0), integrate

    f = vᵀ H w,   r = f − Λ,   dv/dt = −rate · r · H w,   dw/dt = −rate · r · H v

with scipy's DOP853 at tight tolerances; and the Riccati closed form for H = μΠ written out
directly (P = |Π(v + w)|², Q = |Π(v − w)|², P·Q = σ, dP/dt = −(aμ/2) P² + 2aΛ P + (aμ/2) σ,
a = rate·μ), by the same integrator on the scalar P.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp


def f_curve(
    h: np.ndarray, lam: float, rate: float, v0: np.ndarray, w0: np.ndarray, times: np.ndarray
) -> np.ndarray:
    """f(t) at ``times`` of the d-dim flow."""
    d = len(v0)

    def rhs(_t, y):
        v, w = y[:d], y[d:]
        hv, hw = h @ v, h @ w
        r = v @ hw - lam
        return np.concatenate([-rate * r * hw, -rate * r * hv])

    sol = solve_ivp(rhs, (0.0, float(times[-1])), np.concatenate([v0, w0]), method="DOP853",
                    t_eval=times, rtol=1e-12, atol=1e-16)  # fmt: skip
    return np.array([sol.y[:d, k] @ h @ sol.y[d:, k] for k in range(len(times))])


def riccati_curve(
    mu: float,
    proj: np.ndarray,
    lam: float,
    rate: float,
    v0: np.ndarray,
    w0: np.ndarray,
    times: np.ndarray,
) -> np.ndarray:
    """f(t) = μ(P − Q)/4 from the scalar Riccati equation of P (H = μ·proj)."""
    p0 = float(np.sum((proj @ (v0 + w0)) ** 2))
    q0 = float(np.sum((proj @ (v0 - w0)) ** 2))
    sig, a = p0 * q0, rate * mu

    def rhs(_t, y):
        return [-(a * mu / 2) * y[0] ** 2 + 2 * a * lam * y[0] + (a * mu / 2) * sig]

    sol = solve_ivp(
        rhs, (0.0, float(times[-1])), [p0], method="DOP853", t_eval=times, rtol=1e-12, atol=1e-18
    )
    p = sol.y[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(p > 0, sig / p, q0)
    return mu * (p - q) / 4
