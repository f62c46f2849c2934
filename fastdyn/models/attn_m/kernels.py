"""Numba kernels for linear and softmax attention on in-context regression (spec §2–3).

Shared by ATTN_M and ATTN_S: both are written through per-head matrices
``r_i`` (the last row of W^V_i, length D+1) and ``B_i`` ((D+1)×D, the first D columns of the
key-query product: ``W^KQ_i[:, :D]`` for ATTN_M, ``W^K_iᵀ W^Q_i[:, :D]`` for ATTN_S). The
prediction of sample μ at prefix n (context tokens 1..n, query token n+1 with label hidden) is

    linear:   ŷ = (1/ρ_n) Σ_i r_iᵀ S_n B_i x_q,   S_n = Σ_{j≤n+1} x̂_j x̂_jᵀ     (query included)
    softmax:  ŷ = Σ_i Σ_j α_ij r_iᵀ x̂_j,  α_i = softmax_j(s_ij),  s_ij = x̂_jᵀ B_i x_q

(the softmax scores are the query column of Xᵀ W^KQ X, as in the matrix formula; ρ does not enter
the softmax model). Loss ``L = (1/(P T)) Σ_μ Σ_n δ_{μn}²``, δ = target − ŷ, T prefixes per
sample (T = 1 for ``loss = "last"``: n = N only; T = N for ``"cumulative"``: n = 1..N).

Linear attention never forms the N×N attention: the per-head sum is contracted once per step into
``M_abc = Σ_i r_ia B_ibc`` so that ``ŷ = (1/ρ) Σ_{ab} S_ab (M x_q)_ab`` and the per-sample gradient
is accumulated as ``T_abc = Σ_μ (δ/ρ) S_ab x_qc`` (S symmetric: only a ≤ b is stored, packed);
then ``∂L/∂r_ia = −(2/(P T)) Σ_bc T_abc B_ibc`` and ``∂L/∂B_ibc = −(2/(P T)) Σ_a r_ia T_abc`` —
the spec's ``−(2/(Pρ)) Σ δ S B x̂_q`` and ``−(2/(Pρ)) Σ δ (S r) x̂_qᵀ`` summed in another order.
Per sample this is O(D³) for any H. Sums over samples use fixed blocks of ``reduce.BLOCK``
samples, each summed serially in sample order, blocks added in order (bit-identical for any number
of threads).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..._jit import PARALLEL, SERIAL
from ...reduce import BLOCK, accumulate_blocks, n_blocks
from .._fastexp import exp_nonpos


def pair_index(D1: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each packed pair p = (a ≤ b) of a (D1×D1) symmetric matrix, row-major."""
    a, b = np.triu_indices(D1)
    return a.astype(np.int64), b.astype(np.int64)


@njit(**SERIAL)
def pack_S(tokens, out):
    """out[μ, p] = S_μ[a_p, b_p], S_μ = Σ_j x̂_j x̂_jᵀ over all N+1 tokens (query label zero)."""
    P, T1, D1 = tokens.shape
    for mu in range(P):
        p = 0
        for a in range(D1):
            for b in range(a, D1):
                s = 0.0
                for j in range(T1):
                    s += tokens[mu, j, a] * tokens[mu, j, b]
                out[mu, p] = s
                p += 1


@njit(**SERIAL)
def contract_M(r, B, Msym):
    """Msym[p, c] = M_abc + M_bac (a < b) or M_aac (a = b), M_abc = Σ_i r_ia B_ibc."""
    H, D1 = r.shape
    D = B.shape[2]
    p = 0
    for a in range(D1):
        for b in range(a, D1):
            for c in range(D):
                s = 0.0
                for i in range(H):
                    s += r[i, a] * B[i, b, c]
                    if a != b:
                        s += r[i, b] * B[i, a, c]
                Msym[p, c] = s
            p += 1


