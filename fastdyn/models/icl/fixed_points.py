"""Fixed points of the population loss of reduced ATTN_M and rank-one ATTN_S (spec icl.md §4),
built as weight vectors θ of the models and checked with the models' own population gradient.

Write the predictor as ŷ = κ βᵀ Γ x_q (κ = N/ρ; paper units κ = 1) and work in the eigenbasis
e_1..e_D of Λ (eigenvalues decreasing). The population loss in Γ is the quadratic

    L(Γ) = tr Λ − 2κ tr(ΓΛ²) + κ² tr(Γᵀ E[Λ̂²] Γ Λ),   E[Λ̂²] = Λ² + (Λ + tr Λ I) Λ / N,

whose Hessian E[Λ̂²] ⊗ Λ is positive definite: L is strictly convex in Γ, and its only stationary
point is Γ* = (Λ + (Λ + trΛ I)/N)⁻¹/κ. Both models follow θ̇ ∝ −∇_θ L = −(∂Γ/∂θ)ᵀ ∇_Γ L with
∇_Γ L = −2G, G = mat(c − C vecΓ) (docs/theory.md, ICL), so θ is a fixed point iff G is orthogonal to every
direction ∂Γ/∂θ_j in which the parametrisation can move Γ.

ATTN_M (Γ = Σ_i v_i U_i): ∂L/∂U_i = −2 v_i G and ∂L/∂v_i = −2⟨U_i, G⟩. A fixed point has either
every v_i = 0 — then Γ = 0, the saddle M_0 (U_i ⟂ G(0) = κΛ²) — or some v_i ≠ 0, and then G = 0,
i.e. Γ = Γ* (unique, by strict convexity): the global minimum. One head already realises every
Γ (v = 1, U = Γ), so no other Γ can be stationary: **two** fixed-point values of Γ, not 2^D.
In particular Γ(S) (below) for S ≠ ∅, all is *not* a fixed point: G(Γ(S)) = κ Σ_{d∉S} λ_d² e_d e_dᵀ
≠ 0, and ∂L/∂U_i = −2 v_i G ≠ 0 for any head carrying Γ(S).

ATTN_S rank one (Γ = Σ_i v_i k_i q_iᵀ): ∂L/∂v_i = −2 k_iᵀ G q_i, ∂L/∂k_i = −2 v_i G q_i,
∂L/∂q_i = −2 v_i Gᵀ k_i. A head can only move Γ within its own row/column span, so G need only
vanish on the heads' directions. For every subset S of eigen-directions, head d ∈ S carrying
v = |k| = |q| = a_d with k = q = a_d e_d gives

    Γ(S) = Σ_{d∈S} a_d³ e_d e_dᵀ,   κ a_d³ = λ_d⁻¹ (1 + (1 + trΛ/λ_d)/N)⁻¹,

at which G = κ Σ_{d∉S} λ_d² e_d e_dᵀ: G q_d = Gᵀ k_d = 0 and k_dᵀ G q_d = 0 for d ∈ S, and the
remaining heads are zero (each gradient entry of a zero head is a product of two of its zero
weights). So all 2^D sets M(S) are fixed points (up to head permutations and the sign flips
(v, k, q) → (v, −k, −q) that leave Γ unchanged; the paper counts the 2^D Γ(S)), with loss
L(M(S)) = tr Λ − Σ_{d∈S} λ_d/(1 + (1 + trΛ/λ_d)/N); S = {1..m} is the plateau M_m. The rank-one
constraint is what makes the intermediate Γ(S) stationary for ATTN_S and not for ATTN_M.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .attn_m import AttnM
from .attn_m.theory import shrink
from .attn_s import AttnS

MODELS = ("attn-m", "attn-s")
#: ‖∇L‖ at or below this is called a fixed point (the constructed M(S) reach ~1e-16; accepted up to 1e-12)
FIXED_TOL = 1e-12


@dataclass
class FixedPoint:
    """One constructed point: the subset S (0-based eigen-directions, eigenvalues decreasing)."""

    subset: tuple[int, ...]
    theta: np.ndarray
    Gamma: np.ndarray  # paper units (κ Γ_model), original coordinates
    loss: float
    grad_norm: float

    @property
    def is_fixed(self) -> bool:
        return self.grad_norm <= FIXED_TOL


def gamma_subset(eigvals: np.ndarray, eigvecs: np.ndarray, N: float, S) -> np.ndarray:
    """Γ(S) = Σ_{d∈S} λ_d⁻¹ (1 + (1 + trΛ/λ_d)/N)⁻¹ e_d e_dᵀ (paper units; S indexes the
    columns of ``eigvecs``)."""
    g = 1.0 / shrink(eigvals, N)
    E = np.asarray(eigvecs)[:, list(S)]
    return (E * g[list(S)]) @ E.T


def build_model(name: str, D: int, N: int, H: int, attention_scale: str = "N"):
    """The reduced population model (``attn-m`` or rank-one ``attn-s``)."""
    if name == "attn-m":
        return AttnM(D, H, N, attention_scale=attention_scale, reduced=True)
    if name == "attn-s":
        if H < D:
            raise ValueError(f"--heads: attn-s needs H ≥ D = {D} (one head per direction), got {H}")
        return AttnS(D, H, N, R=1, attention_scale=attention_scale, reduced=True)
    raise ValueError(f"--model: one of {', '.join(MODELS)}, got {name!r}")


def theta_for_gamma(model, Gamma_model: np.ndarray, eigvecs: np.ndarray, S) -> np.ndarray:
    """Weights realising Γ (model units, Γ = Σ_i v_i U_i or Σ_i v_i k_i q_iᵀ).

    ATTN_M: Γ spread evenly over the H heads, balanced: v_i = a, U_i = Γ/(H a), a = (‖Γ‖_F/H)^½
    (so ‖U_i‖_F = |v_i|); Γ = 0 gives θ = 0. ATTN_S: head j carries the j-th direction d of S with
    v = |k| = |q| = (e_dᵀ Γ e_d)^{1/3}, k = q ∥ e_d (Γ must be diagonal in the eigenbasis on S)."""
    D, H = model.D, model.H
    theta = np.zeros(model.n_params)
    if model.name == "attn-m":
        r, W = model.views(theta)
        nrm = float(np.linalg.norm(Gamma_model))
        if nrm > 0:
            a = np.sqrt(nrm / H)
            r[:, D] = a
            W[:, :D, :] = Gamma_model / (H * a)
        return theta
    r, K, Q = model.views(theta)
    for j, d in enumerate(S):
        e = eigvecs[:, d]
        a = float(np.cbrt(e @ Gamma_model @ e))
        r[j, D] = a
        K[j, 0, :D] = a * e
        Q[j, 0, :] = a * e
    return theta


def fixed_points(
    name: str,
    eigvals: np.ndarray,
    eigvecs: np.ndarray,
    N: int,
    H: int | None = None,
    attention_scale: str = "N",
) -> list[FixedPoint]:
    """Γ(S) built as θ for every subset S of eigen-directions (eigenvalues sorted decreasing;
    subsets ordered by size, then lexicographically), with L(θ) and ‖∇_θ L‖ from the model's own
    reduced population gradient (``loss_and_grad`` on ``prepare_population``)."""
    lam = np.asarray(eigvals, dtype=np.float64)
    order = np.argsort(lam)[::-1]
    lam, vecs = lam[order], np.asarray(eigvecs, dtype=np.float64)[:, order]
    D = lam.size
    model = build_model(name, D, N, D if H is None else H, attention_scale)
    prep = model.prepare_population(lam, vecs)
    grad = np.empty(model.n_params)
    out = []
    for m in range(D + 1):
        for S in itertools.combinations(range(D), m):
            G = gamma_subset(lam, vecs, N, S)
            theta = theta_for_gamma(model, G / model.kappa, vecs, S)
            L = model.loss_and_grad(theta, prep, grad)
            gam = model.kappa * model.gamma(theta)
            out.append(FixedPoint(S, theta, gam, L, float(np.linalg.norm(grad))))
    return out
