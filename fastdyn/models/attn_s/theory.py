"""Population theory of rank-R ATTN_S (spec §4): the rank-one scalar ODE (paper Eq. 21),
plateau losses, PCR predictors and plateau durations. Time in units of τ."""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from ..attn_m.theory import loss_star, pcr_predictor, plateau_losses, shrink

__all__ = [
    "loss_star",
    "pcr_predictor",
    "plateau_losses",
    "rank_one_rhs",
    "rank_one_ode",
    "plateau_duration_s",
    "plateau_steps",
]


def rank_one_rhs(v: float, lam: float, trace: float, N: float, kappa: float = 1.0) -> float:
    """Eq. 21 on the ansatz v = |k| = |q|, k ∥ q ∥ e (eigenvalue λ):
    τ v̇ = κ λ² v² − κ² λ³ (1 + (1 + trΛ/λ)/N) v⁵ (κ = N/ρ; κ = 1 is the paper's equation)."""
    c = 1.0 + (1.0 + trace / lam) / N
    return kappa * lam * lam * v * v - kappa * kappa * lam**3 * c * v**5


def rank_one_ode(
    t: np.ndarray,
    v0: float,
    lam: float,
    trace: float,
    N: float,
    kappa: float = 1.0,
    rtol: float = 1e-12,
    atol: float = 1e-15,
) -> np.ndarray:
    """v(t) solving Eq. 21 from v(0) = v0 (DOP853, rtol 1e-12), on the increasing times ``t``."""
    t = np.asarray(t, dtype=np.float64)
    sol = solve_ivp(
        lambda _t, y: [rank_one_rhs(y[0], lam, trace, N, kappa)],
        (0.0, float(t[-1])), [v0], method="DOP853", t_eval=t, rtol=rtol, atol=atol,
    )  # fmt: skip
    return sol.y[0]


def rank_one_fixed_point(lam: float, trace: float, N: float, kappa: float = 1.0) -> float:
    """v* with κλ²v² = κ²λ³ c v⁵: v*³ = 1/(κ λ c)."""
    c = 1.0 + (1.0 + trace / lam) / N
    return float((1.0 / (kappa * lam * c)) ** (1.0 / 3.0))


def plateau_duration_s(lam: float, v0: float, kappa: float = 1.0) -> float:
    """≈ τ/(κ λ² v_0): the blow-up time of τ v̇ = κλ²v² (power law in 1/v_0)."""
    return 1.0 / (kappa * lam * lam * v0)


def plateau_steps(eigvals: np.ndarray, R: int = 1) -> list[int]:
    """The m at which long plateaus occur for rank R: multiples of R (D = 8, R = 2: 0, 2, 4, 6)."""
    D = len(eigvals)
    return [m for m in range(D) if m % R == 0]


__all__ += ["rank_one_fixed_point", "shrink"]
