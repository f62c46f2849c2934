"""Slow, readable dense numpy reference of msfr-attn: the actual token matrices Z.

Token coordinates as in :mod:`fastdyn.models.msfr_attn.kernels` (block: x-slot 2c, label 2s+1;
shared: x-slot c, label D). Sequence of task s (0-based): columns z_t = (φ_t, y_t) with
φ_t[c] = x_t if c = s else scale[(c − s) mod D]·noise[t, c] (0 without noise), y_t = Λ_s x_t for
context tokens and 0 for the query (last column). ŷ = v · Z Zᵀ · W_KQ · z_q or v · Z softmax(Zᵀ W z_q),
W_KQ = W or W_Kᵀ W_Q; loss = mean over sequences of (ŷ − Λ_s x_q)²/2. Tasks s ≥ D have no
coordinates in the model (sparse data only): Z = 0, ŷ = 0.
"""

from __future__ import annotations

import numpy as np


def token_matrix(data, n: int, d: int, shared: bool) -> np.ndarray:
    """Z of sequence n, shape (d_tok, ψ_s + 1), in the model's coordinates."""
    s = int(data.task[n])
    a, b = int(data.offset[n]), int(data.offset[n + 1])
    dt = d + 1 if shared else 2 * d
    Z = np.zeros((dt, b - a))
    if s >= d:
        return Z
    lab = d if shared else 2 * s + 1
    for t in range(b - a):
        x = float(data.x[a + t])
        for c in range(d):
            if c == s:
                phi = x
            elif data.dense:
                phi = data.scale[(c - s) % d] * float(data.noise[a + t, c])
            else:
                phi = 0.0
            Z[c if shared else 2 * c, t] = phi
        if t < b - a - 1:
            Z[lab, t] = data.lam[s] * x
    return Z


def predict(Z: np.ndarray, v: np.ndarray, W: np.ndarray, softmax: bool) -> float:
    zq = Z[:, -1]
    if softmax:
        sc = Z.T @ W @ zq
        p = np.exp(sc - sc.max())
        p /= p.sum()
        return float(v @ Z @ p)
    return float(v @ Z @ Z.T @ W @ zq)


def loss(data, weights: dict, d: int, shared: bool, softmax: bool) -> float:
    """Mean squared-error loss/2 of the dense model over all sequences of ``data``."""
    W = weights["W"] if "W" in weights else weights["WK"].T @ weights["WQ"]
    tot = 0.0
    for n in range(data.n):
        Z = token_matrix(data, n, d, shared)
        q = float(data.x[int(data.offset[n + 1]) - 1])
        yq = data.lam[int(data.task[n])] * q
        tot += 0.5 * (predict(Z, weights["v"], W, softmax) - yq) ** 2
    return tot / data.n
