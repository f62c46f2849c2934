"""Slow, readable references for the MSFR theory kernels (numpy / scipy, one task at a time).

- :func:`ode_f`: the 4-dim v/w gradient flow of spec section 3 for one task, integrated by scipy's
  DOP853 at rtol 1e-13, with the query term (H = ψ uuᵀ + q·eeᵀ, q = 1) or without it (q = 0,
  the ε = 0 model H⁰ = κ ûûᵀ of the leading-order theory).
- :func:`exact_reduction_f`: the exact finite-ψ reduction of spec section 5 (one scalar ODE in the
  clock τ per task), set up with numpy's eigh and integrated by scipy's LSODA (odeint).
- :func:`logistic_naive`, :func:`riccati_naive`: the spec section 4 formulas typed in directly.
- :func:`loss_test_naive`: L_test(t) of balanced-init tasks, numpy-vectorised over a task chunk.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import odeint, solve_ivp


def ode_f(times, lam, psi, rate, v0, w0, query=1.0, rtol=1e-13):
    """f(t) = vᵀHw along dv/dt = −rate (f − Λ) H w, dw/dt = −rate (f − Λ) H v (DOP853)."""
    u = np.array([1.0, lam])
    e = np.array([1.0, 0.0])
    H = psi * np.outer(u, u) + query * np.outer(e, e)
    y0 = np.concatenate([np.asarray(v0, float), np.asarray(w0, float)])
    scale = max(np.abs(y0).max(), 1e-300)

    def rhs(t, y):
        v, w = y[:2], y[2:]
        r = v @ H @ w - lam
        return np.concatenate([-rate * r * (H @ w), -rate * r * (H @ v)])

    times = np.asarray(times, float)
    sol = solve_ivp(
        rhs,
        (0.0, times[-1]),
        y0,
        method="DOP853",
        t_eval=times,
        rtol=rtol,
        atol=1e-6 * rtol * scale,
    )
    assert sol.success, sol.message
    v, w = sol.y[:2], sol.y[2:]
    return np.einsum("it,ij,jt->t", v, H, w)


def exact_reduction_f(times, lam, psi, rate, v0, w0, rtol=1e-13):
    """f(t) of one task by the spec's exact reduction: H/ψ = uuᵀ + eeᵀ/ψ = Σ± λ± x± x±ᵀ (eigh),
    p± = x±ᵀ(v0 + w0), q± = x±ᵀ(v0 − w0), F(τ) = (ψ/4) Σ± λ± (p±² e^{−2λ±τ} − q±² e^{2λ±τ}),
    dτ/dt = rate·ψ·(F(τ) − Λ), τ(0) = 0, f(t) = F(τ(t)). LSODA (stiff/non-stiff switching, with
    the analytic Jacobian rate·ψ·F'(τ)) steps through the stiff approach to F = Λ directly."""
    u = np.array([1.0, lam])
    e = np.array([1.0, 0.0])
    ev, X = np.linalg.eigh(np.outer(u, u) + np.outer(e, e) / psi)
    p0 = X.T @ (np.asarray(v0, float) + np.asarray(w0, float))
    q0 = X.T @ (np.asarray(v0, float) - np.asarray(w0, float))
    (l1, l2), (a1, a2), (b1, b2) = (
        ev.tolist(), (0.25 * psi * ev * p0**2).tolist(), (0.25 * psi * ev * q0**2).tolist()
    )  # fmt: skip

    def big_f(tau):
        return (a1 * math.exp(-2 * l1 * tau) - b1 * math.exp(2 * l1 * tau)
                + a2 * math.exp(-2 * l2 * tau) - b2 * math.exp(2 * l2 * tau))  # fmt: skip

    def big_df(tau):
        return -2 * (l1 * (a1 * math.exp(-2 * l1 * tau) + b1 * math.exp(2 * l1 * tau))
                     + l2 * (a2 * math.exp(-2 * l2 * tau) + b2 * math.exp(2 * l2 * tau)))  # fmt: skip

    times = np.asarray(times, float)
    assert times[0] == 0.0  # odeint starts at the first output time
    c = rate * psi
    if c == 0.0:
        return np.full(times.shape, big_f(0.0))
    tau, info = odeint(
        lambda y, t: [c * (big_f(y[0]) - lam)],
        [0.0],
        times,
        Dfun=lambda y, t: [[c * big_df(y[0])]],
        rtol=rtol,
        atol=rtol / max(l1, l2),  # τ moves by ~1/λ+ while f changes by O(Λ)
        mxstep=100_000,
        full_output=True,
    )
    assert info["message"] == "Integration successful.", info["message"]
    return np.array([big_f(x) for x in tau[:, 0]])


def logistic_naive(times, lam, kappa, a, f00):
    """f⁰(t) = Λ / (1 + (Λ/f⁰(0) − 1) e^{−2aΛt})."""
    return lam / (1.0 + (lam / f00 - 1.0) * np.exp(-2.0 * a * lam * np.asarray(times, float)))


def riccati_naive(times, lam, kappa, a, g0, h0):
    """Spec section 4 general Riccati solution, typed in literally (no log space)."""
    p0 = (g0 + h0) ** 2
    sig = (g0**2 - h0**2) ** 2
    R = np.sqrt(4 * lam**2 + kappa**2 * sig)
    pp = (2 * lam + R) / kappa
    pm = (2 * lam - R) / kappa
    K = (p0 - pp) / (p0 - pm)
    E = K * np.exp(-a * R * np.asarray(times, float))
    return (lam * (pp + pm * E**2) + kappa * sig * E) / ((1 - E) * (pp - pm * E))


def loss_test_naive(times, lam, psi, rate, wtest, init_scale, chunk=4096):
    """L_test(t) = Σ_s wtest (f⁰_s − Λ_s)²/2, balanced init, numpy-vectorised per chunk."""
    times = np.asarray(times, float)
    out = np.zeros(times.shape[0])
    for lo in range(0, lam.shape[0], chunk):
        lm = lam[lo : lo + chunk, None]
        kap = psi[lo : lo + chunk, None] * (1.0 + lm * lm)
        a = rate[lo : lo + chunk, None] * kap
        f00 = kap * init_scale**2
        f = lm / (1.0 + (lm / f00 - 1.0) * np.exp(-2.0 * a * lm * times[None, :]))
        out += 0.5 * (wtest[lo : lo + chunk, None] * (f - lm) ** 2).sum(axis=0)
    return out
