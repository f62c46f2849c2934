"""Population theory of ATTN_M (docs/theory.md, ICL, paper units ρ = N unless κ = N/ρ is given).

All quantities are in the eigenbasis of Λ unless a matrix is asked for; time ``t`` is in units of
τ (τ dW/dt = −½ ∂L/∂W; one GD step with rate η advances t/τ by 2η).
"""

from __future__ import annotations

import numpy as np

from ..problem import expected_lhat2

__all__ = [
    "expected_lhat2",
    "gamma_star",
    "loss_star",
    "plateau_losses",
    "pcr_predictor",
    "eq10_sigma",
    "eq10_a0_random",
    "plateau_duration_m",
]


def gamma_star(
    eigvals: np.ndarray, eigvecs: np.ndarray, N: float, kappa: float = 1.0
) -> np.ndarray:
    """Γ* = (Λ + (Λ + tr(Λ) I)/N)⁻¹ / κ (D, D): the global minimum of ŷ = κ βᵀ Γ x_q."""
    lam = np.asarray(eigvals, dtype=np.float64)
    g = 1.0 / (lam + (lam + lam.sum()) / N)
    return (eigvecs * g) @ eigvecs.T / kappa


def shrink(eigvals: np.ndarray, N: float) -> np.ndarray:
    """λ_d (1 + (1 + trΛ/λ_d)/N): the eigenvalues of E[Λ̂²] Λ⁻¹."""
    lam = np.asarray(eigvals, dtype=np.float64)
    return lam * (1.0 + (1.0 + lam.sum() / lam) / N)


def loss_star(eigvals: np.ndarray, N: float) -> float:
    """L* = tr Λ − Σ_d λ_d / (1 + (1 + trΛ/λ_d)/N)."""
    lam = np.asarray(eigvals, dtype=np.float64)
    return float(lam.sum() - np.sum(lam / (1.0 + (1.0 + lam.sum() / lam) / N)))


def plateau_losses(eigvals: np.ndarray, N: float) -> np.ndarray:
    """L(M_m), m = 0..D: tr Λ − Σ_{d≤m} λ_d / (1 + (1 + trΛ/λ_d)/N), eigenvalues taken in
    decreasing order (D = 4, λ = .4,.3,.2,.1, N = 31: 1, 0.64058, 0.37737, 0.20980, 0.13600)."""
    lam = np.sort(np.asarray(eigvals, dtype=np.float64))[::-1]
    gain = lam / (1.0 + (1.0 + lam.sum() / lam) / N)
    return lam.sum() - np.concatenate([[0.0], np.cumsum(gain)])


def pcr_predictor(eigvals: np.ndarray, eigvecs: np.ndarray, N: float, m: int) -> np.ndarray:
    """Γ at M_m (principal component regression on the top m components, paper units):
    Σ_{d≤m} λ_d⁻¹ (1 + (1 + trΛ/λ_d)/N)⁻¹ e_d e_dᵀ (eigenvalues in decreasing order)."""
    lam = np.asarray(eigvals, dtype=np.float64)
    order = np.argsort(lam)[::-1][:m]
    g = 1.0 / shrink(lam, N)
    E = eigvecs[:, order]
    return (E * g[order]) @ E.T


def eq10_sigma(
    t: np.ndarray, s: float, D: int, N: float, a0: float, kappa: float = 1.0
) -> np.ndarray:
    """Paper Eq. 10 generalised to Λ = sI and κ = N/ρ: ŷ(t) = σ(t) βᵀ x_q with

        σ(t) = e^{2St} / [s c (e^{2St} − 1) + √D/(κ a_0)],   S = κ s² √D,  c = 1 + (1+D)/N,

    a_0 = Σ_i v_i ⟨U_i, I/√D⟩ at t = 0 (exact gradient flow for balanced, aligned heads
    U_i = u_i I/√D with u_i = v_i; ≈ H·init²/2 for i.i.d. small init). t in units of τ."""
    t = np.asarray(t, dtype=np.float64)
    S = kappa * s * s * np.sqrt(D)
    c = 1.0 + (1.0 + D) / N
    em = np.exp(-2.0 * S * t)  # written with e^{−2St} so that large t does not overflow
    return 1.0 / (s * c * (1.0 - em) + np.sqrt(D) / (kappa * a0) * em)


def eq10_a0_random(H: int, init: float) -> float:
    """a_0 ≈ H·init²/2 for H heads of i.i.d. N(0, init²) weights (docs/theory.md, ICL, within ~3%)."""
    return 0.5 * H * init * init


def eq10_loss(sigma: np.ndarray, s: float, D: int, N: float) -> np.ndarray:
    """Population loss of ŷ = σ βᵀ x_q at Λ = sI: D s − 2 σ D s² + σ² D s³ c, c = 1 + (1+D)/N."""
    c = 1.0 + (1.0 + D) / N
    sigma = np.asarray(sigma, dtype=np.float64)
    return D * s - 2.0 * sigma * D * s * s + sigma**2 * D * s**3 * c


def plateau_duration_m(s: float, D: int, a0: float, kappa: float = 1.0, N: float = np.inf) -> float:
    """Eq. 10's half-rise time t_½ (units of τ): σ(t_½) = σ(∞)/2, σ(∞) = 1/(s c);
    t_½ = ln(√D/(κ a_0 s c) − 1) / (2S) ≈ ln(1/a_0)/(2S) — logarithmic in 1/init."""
    S = kappa * s * s * np.sqrt(D)
    c = 1.0 + (1.0 + D) / N
    return float(np.log(np.sqrt(D) / (kappa * a0 * s * c) - 1.0) / (2.0 * S))