@njit(**SERIAL)
def _lin_last_block(blk, idx, Sp, xq, yq, inv_rho, Msym, out):
    """One block of the last-token linear kernel: out = [Σ δ², T_pc (packed, p-major)].

    Per sample the packed cubic feature f_q = S_p x_c (q = p·D + c) is formed once, then
    ŷ = (1/ρ) f·M and T += (δ/ρ) f: three contiguous loops of length (D+1)(D+2)/2·D that
    vectorise. Accumulates in local arrays and writes ``out`` once at the end."""
    NP, D = Msym.shape
    NQ = NP * D
    lo = blk * BLOCK
    hi = min(lo + BLOCK, idx.shape[0])
    Mf = Msym.ravel()
    T = np.zeros(NQ)
    f = np.empty(NQ)
    loss = 0.0
    for k in range(lo, hi):
        mu = idx[k]
        for p in range(NP):
            sp = Sp[mu, p]
            for c in range(D):
                f[p * D + c] = sp * xq[mu, c]
        # four interleaved partial sums (fixed order, so still deterministic) let the dot vectorise
        s0 = s1 = s2 = s3 = 0.0
        q = 0
        while q + 4 <= NQ:
            s0 += f[q] * Mf[q]
            s1 += f[q + 1] * Mf[q + 1]
            s2 += f[q + 2] * Mf[q + 2]
            s3 += f[q + 3] * Mf[q + 3]
            q += 4
        while q < NQ:
            s0 += f[q] * Mf[q]
            q += 1
        yhat = (s0 + s1) + (s2 + s3)
        d = yq[mu] - yhat * inv_rho
        loss += d * d
        w = d * inv_rho
        for q in range(NQ):
            T[q] += w * f[q]
    out[0] = loss
    for q in range(NQ):
        out[1 + q] = T[q]


@njit(**PARALLEL)
def lin_last(idx, Sp, xq, yq, inv_rho, Msym, partials):
    """Per-block partials of the last-token linear attention loss and T (see module doc)."""
    nb = partials.shape[0]
    for blk in prange(nb):
        partials[blk, :] = 0.0
        _lin_last_block(np.int64(blk), idx, Sp, xq, yq, inv_rho, Msym, partials[blk])


@njit(**SERIAL)
def _lin_cum_block(blk, idx, tokens, labels, scale_n, Msym, out):
    """One block of the cumulative linear kernel (prefix sums of S built token by token)."""
    NP, D = Msym.shape
    D1 = D + 1
    N = tokens.shape[1] - 1
    lo = blk * BLOCK
    hi = min(lo + BLOCK, idx.shape[0])
    Sc = np.empty(NP)
    Sn = np.empty(NP)
    for k in range(lo, hi):
        mu = idx[k]
        Sc[:] = 0.0
        for n in range(1, N + 1):
            # add context token n-1 (0-based) with its label
            p = 0
            for a in range(D1):
                ta = tokens[mu, n - 1, a] if a < D else labels[mu, n - 1]
                for b in range(a, D1):
                    tb = tokens[mu, n - 1, b] if b < D else labels[mu, n - 1]
                    Sc[p] += ta * tb
                    p += 1
            # query token n (0-based) with its label hidden
            p = 0
            for a in range(D1):
                qa = tokens[mu, n, a] if a < D else 0.0
                for b in range(a, D1):
                    qb = tokens[mu, n, b] if b < D else 0.0
                    Sn[p] = Sc[p] + qa * qb
                    p += 1
            inv_rho = 1.0 / n if scale_n else 1.0
            yhat = 0.0
            for p in range(NP):
                s = 0.0
                for c in range(D):
                    s += Msym[p, c] * tokens[mu, n, c]
                yhat += Sn[p] * s
            yhat *= inv_rho
            d = labels[mu, n] - yhat
            out[0] += d * d
            w = d * inv_rho
            q = 1
            for p in range(NP):
                ws = w * Sn[p]
                for c in range(D):
                    out[q] += ws * tokens[mu, n, c]
                    q += 1


@njit(**PARALLEL)
def lin_cum(idx, tokens, labels, scale_n, Msym, partials):
    """Per-block partials of the cumulative linear attention loss and T."""
    nb = partials.shape[0]
    for blk in prange(nb):
        partials[blk, :] = 0.0
        _lin_cum_block(np.int64(blk), idx, tokens, labels, scale_n, Msym, partials[blk])


@njit(**SERIAL)
def heads_from_T(r, B, Tp, coef, dr, dB):
    """dr_ia = coef Σ_bc T_abc B_ibc, dB_ibc = coef Σ_a r_ia T_abc (T symmetric in a, b, packed)."""
    H, D1 = r.shape
    D = B.shape[2]
    T = np.empty((D1, D1, D))
    p = 0
    for a in range(D1):
        for b in range(a, D1):
            for c in range(D):
                T[a, b, c] = Tp[p * D + c]
                T[b, a, c] = Tp[p * D + c]
            p += 1
    for i in range(H):
        for a in range(D1):
            s = 0.0
            for b in range(D1):
                for c in range(D):
                    s += T[a, b, c] * B[i, b, c]
            dr[i, a] = coef * s
        for b in range(D1):
            for c in range(D):
                s = 0.0
                for a in range(D1):
                    s += r[i, a] * T[a, b, c]
                dB[i, b, c] = coef * s


