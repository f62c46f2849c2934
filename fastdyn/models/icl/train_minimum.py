"""The minimum of the train loss over a finite train set, for linear attention (spec icl.md §2–3).

Linear attention (ATTN_M, ATTN_S, the last-token loss) predicts

    ŷ_μ = (1/ρ) Σ_{a,b ≤ D} Σ_{c < D} S_μ,ab M_abc x_μq,c,    S_μ = Σ_{j=1}^{N+1} x̂_j x̂_jᵀ,

with the folded parameter tensor M_abc = Σ_i r_ia W_i,bc (ATTN_M: W_i = W^KQ_i[:, :D]; ATTN_S:
W_i = (W^K_iᵀ W^Q_i)[:, :D]) and the query's label entry zero in S_μ. ŷ is linear in M, and S_μ is
symmetric, so with the features φ_μ = (S_μ,ab x_μq,c) over a ≤ b and c (D (D+1)(D+2)/2 of them) and
the matching coefficients m_abc = (M_abc + M_bac)/ρ (a < b), M_aac/ρ, the train loss

    L(M) = (1/P) Σ_μ (y_μ − φ_μᵀ m)²

is a quadratic in m, and its minimum over the train set is a linear least-squares problem:

    L_P = min_m (1/P) |y − Φ m|²,   Φ = (φ_1 … φ_P)ᵀ,   y = (y_1,q … y_P,q).

With the in-weight blocks held at zero (``ic_only``, ``reduced``) and for mlp-cubic, ŷ_μ = κ β_μᵀ Γ
x_μq: the features are the D² entries of β_μ x_μqᵀ (β = (1/N) Σ_n y_n x_n), m = κ vec Γ.

L_P is a lower bound of the train loss of every weight setting, reached by gradient descent from a
small init where the model can represent every m (:func:`spans`): ATTN_M with H ≥ D+1 heads (any H
≥ 1 with ``ic_only``), mlp-cubic, ATTN_S with H·R ≥ D (``ic_only``) or H ≥ D+1 and R ≥ D. It sits
below the population minimum L* by the finite-sample fit of the train set (a train set of P = 5000
sequences has mean y_q² ≈ 0.95, not 1). Defined for finite data, linear attention and the
last-token loss; None otherwise, and for sets of more than :data:`MAX_ENTRIES` feature entries
that do not train from their moments (:func:`from_moments` needs no Φ).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: largest P × (number of features) that is solved (float64: 240 MB for Φ)
MAX_ENTRIES = 30_000_000

#: largest condition number λ_max/λ_min of G = ΦᵀΦ that is solved from the moments; a worse G
#: goes to ``lstsq`` on Φ (its error, ~1e-16·cond(G) in m, would stay second order in L_P, but
#: directions below ~1e-16·λ_max are round-off of G itself)
MOMENT_COND_MAX = 1e10


def features(model: Any, tokens: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Φ (P, n_features): the per-sequence features of the model's class (module docstring)."""
    D, N = model.D, model.N
    xq = tokens[:, N, :D]
    if model.ic_only or model.name == "mlp-cubic":
        beta = np.einsum("pn,pnd->pd", labels[:, :N], tokens[:, :N, :D]) / N
        return (beta[:, :, None] * xq[:, None, :]).reshape(len(xq), D * D)
    S = np.einsum("pja,pjb->pab", tokens, tokens)
    a, b = np.triu_indices(D + 1)
    return (S[:, a, b][:, :, None] * xq[:, None, :]).reshape(len(xq), -1)


def spans(model: Any) -> bool:
    """Whether the model's weights reach every coefficient vector m (then L_P is its minimum)."""
    D, H, R = model.D, model.H, getattr(model, "R", None)
    if model.name == "mlp-cubic" or (model.name == "attn-m" and model.ic_only):
        return H >= 1
    if model.name == "attn-m":
        return H >= D + 1
    if model.ic_only:
        return H * R >= D
    return H >= D + 1 and R >= D


def from_moments(
    G: np.ndarray, b: np.ndarray, SpT: np.ndarray, xqT: np.ndarray, y: np.ndarray
) -> float | None:
    """L_P from the set's moments G = ΦᵀΦ and b = Φᵀy (the training kernels' ``full_moments``:
    φ_q = S_p x_c, q = p·D + c, the order of :func:`features`): m solves G m = b (``eigh``), and
    the residual y − Φm is summed over the rows (SpT (NP, P), xqT (D, P)), not taken as
    y² − bᵀm, which would lose the digits of a small minimum to cancellation. An error δ in m
    raises the sum only by δᵀGδ (second order). None where cond(G) > :data:`MOMENT_COND_MAX`."""
    lam, V = np.linalg.eigh(G)
    if not lam[0] > lam[-1] / MOMENT_COND_MAX:
        return None
    m = (V @ ((V.T @ b) / lam)).reshape(SpT.shape[0], xqT.shape[0])
    r = y - np.einsum("pm,pm->m", SpT, m @ xqT)
    return float(r @ r / len(y))


def train_set_minimum(
    model: Any, tokens: np.ndarray, labels: np.ndarray, moments: tuple | None = None
) -> float | None:
    """L_P = min_m (1/P) |y − Φ m|² on the train set (``tokens`` (P, N+1, D+1) with the query's
    label zero, ``labels`` (P, N+1), the query's target last): from ``moments`` = (G, b, SpT,
    xqT, y) of the full features where given (:func:`from_moments`), else by
    ``numpy.linalg.lstsq`` on Φ; None where it is not defined (softmax, cumulative loss), or
    where Φ would be too large (:data:`MAX_ENTRIES`) and no moments serve."""
    if getattr(model, "softmax", False) or model.loss != "last":
        return None
    if moments is not None and not (model.ic_only or model.name == "mlp-cubic"):
        got = from_moments(*moments)
        if got is not None:
            return got
    D, P = model.D, tokens.shape[0]
    n = D * D if (model.ic_only or model.name == "mlp-cubic") else D * (D + 1) * (D + 2) // 2
    if P * n > MAX_ENTRIES:
        return None
    F = features(model, np.asarray(tokens, float), np.asarray(labels, float))
    y = np.asarray(labels, float)[:, model.N]
    coef, *_ = np.linalg.lstsq(F, y, rcond=None)
    r = y - F @ coef
    return float(r @ r / P)
