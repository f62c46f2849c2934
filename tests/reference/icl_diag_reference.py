"""Naive numpy versions of the ICL streamed diagnostics (issue 19), from the paper-layout weights
alone (no fastdyn import): each head's function Γ_i (its contribution to Γ = Σ_i Γ_i, the x-block
of v_i W^KQ_i or v_i W^K_iᵀ W^Q_i), their pairwise cosines, and the in-weight norms |𝐯_i|, |𝐮_i|."""

from __future__ import annotations

import math

import numpy as np


def head_functions(arrays: dict) -> list[np.ndarray]:
    """Γ_i (D, D) per head from W_V and W_KQ, or W_V, W_K, W_Q, or W1, w2 (one save)."""
    if "W1" in arrays:
        W1, w2 = arrays["W1"], arrays["w2"]
        D = math.isqrt(W1.shape[1])
        return [w2[i] * W1[i].reshape(D, D) for i in range(len(w2))]
    WV = arrays["W_V"]
    H, D = WV.shape[0], WV.shape[1] - 1
    out = []
    for i in range(H):
        KQ = arrays["W_KQ"][i] if "W_KQ" in arrays else arrays["W_K"][i].T @ arrays["W_Q"][i]
        out.append(WV[i, D, D] * KQ[:D, :D])  # v_i times the x-block of the key-query product
    return out


def cosine_matrix(gammas: list[np.ndarray]) -> np.ndarray:
    """cos(vec Γ_i, vec Γ_j) by the textbook formula, pair by pair (NaN for a zero head)."""
    H = len(gammas)
    c = np.full((H, H), np.nan)
    for i in range(H):
        for j in range(H):
            a, b = gammas[i].ravel(), gammas[j].ravel()
            na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
            if na > 0 and nb > 0:
                c[i, j] = sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)
    return c


def in_weight_norms(arrays: dict) -> tuple[np.ndarray, np.ndarray]:
    """|𝐯_i| = |W^V_i[D, :D]| and |𝐮_i| = |W^KQ_i[D, :D]| (ATTN_M) or |W^K_i[:, D]| (ATTN_S)."""
    WV = arrays["W_V"]
    D = WV.shape[1] - 1
    v = np.array([math.sqrt(sum(x * x for x in WV[i, D, :D])) for i in range(WV.shape[0])])
    if "W_KQ" in arrays:
        u_blocks = [arrays["W_KQ"][i, D, :D] for i in range(WV.shape[0])]
    else:
        u_blocks = [arrays["W_K"][i, :, D] for i in range(WV.shape[0])]
    u = np.array([math.sqrt(sum(x * x for x in b)) for b in u_blocks])
    return v, u
