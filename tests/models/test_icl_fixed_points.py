"""Fixed points M(S) of the population loss (spec icl.md §4; issue 19 acceptance 3): built as
weights of reduced ATTN_M / rank-one ATTN_S, checked with the models' population gradient and,
independently, by finite differences of the numpy loss L(Γ) (tests/reference/icl_reference.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fastdyn.models.icl.attn_m.theory import plateau_losses
from fastdyn.models.icl.fixed_points import fixed_points, gamma_subset
from fastdyn.models.icl.problem import rotation, spectrum_eigenvalues
from tests.reference.icl_reference import reduced_loss_at

N = 31
#: central differences of a quadratic in Γ (entries ≤ ~20) at h = 1e-4: no truncation error, round-off
#: ~ ε·L/h ≈ 1e-12 per entry; measured ≤ 2.6e-12 at D = 2, 4, 6
FD_ATOL = 1e-9


def _setup(D):
    lam = spectrum_eigenvalues(D)  # linear: λ ∝ 1..D, tr Λ = 1 (decreasing order)
    Q = rotation(D, 7)
    return lam, Q, (Q * lam) @ Q.T


def _fd_grad(Gamma, Lam):
    """∂L/∂Γ_ab of the numpy reference loss by central differences (D × D)."""
    h = 1e-4
    g = np.empty_like(Gamma)
    for a, b in np.ndindex(*Gamma.shape):
        E = np.zeros_like(Gamma)
        E[a, b] = h
        g[a, b] = (reduced_loss_at(Gamma + E, Lam, N) - reduced_loss_at(Gamma - E, Lam, N)) / (
            2 * h
        )
    return g


@pytest.mark.parametrize("D", [2, 3, 4, 5, 6])
def test_fixed_point_counts_and_gradients(D):
    lam, Q, _ = _setup(D)
    Lm = plateau_losses(lam, N)
    for name in ("attn-m", "attn-s"):
        fps = fixed_points(name, lam, Q, N)
        assert len(fps) == 2**D
        fixed = [f.subset for f in fps if f.grad_norm <= 1e-12]  # acceptance 3 (measured ≤ 1.1e-15)
        if name == "attn-s":
            assert len(fixed) == 2**D  # every M(S)
        else:
            assert fixed == [(), tuple(range(D))]  # the saddle M_0 and Γ*, nothing else
            # Γ(S), S ≠ ∅, all, is not stationary (gradient O(λ_min²), measured ≥ 0.015 at D = 6)
            assert min(f.grad_norm for f in fps if f.subset not in fixed) > 1e-3
        for f in fps:
            if f.subset == tuple(range(len(f.subset))):  # S = top m: the plateau M_m
                assert f.loss == pytest.approx(Lm[len(f.subset)], rel=1e-13, abs=1e-15)


@pytest.mark.parametrize("D", [2, 4, 6])
def test_finite_differences_of_the_numpy_loss(D):
    lam, Q, Lam = _setup(D)
    Lm = plateau_losses(lam, N)
    fps = {f.subset: f for f in fixed_points("attn-s", lam, Q, N)}
    for m in range(D + 1):
        for S in itertools.combinations(range(D), m):
            G = gamma_subset(lam, Q, N, S)
            np.testing.assert_allclose(fps[S].Gamma, G, atol=1e-13)  # the weights realise Γ(S)
            L = reduced_loss_at(G, Lam, N)
            assert L == pytest.approx(fps[S].loss, rel=1e-12)
            if S == tuple(range(m)):
                assert L == pytest.approx(Lm[m], rel=1e-12)
            grad = Q.T @ _fd_grad(G, Lam) @ Q  # in the eigenbasis: ∂L/∂(e_aᵀΓe_b)
            # ATTN_S can move Γ(S) along e_a e_dᵀ and e_d e_aᵀ (d ∈ S, any a): rows and columns d ∈ S
            movable = np.zeros((D, D), dtype=bool)
            movable[list(S), :] = movable[:, list(S)] = True
            assert np.abs(grad[movable]).max(initial=0) < FD_ATOL
            # and the rest is −2λ_d² on the unlearned diagonal (G = Σ_{d∉S} λ_d² e_d e_dᵀ): not zero,
            # so for ATTN_M, which moves Γ in every direction, only S = all is stationary
            rest = [d for d in range(D) if d not in S]
            np.testing.assert_allclose(np.diag(grad)[rest], -2 * lam[rest] ** 2, atol=FD_ATOL)
            off = ~movable & ~np.eye(D, dtype=bool)
            assert np.abs(grad[off]).max(initial=0) < FD_ATOL
