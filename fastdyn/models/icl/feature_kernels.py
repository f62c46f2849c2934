"""Numba kernels for the two-layer linear network on cubic features and the sufficient-statistics
("reduced") path shared by ATTN_M, ATTN_S and MLP (docs/theory.md, ICL).

Feature of sample μ at prefix n (context tokens 1..n, query x_q = x_{n+1}):

    z = (1/ρ_n) vec(Σ_{j≤n} y_j x_j x_qᵀ) = κ_n vec(β_n x_qᵀ),   κ_n = n/ρ_n,   row-major vec,

so that ``ŷ = w_2ᵀ W_1 z = γ·z`` with ``γ = W_1ᵀ w_2 = vec(Σ_i w2_i mat(W1_i))`` (ATTN_M's reduced
form with w2_i = v_i, W1_i = vec(U_i), identical for any ρ). Loss ``L = (1/(P T)) Σ δ²``.
Per-sample gradient, summed over samples in fixed blocks: ``g = Σ_μ δ_μ z_μ``,
``∂L/∂W1_i = −(2/(P T)) w2_i g``, ``∂L/∂w2_i = −(2/(P T)) W1_i·g``.

Sufficient statistics: ``yy = mean(y²)``, ``c = mean(y z)``, ``C = mean(z zᵀ)`` (one O(P D⁴) pass);
then ``L = yy − 2 γ·c + γᵀ C γ`` exactly and ``G = mat(c − C γ)`` gives every reduced gradient.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..._jit import PARALLEL, SERIAL
from ...core.gd import masked_gd_step
from ...reduce import BLOCK, MIN_PARALLEL_BLOCKS, accumulate_blocks, n_blocks


@njit(**SERIAL)
def cubic_features(tokens, labels, scale_n, cumulative, Z, Y):
    """Z[μ, t, :] = z (D²,), Y[μ, t] = target, t over prefixes (t = 0 ↔ n = 1 when cumulative)."""
    P, T1, D1 = tokens.shape
    D = D1 - 1
    N = T1 - 1
    beta = np.empty(D)
    for mu in range(P):
        beta[:] = 0.0
        t = 0
        for n in range(1, N + 1):
            for a in range(D):
                beta[a] += labels[mu, n - 1] * tokens[mu, n - 1, a]
            if cumulative or n == N:
                inv_rho = 1.0 / n if scale_n else 1.0
                for a in range(D):
                    for b in range(D):
                        Z[mu, t, a * D + b] = inv_rho * beta[a] * tokens[mu, n, b]
                Y[mu, t] = labels[mu, n]
                t += 1


@njit(**SERIAL)
def _mlp_block(blk, idx, Z, Y, gam, out):
    K = gam.shape[0]
    T = Z.shape[1]
    lo = blk * BLOCK
    hi = min(lo + BLOCK, idx.shape[0])
    for k in range(lo, hi):
        mu = idx[k]
        for t in range(T):
            yhat = 0.0
            for q in range(K):
                yhat += Z[mu, t, q] * gam[q]
            d = Y[mu, t] - yhat
            out[0] += d * d
            for q in range(K):
                out[1 + q] += d * Z[mu, t, q]


@njit(**PARALLEL)
def mlp_partials(idx, Z, Y, gam, partials):
    """Per-block partials [Σ δ², Σ δ z] of the linear predictor ŷ = γ·z."""
    for blk in prange(partials.shape[0]):
        partials[blk, :] = 0.0
        _mlp_block(np.int64(blk), idx, Z, Y, gam, partials[blk])


@njit(**SERIAL)
def _mlp_partials_here(idx, Z, Y, gam, partials):
    """:func:`mlp_partials` on the calling thread (fewer than ``MIN_PARALLEL_BLOCKS`` blocks)."""
    for blk in range(partials.shape[0]):
        partials[blk, :] = 0.0
        _mlp_block(np.int64(blk), idx, Z, Y, gam, partials[blk])


def linear_feature_loss_and_g(gam: np.ndarray, Z: np.ndarray, Y: np.ndarray, idx: np.ndarray):
    """(L, g) with L = mean δ², g = Σ δ z / (#terms), over the samples ``idx``."""
    K = gam.shape[0]
    partials = np.empty((n_blocks(idx.shape[0]), 1 + K))
    run = mlp_partials if partials.shape[0] >= MIN_PARALLEL_BLOCKS else _mlp_partials_here
    run(idx, Z, Y, gam, partials)
    tot = np.zeros(1 + K)
    accumulate_blocks(tot, partials)
    nterm = idx.shape[0] * Z.shape[1]
    return float(tot[0] / nterm), tot[1:] / nterm


@njit(**SERIAL)
def _stats_block(blk, Z, Y, out):
    K = Z.shape[2]
    T = Z.shape[1]
    lo = blk * BLOCK
    hi = min(lo + BLOCK, Z.shape[0])
    for mu in range(lo, hi):
        for t in range(T):
            y = Y[mu, t]
            out[0] += y * y
            for q in range(K):
                out[1 + q] += y * Z[mu, t, q]
            base = 1 + K
            for q in range(K):
                zq = Z[mu, t, q]
                for s in range(K):
                    out[base + q * K + s] += zq * Z[mu, t, s]


@njit(**PARALLEL)
def stats_partials(Z, Y, partials):
    """Per-block partials [Σ y², Σ y z, Σ z zᵀ]."""
    for blk in prange(partials.shape[0]):
        partials[blk, :] = 0.0
        _stats_block(np.int64(blk), Z, Y, partials[blk])


def sufficient_stats(Z: np.ndarray, Y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(yy, c, C) = (mean y², mean y z, mean z zᵀ) over all samples and prefixes."""
    K = Z.shape[2]
    partials = np.empty((n_blocks(Z.shape[0]), 1 + K + K * K))
    stats_partials(Z, Y, partials)
    tot = np.zeros(1 + K + K * K)
    accumulate_blocks(tot, partials)
    n = Z.shape[0] * Z.shape[1]
    return float(tot[0] / n), tot[1 : 1 + K] / n, tot[1 + K :].reshape(K, K) / n


@njit(**SERIAL)
def reduced_G(yy, c, C, gam, G):
    """L = yy − 2γ·c + γᵀCγ; G = c − Cγ (D², row-major mat(G) is the spec's G)."""
    K = gam.shape[0]
    L = yy
    for q in range(K):
        s = 0.0
        for t in range(K):
            s += C[q, t] * gam[t]
        G[q] = c[q] - s
        L += gam[q] * (s - 2.0 * c[q])
    return L


def prepare_features(tokens: np.ndarray, labels: np.ndarray, scale: str, loss: str):
    """(Z, Y): features (P, T, D²) and targets (P, T), T = 1 (last) or N (cumulative)."""
    P, T1, D1 = tokens.shape
    D, N = D1 - 1, T1 - 1
    T = N if loss == "cumulative" else 1
    Z = np.empty((P, T, D * D))
    Y = np.empty((P, T))
    cubic_features(
        np.ascontiguousarray(tokens, dtype=np.float64),
        np.ascontiguousarray(labels, dtype=np.float64),
        scale == "N", loss == "cumulative", Z, Y,
    )  # fmt: skip
    return Z, Y


@njit(**SERIAL)
def mlp_reduced_grad(theta, H, D, yy, c, C, grad):
    """Reduced loss and gradient of the MLP, θ = [W1 (H, D²), w2 (H,)]: γ = Σ_i w2_i W1_i,
    ∂L/∂W1_i = −2 w2_i G, ∂L/∂w2_i = −2 W1_i·G, G = c − Cγ."""
    K = D * D
    off2 = H * K
    gam = np.zeros(K)
    G = np.empty(K)
    for i in range(H):
        w = theta[off2 + i]
        for q in range(K):
            gam[q] += w * theta[i * K + q]
    L = reduced_G(yy, c, C, gam, G)
    for i in range(H):
        w = theta[off2 + i]
        s = 0.0
        for q in range(K):
            grad[i * K + q] = -2.0 * w * G[q]
            s += theta[i * K + q] * G[q]
        grad[off2 + i] = -2.0 * s
    return L


@njit(**SERIAL)
def attn_m_reduced_grad(theta, H, D, yy, c, C, grad):
    """Reduced ATTN_M on θ = [r (H, D+1), W (H, D+1, D)] with v_i = r_i[D], U_i = W_i[:D, :]:
    γ = Σ v_i vec(U_i); ∂L/∂U_i = −2 v_i G, ∂L/∂v_i = −2⟨U_i, G⟩; the held entries get 0."""
    D1 = D + 1
    K = D * D
    offW = H * D1
    gam = np.zeros(K)
    G = np.empty(K)
    grad[:] = 0.0
    for i in range(H):
        v = theta[i * D1 + D]
        base = offW + i * D1 * D
        for q in range(K):
            gam[q] += v * theta[base + q]
    L = reduced_G(yy, c, C, gam, G)
    for i in range(H):
        v = theta[i * D1 + D]
        base = offW + i * D1 * D
        s = 0.0
        for q in range(K):
            grad[base + q] = -2.0 * v * G[q]
            s += theta[base + q] * G[q]
        grad[i * D1 + D] = -2.0 * s
    return L


@njit(**SERIAL)
def attn_s_reduced_grad(theta, H, R, D, yy, c, C, grad):
    """Reduced ATTN_S on θ = [r (H, D+1), K (H, R, D+1), Q (H, R, D)], v_i = r_i[D],
    k_ir = K_ir[:D], q_ir = Q_ir: γ = Σ_i v_i Σ_r vec(k_ir q_irᵀ); ∂L/∂v_i = −2 Σ_r k_irᵀ G q_ir,
    ∂L/∂k_ir = −2 v_i G q_ir, ∂L/∂q_ir = −2 v_i Gᵀ k_ir."""
    D1 = D + 1
    K = D * D
    offK = H * D1
    offQ = offK + H * R * D1
    gam = np.zeros(K)
    G = np.empty(K)
    grad[:] = 0.0
    for i in range(H):
        v = theta[i * D1 + D]
        for r in range(R):
            kb = offK + (i * R + r) * D1
            qb = offQ + (i * R + r) * D
            for a in range(D):
                vk = v * theta[kb + a]
                for b in range(D):
                    gam[a * D + b] += vk * theta[qb + b]
    L = reduced_G(yy, c, C, gam, G)
    for i in range(H):
        v = theta[i * D1 + D]
        dv = 0.0
        for r in range(R):
            kb = offK + (i * R + r) * D1
            qb = offQ + (i * R + r) * D
            for a in range(D):
                gq = 0.0
                for b in range(D):
                    gq += G[a * D + b] * theta[qb + b]
                dv += theta[kb + a] * gq
                grad[kb + a] = -2.0 * v * gq
            for b in range(D):
                gk = 0.0
                for a in range(D):
                    gk += G[a * D + b] * theta[kb + a]
                grad[qb + b] = -2.0 * v * gk
        grad[i * D1 + D] = -2.0 * dv
    return L


#: the reduced losses of :func:`reduced_grad` and :func:`reduced_gd` (their argument ``kind``)
MLP, ATTN_M, ATTN_S = 0, 1, 2


def reduced_grad(
    kind: int, theta: np.ndarray, H: int, R: int, D: int, yy: float, c: np.ndarray,
    C: np.ndarray, grad: np.ndarray,
) -> float:  # fmt: skip
    """Reduced loss and gradient of model ``kind``: :func:`mlp_reduced_grad`,
    :func:`attn_m_reduced_grad` or :func:`attn_s_reduced_grad` (the only one that reads R)."""
    if kind == ATTN_S:
        return attn_s_reduced_grad(theta, H, R, D, yy, c, C, grad)
    grad_kernel = mlp_reduced_grad if kind == MLP else attn_m_reduced_grad
    return grad_kernel(theta, H, D, yy, c, C, grad)


@njit(**SERIAL)
def reduced_gd(kind, theta, H, R, D, yy, c, C, lr, n, losses):
    """n GD steps of the reduced model ``kind`` in one call; losses[s] = L before update s (the
    gradient of :func:`reduced_grad`, chosen inside the loop: a call through a chooser function
    costs 15 % at these sizes)."""
    grad = np.empty(theta.shape[0])
    for s in range(n):
        if kind == MLP:
            losses[s] = mlp_reduced_grad(theta, H, D, yy, c, C, grad)
        elif kind == ATTN_M:
            losses[s] = attn_m_reduced_grad(theta, H, D, yy, c, C, grad)
        else:
            losses[s] = attn_s_reduced_grad(theta, H, R, D, yy, c, C, grad)
        for k in range(theta.shape[0]):
            theta[k] -= lr * grad[k]


@njit(**SERIAL)
def stats_gd(kind, theta, H, R, D, maskf, yy, c, C, lr, limit, losses, floor):
    """Up to n = len(losses) full-batch GD steps θ ← θ − η ∂L/∂θ of model ``kind`` from a set's
    sufficient statistics, in one call; returns the number of steps taken. Each step is
    :func:`reduced_grad`, the gradient times ``maskf`` and ``fastdyn.drive.optim.gd_step`` in the
    same order as one call each, so θ and losses[s] (L before update s) are bit-identical to
    them. A step whose loss or gradient is not finite, or whose loss exceeds ``limit``, is not
    taken: the call returns before it; so is one whose loss is below ``floor`` (near an exact
    fit the caller takes it from the rows, ``icl.config.MOMENT_FLOOR``)."""
    grad = np.empty(theta.shape[0])
    for s in range(losses.shape[0]):
        if kind == MLP:
            L = mlp_reduced_grad(theta, H, D, yy, c, C, grad)
        elif kind == ATTN_M:
            L = attn_m_reduced_grad(theta, H, D, yy, c, C, grad)
        else:
            L = attn_s_reduced_grad(theta, H, R, D, yy, c, C, grad)
        if L < floor or not masked_gd_step(theta, grad, maskf, L, limit, lr):
            return s
        losses[s] = L
    return losses.shape[0]
