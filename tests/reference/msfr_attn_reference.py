"""Slow, readable dense numpy reference of msfr-attn: the actual token matrices Z.

Token coordinates as in :mod:`fastdyn.models.msfr_attn.kernels` (block: x-slot 2c, label 2s+1;
shared: x-slot c, label D). Sequence of task s (0-based): columns z_t = (φ_t, y_t) with
φ_t[c] = x_t if c = s else scale[(c − s) mod N_s]·noise[t, c] (0 without noise), y_t = Λ_s x_t for
context tokens and 0 for the query (last column). ŷ = v · Z Zᵀ · W_KQ · z_q or v · Z softmax(Zᵀ W z_q),
W_KQ = W or W_Kᵀ W_Q; loss = mean over sequences of (ŷ − Λ_s x_q)²/2. Tasks s ≥ D have no own
coordinate and no label slot in the model: sparse data give Z = 0, ŷ = 0; dense data (D ≤ N_s) give
Z with the visible coordinates c < D of the noise only.

The dense φ is built here from the source/capacity definition itself (:func:`features`: the full
N_s-wide φ of each token from the task's covariance diag(ω_{k_s(c)}), then cut to c < D), not from
the kernel's indexing.
"""

from __future__ import annotations

import numpy as np


def features(data, n: int) -> np.ndarray:
    """The full N_s-wide features φ of sequence n's tokens, shape (ψ_s + 1, N_s): x on the task's
    own coordinate; on coordinate c ≠ s the stored N(0, 1) draw times the standard deviation of the
    task's covariance there, √ω_k, k = 1 + ((c − s) mod N_s), ω_k = k^-τ (source/capacity) or
    ω_k = σ² (feature noise); 0 without dense features."""
    s = int(data.task[n])
    a, b = int(data.offset[n]), int(data.offset[n + 1])
    ns = data.n_tasks
    phi = np.zeros((b - a, ns))
    if data.dense:
        k = 1 + (np.arange(ns) - s) % ns
        sd = np.array([data.scale[kk - 1] for kk in k])  # scale[k − 1] = √ω_k
        phi[:] = data.noise[a:b].astype(np.float64) * sd[None, :]
    phi[:, s] = data.x[a:b].astype(np.float64)
    return phi


def token_matrix(data, n: int, d: int, shared: bool) -> np.ndarray:
    """Z of sequence n, shape (d_tok, ψ_s + 1), in the model's coordinates."""
    s = int(data.task[n])
    a, b = int(data.offset[n]), int(data.offset[n + 1])
    dt = d + 1 if shared else 2 * d
    Z = np.zeros((dt, b - a))
    if s >= d and not data.dense:
        return Z
    phi = features(data, n)
    for c in range(d):
        Z[c if shared else 2 * c, :] = phi[:, c]
    if s < d:
        lab = d if shared else 2 * s + 1
        Z[lab, :-1] = data.lam[s] * data.x[a : b - 1].astype(np.float64)
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
