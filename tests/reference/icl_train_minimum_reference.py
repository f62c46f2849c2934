"""A naive numpy reference of the finite-train-set minimum of linear attention's last-token loss.

Written straight from the matrix form of the prediction, independently of fastdyn's kernels and
of ``fastdyn.models.icl.train_minimum``: for each sequence μ, X_μ (D+1, N+1) holds the tokens as
columns (the query's label zero), and

    ŷ_μ = (1/ρ) Σ_i r_iᵀ X Xᵀ W_i x̂_q = Σ_{a,b,c} (X Xᵀ)_ab x_q,c · T_abc,   T_abc = Σ_i r_ia W_i,bc / ρ,

linear in the full (D+1) × (D+1) × D tensor T (no symmetry used: the feature matrix is rank
deficient, and the pseudo-inverse picks one minimiser; the minimum is the same). With the
in-weight blocks at zero only r_iD and W_i[:D, :D] are free: ŷ = Σ_{a,c} (Σ_n y_n x_n,a) x_q,c ·
T'_ac, linear in the D × D tensor T'. The minimum of (1/P) Σ_μ (y_μ − ŷ_μ)² over T is found from
the normal equations with ``numpy.linalg.pinv``.
"""

from __future__ import annotations

import numpy as np


def _columns(tokens: np.ndarray, labels: np.ndarray, mu: int) -> np.ndarray:
    """X_μ (D+1, N+1): token j as column j, the query's label zero."""
    N = tokens.shape[1] - 1
    X = tokens[mu].T.copy()
    X[-1, :N] = labels[mu, :N]
    X[-1, N] = 0.0
    return X


def train_minimum(tokens: np.ndarray, labels: np.ndarray, in_context_only: bool) -> float:
    """min over T of the mean squared query error on (tokens, labels)."""
    P, T1, D1 = tokens.shape
    N, D = T1 - 1, D1 - 1
    rows = []
    for mu in range(P):
        X = _columns(tokens, labels, mu)
        xq = X[:D, N]
        if in_context_only:
            b = X[:D, :N] @ X[D, :N]  # Σ_n y_n x_n
            rows.append([b[a] * xq[c] for a in range(D) for c in range(D)])
        else:
            S = X @ X.T
            rows.append([S[a, b] * xq[c] for a in range(D1) for b in range(D1) for c in range(D)])
    F = np.array(rows)
    y = labels[:, N]
    coef = np.linalg.pinv(F.T @ F) @ (F.T @ y)
    r = y - F @ coef
    return float(np.mean(r * r))