def linear_loss_and_grad(
    r: np.ndarray,
    B: np.ndarray,
    prep: dict,
    idx: np.ndarray,
    dr: np.ndarray,
    dB: np.ndarray,
) -> float:
    """Loss and (∂L/∂r, ∂L/∂B) of linear attention over the samples ``idx`` (written to dr, dB)."""
    return linear_with(lin_last, lin_cum, r, B, prep, idx, dr, dB)


def linear_with(last, cum, r, B, prep, idx, dr, dB) -> float:
    """:func:`linear_loss_and_grad` on the per-sample kernels ``last``/``cum`` (CPU or CUDA twins)."""
    D = B.shape[2]
    NP = (D + 1) * (D + 2) // 2
    Msym = np.empty((NP, D))
    contract_M(r, B, Msym)
    partials = np.empty((n_blocks(idx.shape[0]), 1 + NP * D))
    if prep["loss"] == "last":
        last(idx, prep["Sp"], prep["xq"], prep["yq"], prep["inv_rho"], Msym, partials)
        nterm = idx.shape[0]
    else:
        cum(idx, prep["tokens"], prep["labels"], prep["scale_n"], Msym, partials)
        nterm = idx.shape[0] * (prep["tokens"].shape[1] - 1)
    tot = np.zeros(1 + NP * D)
    accumulate_blocks(tot, partials)
    heads_from_T(r, B, tot[1:], -2.0 / nterm, dr, dB)
    return float(tot[0] / nterm)


# ---------------------------------------------------------------- softmax (query row only)


@njit(**SERIAL)
def _soft_block(blk, idx, tokens, labels, cumulative, r, B, out):
    """One block of the softmax kernel: out = [Σ δ², Σ w ∂ŷ/∂r (H·D1), Σ w ∂ŷ/∂B (H·D1·D)]
    with w = δ (the caller scales by −2/(P T)).

    Per sample the tokens and labels are copied once into X (N+1 × D1) and its transpose XT.
    a_i = B_i x_q is vectorised across the H·D1 rows of B, the scores and values across the
    tokens j (rows of XT), the gradient sums run token-major with the heads inside. Every sum
    keeps its order (over c; over b, then the label column; over j within a head), so finite
    results are those of the plain loops bit for bit (a NaN may come out with the other sign)."""
    H, D1 = r.shape
    D = D1 - 1
    N = tokens.shape[1] - 1
    lo = blk * BLOCK
    hi = min(lo + BLOCK, idx.shape[0])
    alpha = np.empty((H, N + 1))
    o = np.empty((H, N + 1))
    yh = np.empty(H)
    mx = np.empty(H)
    af = np.empty(H * D1)
    a = af.reshape((H, D1))
    BT = np.empty((D, H * D1))
    for i in range(H):
        for b in range(D1):
            for c in range(D):
                BT[c, i * D1 + b] = B[i, b, c]
    X = np.empty((N + 1, D1))
    XT = np.empty((D1, N + 1))
    gr = np.empty((H, D1))
    ga = np.empty((H, D1))
    n0 = 1 if cumulative else N
    offB = 1 + H * D1
    for k in range(lo, hi):
        mu = idx[k]
        for j in range(N + 1):
            for b in range(D):
                X[j, b] = tokens[mu, j, b]
            X[j, D] = labels[mu, j]
        for j in range(N + 1):
            for b in range(D1):
                XT[b, j] = X[j, b]
        for n in range(n0, N + 1):
            # a_i = B_i x_q, x_q = X[n, :D]
            # (summed over c in order, vectorised across the H·D1 rows of B: BT = B as (D, H·D1))
            for ib in range(H * D1):
                af[ib] = 0.0
            for c in range(D):
                xc = X[n, c]
                for ib in range(H * D1):
                    af[ib] += BT[c, ib] * xc
            # scores s_ij = x̂_jᵀ a_i and values o_ij = x̂_jᵀ r_i (query label hidden), each
            # summed over b in order, vectorised across the tokens j (XT = Xᵀ: a row of XT holds
            # one feature of every token, contiguous)
            XT[D, n] = 0.0
            for i in range(H):
                for j in range(n + 1):
                    alpha[i, j] = 0.0
                    o[i, j] = 0.0
                for b in range(D1):
                    ab = a[i, b]
                    rb = r[i, b]
                    for j in range(n + 1):
                        alpha[i, j] += XT[b, j] * ab
                        o[i, j] += XT[b, j] * rb
                m = -np.inf
                for j in range(n + 1):
                    if alpha[i, j] > m:
                        m = alpha[i, j]
                mx[i] = m
            XT[D, n] = X[n, D]
            yhat = 0.0
            for i in range(H):
                m = mx[i]
                for j in range(n + 1):  # branch free: this loop vectorises
                    alpha[i, j] = exp_nonpos(alpha[i, j] - m)
                z = 0.0
                for j in range(n + 1):
                    z += alpha[i, j]
                y_i = 0.0
                for j in range(n + 1):
                    alpha[i, j] /= z  # a division, not × 1/z: α_ij as the spec writes it
                    y_i += alpha[i, j] * o[i, j]
                yh[i] = y_i
                yhat += y_i
            d = labels[mu, n] - yhat
            out[0] += d * d
            # g_r,i = Σ_j α_ij x̂_j ;  g_a,i = Σ_j α_ij (o_ij − ŷ_i) x̂_j ;  ∂ŷ/∂B_i = g_a,i x_qᵀ,
            # the outer product with x_q taken once per head, not once per token j
            gr[:, :] = 0.0
            ga[:, :] = 0.0
            for j in range(n + 1):
                lab = X[j, D] if j < n else 0.0
                for i in range(H):
                    wr = d * alpha[i, j]
                    wa = wr * (o[i, j] - yh[i])
                    for b in range(D):
                        gr[i, b] += wr * X[j, b]
                        ga[i, b] += wa * X[j, b]
                    gr[i, D] += wr * lab
                    ga[i, D] += wa * lab
            for i in range(H):
                for b in range(D1):
                    out[1 + i * D1 + b] += gr[i, b]
                    base = offB + (i * D1 + b) * D
                    for c in range(D):
                        out[base + c] += ga[i, b] * X[n, c]


