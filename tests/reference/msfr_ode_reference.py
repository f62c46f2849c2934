"""Slow, readable numpy/scipy reference of the MSFR per-task gradient flow (spec/msfr.md §2–3).

H = ψ u uᵀ + q e eᵀ,  u = (1, Λ), e = (1, 0),  f = vᵀ H w,  r = f − Λ
dv/dt = −rate · r · H w,   dw/dt = −rate · r · H v
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp


def h_matrix(lam: float, psi: float, query: bool = True) -> np.ndarray:
    """H = ψ u uᵀ + q e eᵀ as a 2×2 matrix."""
    u = np.array([1.0, lam])
    e = np.array([1.0, 0.0])
    return psi * np.outer(u, u) + (1.0 if query else 0.0) * np.outer(e, e)


def rhs(y: np.ndarray, lam: float, psi: float, rate: float, query: bool = True) -> np.ndarray:
    """d(v, w)/dt of one task, y = (v_x, v_y, w_x, w_y)."""
    h = h_matrix(lam, psi, query)
    v, w = y[:2], y[2:]
    r = v @ h @ w - lam
    return np.concatenate([-rate * r * (h @ w), -rate * r * (h @ v)])


def f_of(y: np.ndarray, lam: float, psi: float, query: bool = True) -> float:
    """f = vᵀ H w."""
    return float(y[:2] @ h_matrix(lam, psi, query) @ y[2:])


def solve(
    lam: float,
    psi: float,
    rate: float,
    y0: np.ndarray,
    times: np.ndarray,
    query: bool = True,
    rtol: float = 1e-13,
) -> tuple[np.ndarray, np.ndarray]:
    """(f(t_j), y(t_j)) by scipy DOP853 at rtol (default 1e-13), atol 1e-16·(weight scale)."""
    times = np.asarray(times, dtype=np.float64)
    scale = max(
        np.sqrt(abs(lam) / np.linalg.eigvalsh(h_matrix(lam, psi, query)).max()), np.abs(y0).max()
    )
    sol = solve_ivp(
        lambda t, y: rhs(y, lam, psi, rate, query),
        (0.0, float(times[-1])),
        np.asarray(y0, dtype=np.float64),
        method="DOP853",
        t_eval=times,
        rtol=rtol,
        atol=1e-16 * scale,
    )
    assert sol.success, sol.message
    ys = sol.y.T
    return np.array([f_of(y, lam, psi, query) for y in ys]), ys


def gd(
    lam: float,
    psi: float,
    rate: float,
    y0: np.ndarray,
    eta: float,
    n_steps: int,
    query: bool = True,
) -> np.ndarray:
    """n_steps of gradient descent y ← y + η·rhs(y) (v and w simultaneously); returns y."""
    y = np.array(y0, dtype=np.float64)
    for _ in range(n_steps):
        y = y + eta * rhs(y, lam, psi, rate, query)
    return y


def rk4(
    lam: float, psi: float, rate: float, y0: np.ndarray, h: float, n: int, query: bool = True
) -> np.ndarray:
    """n classical RK4 steps of size h of :func:`rhs` (textbook form, k_i evaluated in full)."""
    y = np.array(y0, dtype=float)
    for _ in range(n):
        k1 = rhs(y, lam, psi, rate, query)
        k2 = rhs(y + 0.5 * h * k1, lam, psi, rate, query)
        k3 = rhs(y + 0.5 * h * k2, lam, psi, rate, query)
        k4 = rhs(y + h * k3, lam, psi, rate, query)
        y = y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y