@njit(**PARALLEL)
def soft(idx, tokens, labels, cumulative, r, B, partials):
    """Per-block partials of the softmax attention loss and gradient."""
    nb = partials.shape[0]
    for blk in prange(nb):
        partials[blk, :] = 0.0
        _soft_block(np.int64(blk), idx, tokens, labels, cumulative, r, B, partials[blk])


def softmax_loss_and_grad(
    r: np.ndarray,
    B: np.ndarray,
    prep: dict,
    idx: np.ndarray,
    dr: np.ndarray,
    dB: np.ndarray,
) -> float:
    """Loss and (∂L/∂r, ∂L/∂B) of softmax attention over the samples ``idx``."""
    return softmax_with(soft, r, B, prep, idx, dr, dB)


def softmax_with(kernel, r, B, prep, idx, dr, dB) -> float:
    """:func:`softmax_loss_and_grad` on the per-sample kernel ``kernel`` (CPU or CUDA twin)."""
    H, D1 = r.shape
    D = D1 - 1
    width = 1 + H * D1 + H * D1 * D
    partials = np.empty((n_blocks(idx.shape[0]), width))
    cumulative = prep["loss"] == "cumulative"
    kernel(idx, prep["tokens"], prep["labels"], cumulative, r, B, partials)
    nterm = idx.shape[0] * ((prep["tokens"].shape[1] - 1) if cumulative else 1)
    tot = np.zeros(width)
    accumulate_blocks(tot, partials)
    coef = -2.0 / nterm
    dr[:] = coef * tot[1 : 1 + H * D1].reshape(H, D1)
    dB[:] = coef * tot[1 + H * D1 :].reshape(H, D1, D)
    return float(tot[0] / nterm)


def prepare_attention(
    tokens: np.ndarray, labels: np.ndarray, scale: str, loss: str, softmax: bool
) -> dict:
    """Per-sample arrays the attention kernels read, computed once: packed S_μ = X_μX_μᵀ
    (P, (D+1)(D+2)/2), x_q (P, D), y_q (P,) for the last-token linear kernel; the tokens and labels
    for the cumulative and softmax kernels."""
    P, T1, D1 = tokens.shape
    N = T1 - 1
    prep = {
        "loss": loss,
        "N": N,
        "scale_n": scale == "N",
        "inv_rho": (1.0 / N) if scale == "N" else 1.0,
    }
    prep["tokens"] = np.ascontiguousarray(tokens, dtype=np.float64)
    prep["labels"] = np.ascontiguousarray(labels, dtype=np.float64)
    if not softmax and loss == "last":
        Sp = np.empty((P, D1 * (D1 + 1) // 2))
        pack_S(prep["tokens"], Sp)
        prep["Sp"] = Sp
        prep["xq"] = np.ascontiguousarray(tokens[:, -1, : D1 - 1])
        prep["yq"] = np.ascontiguousarray(labels[:, -1])
    return prep
