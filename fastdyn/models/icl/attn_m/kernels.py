"""Numba kernels for linear and softmax attention on in-context regression (docs/theory.md, ICL).

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
samples, blocks added in order (bit-identical for any number of threads). Inside a block the
last-token kernel reads the per-sample arrays structure-of-arrays (packed S as (NP, P), x_q as
(D, P)) so that every loop runs elementwise over consecutive samples and vectorises without
fastmath; its sums over samples go into ``LANES`` fixed lanes (sample k of the block into lane
k mod LANES, each lane in sample order), added pairwise at the end of the block. The cumulative
loss runs the same kernel on N rows per sample (prefix n: packed S_n, x_n/ρ_n, y_n, prepared once
by :func:`pack_prefixes`, prefix-major), so T and Σ δ² come out summed over prefixes and samples;
a set whose rows would take more than ``PREFIX_BYTES_MAX`` bytes keeps :func:`lin_cum`, which
rebuilds the prefix sums from the tokens each step. It and the softmax kernel sum a block
serially in sample order. A full-batch step on the CPU takes the same totals from the set's
moments instead (G = Σ φφᵀ, b = Σ yφ, y2 = Σ y², taken once; "the data's moments" below), at
O(NQ²) a step for any P.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit, prange

from ...._jit import PARALLEL, SERIAL, prefer_wide_vectors
from ....core.gd import masked_gd_step
from ....core.updates import checked_update
from ....reduce import BLOCK, MIN_PARALLEL_BLOCKS, accumulate_blocks, lane_dot, n_blocks
from ..._fastexp import exp_nonpos
from ..config import MOMENT_BLOCKS_AT_ONCE, MOMENT_FLOOR
from ..prepared import AttentionData, LinearData, SoftmaxData


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


#: samples per chunk of :func:`pack_prefixes` (each row of its output written contiguously)
_CHUNK = 64


@njit(**SERIAL)
def pack_prefixes(tokens, labels, scale_n, SpT, XT, y):
    """The cumulative loss's rows, prefix-major (row (n−1)·P + μ, samples contiguous):
    SpT[p, row] = S_n[a_p, b_p] with S_n = Σ_{j<n} x̂_j x̂_jᵀ (labels in) + x_n x_nᵀ (label hidden),
    XT[c, row] = x_n,c / ρ_n (ρ_n = n when ``scale_n``, else 1: 1/ρ folded into the query) and
    y[row] = y_n, for n = 1..N. The prefix sums are built token by token (the order of
    :func:`lin_cum_sample`), :data:`_CHUNK` samples at a time."""
    P, T1, D1 = tokens.shape
    N = T1 - 1
    NP = SpT.shape[0]
    Sc = np.empty((NP, _CHUNK))
    ctx = np.empty((D1, _CHUNK))  # token n−1 with its label
    qry = np.empty((D1, _CHUNK))  # token n, label hidden
    for m0 in range(0, P, _CHUNK):
        m = min(_CHUNK, P - m0)
        Sc[:, :] = 0.0
        for n in range(1, N + 1):
            row = (n - 1) * P + m0
            inv = 1.0 / n if scale_n else 1.0
            for k in range(m):
                for a in range(D1 - 1):
                    ctx[a, k] = tokens[m0 + k, n - 1, a]
                    qry[a, k] = tokens[m0 + k, n, a]
                ctx[D1 - 1, k] = labels[m0 + k, n - 1]
                qry[D1 - 1, k] = 0.0
                y[row + k] = labels[m0 + k, n]
            p = 0
            for a in range(D1):
                for b in range(a, D1):
                    for k in range(m):
                        Sc[p, k] += ctx[a, k] * ctx[b, k]
                        SpT[p, row + k] = Sc[p, k] + qry[a, k] * qry[b, k]
                    p += 1
            for c in range(D1 - 1):
                for k in range(m):
                    XT[c, row + k] = qry[c, k] * inv if scale_n else qry[c, k]


@njit(**SERIAL)
def contract_M(r, B, Msym):
    """Msym[p, c] = M_abc + M_bac (a < b) or M_aac (a = b), M_abc = Σ_i r_ia B_ibc: each entry
    sums head i's terms in head order (r_ia B_ibc, then r_ib B_iac), the heads in the outer loop
    and c innermost, so the independent entries' sums overlap. Four heads a pass (the same
    additions in the same order, a quarter of the short loops over c: 335 -> 232 ns at Fig. 1's
    sizes), then the rest one by one."""
    H, D1 = r.shape
    D = B.shape[2]
    for p in range(Msym.shape[0]):
        for c in range(D):
            Msym[p, c] = 0.0
    i = 0
    while i + 4 <= H:
        B0, B1, B2, B3 = B[i], B[i + 1], B[i + 2], B[i + 3]
        p = 0
        for a in range(D1):
            ra0, ra1, ra2, ra3 = r[i, a], r[i + 1, a], r[i + 2, a], r[i + 3, a]
            for c in range(D):  # b = a
                m = Msym[p, c] + ra0 * B0[a, c]
                m = m + ra1 * B1[a, c]
                m = m + ra2 * B2[a, c]
                Msym[p, c] = m + ra3 * B3[a, c]
            p += 1
            for b in range(a + 1, D1):
                rb0, rb1, rb2, rb3 = r[i, b], r[i + 1, b], r[i + 2, b], r[i + 3, b]
                for c in range(D):
                    m = (Msym[p, c] + ra0 * B0[b, c]) + rb0 * B0[a, c]
                    m = (m + ra1 * B1[b, c]) + rb1 * B1[a, c]
                    m = (m + ra2 * B2[b, c]) + rb2 * B2[a, c]
                    Msym[p, c] = (m + ra3 * B3[b, c]) + rb3 * B3[a, c]
                p += 1
        i += 4
    while i < H:
        p = 0
        for a in range(D1):
            ra = r[i, a]
            for b in range(a, D1):
                rb = r[i, b]
                if a != b:
                    for c in range(D):
                        Msym[p, c] = (Msym[p, c] + ra * B[i, b, c]) + rb * B[i, a, c]
                else:
                    for c in range(D):
                        Msym[p, c] = Msym[p, c] + ra * B[i, b, c]
                p += 1
        i += 1


#: lanes of the last-token kernel's sums over samples: sample k of a block (counted from the block's
#: start) adds into lane k mod LANES, each lane in sample order; the lanes are added pairwise at the
#: end of the block (a fixed order). Samples go through in tiles of TILE = 4·LANES.
LANES = 64
TILE = 4 * LANES


@njit(**dict(SERIAL, inline="always", cache=False))
def _add4(a, w, j, v0, v1, v2, v3):
    """a + v0 w_j + v1 w_{L+j} + v2 w_{2L+j} + v3 w_{3L+j}, added left to right (L = LANES): lane j's
    share of a full tile (inlined into the caller at the numba IR level, so its loop vectorises)."""
    L = LANES
    return a + v0 * w[j] + v1 * w[L + j] + v2 * w[2 * L + j] + v3 * w[3 * L + j]


@njit(**SERIAL)
def _lin_last_tile(S, X, y, base, nt, inv_rho, Msym, g, yh, wx, acc):
    """Samples base .. base+nt−1 of the SoA arrays S (NP, ·), X (D, ·), y: ŷ, δ, and the lanes of
    Σ δ² (acc[0]) and T_pc = Σ (δ/ρ) S_p x_c (acc[1 + p·D + c]); nt ≤ TILE, tiles start on a
    multiple of LANES. Every loop is elementwise over samples (it vectorises without fastmath):

    - g_c = Σ_p M_pc S_p (p in order, five rows per pass), ŷ = (1/ρ) Σ_c x_c g_c (c in order);
    - wx_c = (δ/ρ) x_c; lane j of T_pc adds S_p wx_c of samples j, j+L, j+2L, j+3L in order."""
    prefer_wide_vectors()
    NP, D = Msym.shape
    L = LANES
    for k in range(nt):
        yh[k] = 0.0
    c0 = 0
    while c0 < D:
        nc = 4 if c0 + 4 <= D else 1
        for c in range(nc):
            gc = g[c]
            for k in range(nt):
                gc[k] = 0.0
        p = 0
        while p < NP:
            if nc == 4 and p + 5 <= NP:
                s0 = S[p, base : base + nt]
                s1 = S[p + 1, base : base + nt]
                s2 = S[p + 2, base : base + nt]
                s3 = S[p + 3, base : base + nt]
                s4 = S[p + 4, base : base + nt]
                for c in range(4):
                    m0 = Msym[p, c0 + c]
                    m1 = Msym[p + 1, c0 + c]
                    m2 = Msym[p + 2, c0 + c]
                    m3 = Msym[p + 3, c0 + c]
                    m4 = Msym[p + 4, c0 + c]
                    gc = g[c]
                    for k in range(nt):
                        gc[k] = (
                            gc[k] + m0 * s0[k] + m1 * s1[k] + m2 * s2[k] + m3 * s3[k] + m4 * s4[k]
                        )
                p += 5
            else:
                s0 = S[p, base : base + nt]
                for c in range(nc):
                    m0 = Msym[p, c0 + c]
                    gc = g[c]
                    for k in range(nt):
                        gc[k] = gc[k] + m0 * s0[k]
                p += 1
        for c in range(nc):
            x = X[c0 + c, base : base + nt]
            gc = g[c]
            for k in range(nt):
                yh[k] = yh[k] + x[k] * gc[k]
        c0 += nc
    d = g[0]
    yb = y[base : base + nt]
    for k in range(nt):
        d[k] = yb[k] - yh[k] * inv_rho
    for c in range(D):
        x = X[c, base : base + nt]
        wc = wx[c]
        for k in range(nt):
            wc[k] = (d[k] * inv_rho) * x[k]
    if nt == TILE:
        a = acc[0]
        for j in range(L):
            a[j] = _add4(a[j], d, j, d[j], d[L + j], d[2 * L + j], d[3 * L + j])
        for p in range(NP):
            s = S[p, base : base + TILE]
            c0 = 0
            while c0 < D:
                if c0 + 4 <= D:
                    a0 = acc[1 + p * D + c0]
                    a1 = acc[2 + p * D + c0]
                    a2 = acc[3 + p * D + c0]
                    a3 = acc[4 + p * D + c0]
                    w0 = wx[c0]
                    w1 = wx[c0 + 1]
                    w2 = wx[c0 + 2]
                    w3 = wx[c0 + 3]
                    for j in range(L):
                        v0 = s[j]
                        v1 = s[L + j]
                        v2 = s[2 * L + j]
                        v3 = s[3 * L + j]
                        a0[j] = _add4(a0[j], w0, j, v0, v1, v2, v3)
                        a1[j] = _add4(a1[j], w1, j, v0, v1, v2, v3)
                        a2[j] = _add4(a2[j], w2, j, v0, v1, v2, v3)
                        a3[j] = _add4(a3[j], w3, j, v0, v1, v2, v3)
                    c0 += 4
                else:
                    a0 = acc[1 + p * D + c0]
                    w0 = wx[c0]
                    for j in range(L):
                        a0[j] = _add4(a0[j], w0, j, s[j], s[L + j], s[2 * L + j], s[3 * L + j])
                    c0 += 1
    else:  # the block's last, partial tile: one chunk of up to L samples at a time
        for kk in range(0, nt, L):
            m = min(L, nt - kk)
            a = acc[0]
            dk = d[kk : kk + m]
            for j in range(m):
                a[j] = a[j] + dk[j] * dk[j]
            for p in range(NP):
                s = S[p, base + kk : base + kk + m]
                for c in range(D):
                    a = acc[1 + p * D + c]
                    w = wx[c, kk : kk + m]
                    for j in range(m):
                        a[j] = a[j] + s[j] * w[j]


@njit(**SERIAL)
def _lin_last_block(blk, idx, SpT, xqT, yq, inv_rho, Msym, full, out):
    """One block of the last-token linear kernel: out = [Σ δ², T_pc (packed, p-major)].

    ``full``: idx is 0..P−1 and the block's samples are read in place; otherwise they are first
    gathered into block-local SoA arrays. Tiles of TILE samples (:func:`_lin_last_tile`) accumulate
    into the lanes; the lanes are then added pairwise (j + h into j, h = LANES/2, …, 1)."""
    NP, D = Msym.shape
    lo = blk * BLOCK
    hi = min(lo + BLOCK, idx.shape[0])
    n = hi - lo
    if full:
        S, X, y, off = SpT, xqT, yq, lo
    else:
        S = np.empty((NP, n))
        X = np.empty((D, n))
        y = np.empty(n)
        for p in range(NP):
            for k in range(n):
                S[p, k] = SpT[p, idx[lo + k]]
        for c in range(D):
            for k in range(n):
                X[c, k] = xqT[c, idx[lo + k]]
        for k in range(n):
            y[k] = yq[idx[lo + k]]
        off = 0
    g = np.empty((4, TILE))
    yh = np.empty(TILE)
    wx = np.empty((D, TILE))
    acc = np.zeros((1 + NP * D, LANES))
    for t0 in range(0, n, TILE):
        _lin_last_tile(S, X, y, off + t0, min(TILE, n - t0), inv_rho, Msym, g, yh, wx, acc)
    h = LANES
    while h > 1:
        h //= 2
        for q in range(acc.shape[0]):
            a = acc[q]
            for j in range(h):
                a[j] = a[j] + a[j + h]
    for q in range(acc.shape[0]):
        out[q] = acc[q, 0]


@njit(**PARALLEL)
def _lin_last_threads(idx, SpT, xqT, yq, inv_rho, Msym, full, partials):
    for blk in prange(partials.shape[0]):
        _lin_last_block(np.int64(blk), idx, SpT, xqT, yq, inv_rho, Msym, full, partials[blk])


@njit(**SERIAL)
def _lin_last_here(idx, SpT, xqT, yq, inv_rho, Msym, full, partials):
    for blk in range(partials.shape[0]):
        _lin_last_block(np.int64(blk), idx, SpT, xqT, yq, inv_rho, Msym, full, partials[blk])


@njit(**SERIAL)
def lin_last(idx, SpT, xqT, yq, inv_rho, Msym, full, partials):
    """Per-block partials of the last-token linear attention loss and T (see module doc); the
    per-sample arrays are structure-of-arrays: SpT (NP, P), xqT (D, P); ``full``: idx = 0..P−1.
    The blocks run on the numba threads from ``reduce.MIN_PARALLEL_BLOCKS`` blocks on, else on the
    calling thread; each block's partials are the same either way."""
    if partials.shape[0] < MIN_PARALLEL_BLOCKS:
        _lin_last_here(idx, SpT, xqT, yq, inv_rho, Msym, full, partials)
    else:
        _lin_last_threads(idx, SpT, xqT, yq, inv_rho, Msym, full, partials)


@njit(**SERIAL)
def lin_cum_sample(mu, tokens, labels, scale_n, Msym, Sc, Sn, out):
    """Adds the terms of sample ``mu`` at every prefix n = 1..N to out = [Σ δ², T_pc] of the
    cumulative linear kernel (prefix sums of S built token by token in Sc, Sn: scratch of NP).
    The same Python source is the CUDA twin's per-thread work (:mod:`.kernels_cuda`)."""
    NP, D = Msym.shape
    D1 = D + 1
    N = tokens.shape[1] - 1
    for p in range(NP):
        Sc[p] = 0.0
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


@njit(**SERIAL)
def _lin_cum_block(blk, idx, tokens, labels, scale_n, Msym, out):
    """One block of the cumulative linear kernel: its samples in order (:func:`lin_cum_sample`)."""
    NP = Msym.shape[0]
    lo = blk * BLOCK
    hi = min(lo + BLOCK, idx.shape[0])
    Sc = np.empty(NP)
    Sn = np.empty(NP)
    for k in range(lo, hi):
        lin_cum_sample(idx[k], tokens, labels, scale_n, Msym, Sc, Sn, out)


@njit(**PARALLEL)
def lin_cum(idx, tokens, labels, scale_n, Msym, partials):
    """Per-block partials of the cumulative linear attention loss and T, from the tokens (the path
    of a set without prepared prefix rows)."""
    nb = partials.shape[0]
    for blk in prange(nb):
        partials[blk, :] = 0.0
        _lin_cum_block(np.int64(blk), idx, tokens, labels, scale_n, Msym, partials[blk])


@njit(**SERIAL)
def heads_from_T(r, B, Tp, coef, dr, dB):
    """dr_ia = coef Σ_bc T_abc B_ibc, dB_ibc = coef Σ_a r_ia T_abc (T symmetric in a, b, packed).
    Each sum runs in (b, c) or a order; the loops are arranged so that the innermost one runs
    over independent entries (heads for dr, (b, c) for dB) and vectorises."""
    H, D1 = r.shape
    K = D1 * B.shape[2]
    T, Bt, ar = np.empty((D1, K)), np.empty((K, H)), np.empty((D1, H))
    _heads_from_T(r, B, Tp, coef, dr, dB.reshape((H, K)), T, Bt, ar)


@njit(**SERIAL)
def _heads_from_T(r, B, Tp, coef, dr, dB, T, Bt, ar):
    """:func:`heads_from_T` with dB as (H, D1·D) (dB[i, b·D + c] = dB_ibc) and its scratch:
    T (D1, D1·D), Bt (D1·D, H), ar (D1, H). dB holds the sums, then is scaled in place."""
    H, D1 = r.shape
    D = B.shape[2]
    K = D1 * D
    p = 0  # T[a, b·D + c] = T_abc
    for a in range(D1):
        for b in range(a, D1):
            for c in range(D):
                T[a, b * D + c] = Tp[p * D + c]
                T[b, a * D + c] = Tp[p * D + c]
            p += 1
    for i in range(H):  # Bt[b·D + c, i] = B_ibc
        for b in range(D1):
            for c in range(D):
                Bt[b * D + c, i] = B[i, b, c]
    # dr[i, a] = coef Σ_k T[a, k] Bt[k, i], k in order; dB[i, b, c] = coef Σ_a r[i, a] T[a, b·D + c],
    # a in order (:func:`_weighted_rows_all`: the same bits as one row of sums after another;
    # Fig. 1 sizes: heads_from_T 725 -> 523 ns, a fused GD epoch ≈ 3 % faster)
    _weighted_rows_all(T, Bt, ar)
    for a in range(D1):
        for i in range(H):
            dr[i, a] = coef * ar[a, i]
    _weighted_rows_all(r, T, dB)
    for i in range(H):
        for k in range(K):
            dB[i, k] = coef * dB[i, k]


@njit(**dict(SERIAL, inline="always", cache=False))
def _weighted_rows_all(W, M, out):
    """out[p, :] = Σ_j W[p, j] M[j, :], j in order, for every row p at once: each step j updates
    every row's sums side by side, so a sum's next term does not wait for its last one (each
    row the same sum as :func:`_weighted_rows` of W[p]). Four steps j a pass (the same additions
    in the same order, a quarter of the short loops over k), then the rest one by one."""
    n = M.shape[1]
    for p in range(W.shape[0]):
        for k in range(n):
            out[p, k] = 0.0
    j = 0
    while j + 4 <= M.shape[0]:
        M0, M1, M2, M3 = M[j], M[j + 1], M[j + 2], M[j + 3]
        for p in range(W.shape[0]):
            w0, w1, w2, w3 = W[p, j], W[p, j + 1], W[p, j + 2], W[p, j + 3]
            for k in range(n):
                out[p, k] = (((out[p, k] + w0 * M0[k]) + w1 * M1[k]) + w2 * M2[k]) + w3 * M3[k]
        j += 4
    while j < M.shape[0]:
        for p in range(W.shape[0]):
            wj = W[p, j]
            for k in range(n):
                out[p, k] = out[p, k] + wj * M[j, k]
        j += 1


@njit(**dict(SERIAL, inline="always", cache=False))
def _weighted_rows(w, M, acc):
    """acc[:n] = Σ_j w_j M[j, :n], j in order (n = M.shape[1]): the innermost loop runs over
    independent entries and vectorises."""
    n = M.shape[1]
    for k in range(n):
        acc[k] = 0.0
    for j in range(M.shape[0]):
        wj = w[j]
        for k in range(n):
            acc[k] = acc[k] + wj * M[j, k]


@njit(**SERIAL)
def kq_product(Kw, Q, B):
    """ATTN_S's B_i = W^K_iᵀ W^Q_i[:, :D]: B_ibc = Σ_r K_irb Q_irc, r in order."""
    prefer_wide_vectors()
    H, R, D1 = Kw.shape
    D = Q.shape[2]
    for i in range(H):
        for b in range(D1):
            for c in range(D):
                B[i, b, c] = 0.0
        for r in range(R):
            for b in range(D1):
                kb = Kw[i, r, b]
                for c in range(D):
                    B[i, b, c] = B[i, b, c] + kb * Q[i, r, c]


@njit(**SERIAL)
def kq_grads(Kw, Q, dB, gK, gQ):
    """The chain rule through :func:`kq_product`: gK_irb = Σ_c dB_ibc Q_irc (c in order) and
    gQ_irc = Σ_b K_irb dB_ibc (b in order)."""
    prefer_wide_vectors()
    H, R, D1 = Kw.shape
    D = Q.shape[2]
    for i in range(H):
        for r in range(R):
            for b in range(D1):
                s = 0.0
                for c in range(D):
                    s += dB[i, b, c] * Q[i, r, c]
                gK[i, r, b] = s
            _weighted_rows(Kw[i, r], dB[i], gQ[i, r])


@njit(**dict(SERIAL, inline="always", cache=False))
def _lin_scratch(theta, H, R, D, n_rows):
    """The views of θ and the gradient and the scratch of :func:`_lin_last_grad` for ``n_rows``
    rows a step: (r, B, Kw, Q, m, Msym, partials, tot, u, Tu, Bt, ar, gr, gB, dB, gK, gQ, grad).
    r, B (ATTN_M) or r, Kw, Q (ATTN_S) are views of θ, updated in place by the steps; Msym is
    m's (NP, D) view; gr (H, D+1) is ∂L/∂r in ``grad``, and gB (H, (D+1)·D) ∂L/∂B: ATTN_M's in
    ``grad``, ATTN_S's beside it (dB its (H, D+1, D) view), whose K and Q gradients gK, gQ are in
    ``grad``. Every view is made once a call (a reshape costs ≈ 15 ns, a twentieth of a Fig. 1
    epoch for the five a step took). It and :func:`_lin_last_grad` are inlined into the fused
    kernels at the numba IR level: as functions of their own they added ≈ 2 s to a cold compile
    of each kernel (4.5 s against 2.6 s for :func:`lin_last_gd`)."""
    D1 = D + 1
    NP = D1 * (D1 + 1) // 2
    K = D1 * D
    nr = H * D1
    nK = H * R * D1
    grad = np.empty(theta.shape[0])
    r = theta[:nr].reshape((H, D1))
    if R == 0:
        B = theta[nr:].reshape((H, D1, D))
        Kw = np.empty((H, 0, D1))
        Q = np.empty((H, 0, D))
        gB = grad[nr:].reshape((H, K))
    else:
        B = np.empty((H, D1, D))  # from K and Q
        Kw = theta[nr : nr + nK].reshape((H, R, D1))
        Q = theta[nr + nK :].reshape((H, R, D))
        gB = np.empty((H, K))
    m = np.empty(NP * D)
    return (
        r,
        B,
        Kw,
        Q,
        m,
        m.reshape((NP, D)),
        np.empty(((n_rows + BLOCK - 1) // BLOCK, 1 + NP * D)),
        np.empty(1 + NP * D),
        np.empty(NP * D),
        np.empty((D1, K)),
        np.empty((K, H)),
        np.empty((D1, H)),
        grad[:nr].reshape((H, D1)),
        gB,
        gB.reshape((H, D1, D)),
        grad[nr : nr + nK].reshape((H, R, D1)),
        grad[nr + nK :].reshape((H, R, D)) if R > 0 else np.empty((H, 0, D)),
        grad,
    )


@njit(**dict(SERIAL, inline="always", cache=False))
def _lin_last_grad(H, R, D, rows, full, SpT, xqT, yq, inv_rho, G, yphi, y2, scratch):
    """L(θ) over ``rows`` (returned) and ∂L/∂θ into ``scratch[-1]`` (unmasked), the operations of
    :func:`linear_loss_and_grad` and the model's ``_heads``/``_head_grads`` in their order, θ
    read and the gradient written through the views in ``scratch`` (:func:`_lin_scratch`).
    θ = [r (H, D+1), B (H, D+1, D)] (ATTN_M, R = 0) or [r, K (H, R, D+1), Q (H, R, D)] (ATTN_S of
    rank R: B by :func:`kq_product`, the gradient of K and Q by :func:`kq_grads`). With the set's
    moments (G, yphi = b, y2; G of shape (0, 0) for none) the totals come from
    :func:`lin_moments`, from the rows where that loss is below ``MOMENT_FLOOR`` · y2."""
    r, B, Kw, Q, m, Msym, partials, tot, u, Tu, Bt, ar, gr, gB, dB, gK, gQ, grad = scratch
    if R > 0:
        kq_product(Kw, Q, B)
    contract_M(r, B, Msym)
    by_rows = True
    if G.shape[0] > 0:
        lin_moments(G, yphi, y2, inv_rho, m, u, tot)
        by_rows = tot[0] < MOMENT_FLOOR * y2  # near an exact fit: the rows, as per call
    if by_rows:
        lin_last(rows, SpT, xqT, yq, inv_rho, Msym, full, partials)
        tot[:] = 0.0
        accumulate_blocks(tot, partials)
    nterm = rows.shape[0]
    _heads_from_T(r, B, tot[1:], -2.0 / nterm, gr, gB, Tu, Bt, ar)
    if R > 0:
        kq_grads(Kw, Q, dB, gK, gQ)
    return tot[0] / nterm


@njit(**SERIAL)
def lin_last_gd(
    theta, H, R, D, maskf, idx, SpT, xqT, yq, inv_rho, G, yphi, y2, lr, limit, losses
):  # fmt: skip
    """Up to n = len(losses) full-batch GD steps θ ← θ − η ∂L/∂θ of last-token linear attention
    in one call; returns the number of steps taken. θ: ATTN_M's or ATTN_S's (:func:`_lin_last_grad`).

    Each step is the operations of :func:`linear_loss_and_grad` (``idx`` = 0..P−1, read in
    place), the gradient times ``maskf`` (1.0 trained, 0.0 held) and the update of
    ``fastdyn.core.updates.gd_step``, in the same order, so θ and the losses are bit-identical to
    one call each per step. losses[s] = L before update s. A step whose loss or gradient is not
    finite, or whose loss exceeds ``limit``, is not taken: the call returns before it, θ as the
    previous steps left it (the caller then takes that step the slow way and reports it).
    With the set's moments (G, yphi = b, y2; G of shape (0, 0) for none) a step's totals come from
    :func:`lin_moments`, as in :func:`linear_loss_and_grad`, from the rows where that loss is
    below ``MOMENT_FLOOR`` · y2."""
    scratch = _lin_scratch(theta, H, R, D, idx.shape[0])
    grad = scratch[-1]
    full = (
        idx.shape[0] == yq.shape[0]
    )  # True; a computed flag: the literal would compile lin_last anew
    for s in range(losses.shape[0]):
        L = _lin_last_grad(H, R, D, idx, full, SpT, xqT, yq, inv_rho, G, yphi, y2, scratch)
        if not masked_gd_step(theta, grad, maskf, L, limit, lr):
            return s
        losses[s] = L
    return losses.shape[0]


@njit(**SERIAL)
def lin_last_steps(
    theta, H, R, D, maskf, batches, P, n_prefix, SpT, xqT, yq, inv_rho, G, yphi, y2,
    rule, hyper, buf, m, v, step, limit, losses,
):  # fmt: skip
    """Up to n = len(losses) steps of linear attention with an optimiser's update in one call;
    returns the number of steps taken. Minibatches: step s draws on the samples ``batches[s]``
    (B sorted indices), their rows (j−1)·P + μ for prefix j = 1..``n_prefix`` (the cumulative
    loss's prefix-major rows, :func:`pack_prefixes`; ``n_prefix`` = 1: the last-token rows μ)
    gathered by :func:`lin_last`. Full batch (``batches`` of shape (0, 0)): every row, read in
    place, with the set's moments (G, yphi = b, y2; G of shape (0, 0) for none) as in
    :func:`lin_last_gd`. L and ∂L/∂θ by :func:`_lin_last_grad` (θ: ATTN_M's or ATTN_S's), then
    the gradient times ``maskf`` and the update ``rule`` with ``hyper`` and the optimiser's state
    (``buf``, ``m``, ``v``, ``step``: :func:`fastdyn.core.updates.checked_update`).

    The operations of :func:`linear_loss_and_grad` on those samples and of the optimiser's own
    step, in the same order: θ, the state and the losses are bit-identical to one call each per
    step. losses[s] = the loss before update s. A step whose loss or gradient is not finite, or
    whose loss exceeds ``limit``, is not taken (θ and the state as the previous steps left
    them)."""
    full = batches.shape[0] == 0  # a computed flag: the literal would compile lin_last anew
    nb = batches.shape[1]
    rows = np.arange(yq.shape[0]) if full else np.empty(nb * n_prefix, dtype=np.int64)
    scratch = _lin_scratch(theta, H, R, D, rows.shape[0])
    grad = scratch[-1]
    for s in range(losses.shape[0]):
        if not full:
            for j in range(n_prefix):
                for k in range(nb):
                    rows[j * nb + k] = j * P + batches[s, k]
        L = _lin_last_grad(H, R, D, rows, full, SpT, xqT, yq, inv_rho, G, yphi, y2, scratch)
        if not checked_update(rule, theta, grad, maskf, L, limit, hyper, buf, m, v, step):
            return s
        losses[s] = L
    return losses.shape[0]


@njit(**SERIAL)
def _is_range(idx):
    """Whether idx is 0, 1, …, len − 1."""
    for k in range(idx.shape[0]):
        if idx[k] != k:
            return False
    return True


def linear_loss_and_grad(
    last: Callable, cum: Callable, r: np.ndarray, B: np.ndarray, prep: LinearData,
    idx: np.ndarray, dr: np.ndarray, dB: np.ndarray,
) -> float:  # fmt: skip
    """Loss and (∂L/∂r, ∂L/∂B) of linear attention over the samples ``idx`` (written to dr, dB)
    on the per-sample kernels ``last``/``cum``: :func:`lin_last`, :func:`lin_cum` or their CUDA
    twins in :mod:`.kernels_cuda`. The cumulative loss with prepared prefix rows
    (:func:`prepare_attention`) runs ``last`` on the rows of the samples ``idx``; without them
    (a set above ``PREFIX_BYTES_MAX``) ``cum`` rebuilds the prefix sums from the tokens."""
    D = B.shape[2]
    NP = (D + 1) * (D + 2) // 2
    Msym = np.empty((NP, D))
    contract_M(r, B, Msym)
    if prep.loss == "cumulative" and prep.SpT is None:
        partials = np.empty((n_blocks(idx.shape[0]), 1 + NP * D))
        cum(idx, prep.tokens, prep.labels, prep.scale_n, Msym, partials)
        nterm = idx.shape[0] * (prep.tokens.shape[1] - 1)
    else:
        full = idx.shape[0] == prep.n_samples and (idx is prep.all_idx or _is_range(idx))
        rows = prefix_rows(prep, idx, full)
        nterm = rows.shape[0]
        moments = full_moments(prep) if full else None
        if moments is not None:
            tot = np.empty(1 + NP * D)
            lin_moments(*moments, prep.inv_rho, Msym.ravel(), np.empty(NP * D), tot)
            if not tot[0] < MOMENT_FLOOR * moments[2]:  # else: near an exact fit, by the rows
                heads_from_T(r, B, tot[1:], -2.0 / nterm, dr, dB)
                return float(tot[0] / nterm)
        partials = np.empty((n_blocks(rows.shape[0]), 1 + NP * D))
        last(rows, prep.SpT, prep.xqT, prep.yq, prep.inv_rho, Msym, full, partials)
    tot = np.zeros(1 + NP * D)
    accumulate_blocks(tot, partials)
    heads_from_T(r, B, tot[1:], -2.0 / nterm, dr, dB)
    return float(tot[0] / nterm)


def full_moments(prep: LinearData) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(G, b, y2) of all rows of a prepared linear set (:func:`data_moments`), taken at the first
    full-batch call and kept in ``prep.data_moments``; None where the set does not use them
    (``prep.moments`` false: the CUDA twin, a set below :func:`~fastdyn.models.icl.config.uses_moments`)."""
    if not prep.moments:
        return None
    got = prep.data_moments
    if got is None:
        NQ = prep.SpT.shape[0] * prep.xqT.shape[0]
        G, b = np.empty((NQ, NQ)), np.empty(NQ)
        y2 = float(data_moments(prep.SpT, prep.xqT, prep.yq, G, b))
        got = prep.data_moments = (G, b, y2)
    return got


def prefix_rows(prep: LinearData, idx: np.ndarray, full: bool) -> np.ndarray:
    """The rows of ``prep.SpT`` that the samples ``idx`` own: idx itself for the last-token
    loss; for the cumulative loss (rows prefix-major, :func:`pack_prefixes`) (n−1)·P + idx_k for
    n = 1..N, k in order (``full``: idx is 0..P−1, and the rows 0..N·P−1 are kept in
    ``prep.all_rows``)."""
    if prep.loss != "cumulative":
        return idx
    P, N = prep.n_samples, prep.N
    if full:
        rows = prep.all_rows
        if rows is None:
            rows = prep.all_rows = np.arange(N * P, dtype=np.int64)
        return rows
    return (np.arange(N, dtype=np.int64)[:, None] * P + idx[None, :]).ravel()


# ---------------------------------------------------------------- softmax (query row only)


@njit(**SERIAL)
def soft_load(mu, tokens, labels, X, XT):
    """X (N+1 × D1) = the tokens of sample ``mu`` with their labels, XT = Xᵀ."""
    D = X.shape[1] - 1
    N1 = X.shape[0]
    for j in range(N1):
        for b in range(D):
            X[j, b] = tokens[mu, j, b]
        X[j, D] = labels[mu, j]
    for j in range(N1):
        for b in range(D + 1):
            XT[b, j] = X[j, b]


@njit(**SERIAL)
def soft_scores(n, r, BT, X, XT, af, alpha, o, mx):
    """Prefix n of the sample in X, XT (:func:`soft_load`): alpha[i, j] = s_ij = x̂_jᵀ B_i x_q,
    o[i, j] = x̂_jᵀ r_i (query label hidden) and mx[i] = max_j s_ij, for j ≤ n.

    af[i·D1 + b] = (B_i x_q)_b is summed over c in order, vectorised across the H·D1 rows of B
    (BT = B as (D, H·D1)); the scores and values are each summed over b in order, vectorised
    across the tokens j (a row of XT holds one feature of every token, contiguous)."""
    H, D1 = r.shape
    D = D1 - 1
    for ib in range(H * D1):
        af[ib] = 0.0
    for c in range(D):
        xc = X[n, c]
        for ib in range(H * D1):
            af[ib] += BT[c, ib] * xc
    XT[D, n] = 0.0
    for i in range(H):
        for j in range(n + 1):
            alpha[i, j] = 0.0
            o[i, j] = 0.0
        for b in range(D1):
            ab = af[i * D1 + b]
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


@njit(**SERIAL)
def soft_finish(n, y, X, alpha, o, yh, gr, ga, out):
    """Prefix n, target y, once alpha[i, j] holds e^(s_ij − mx_i) (:func:`soft_scores`, then the
    target's exp): α_i = alpha_i / Σ_j alpha_ij, ŷ = Σ_i Σ_j α_ij o_ij, δ = y − ŷ; adds δ²,
    δ ∂ŷ/∂r (H·D1) and δ ∂ŷ/∂B (H·D1·D) into out.

    g_r,i = Σ_j α_ij x̂_j, g_a,i = Σ_j α_ij (o_ij − ŷ_i) x̂_j, ∂ŷ/∂B_i = g_a,i x_qᵀ: the sums run
    token-major with the heads inside, the outer product with x_q taken once per head."""
    H = alpha.shape[0]
    D1 = X.shape[1]
    D = D1 - 1
    yhat = 0.0
    for i in range(H):
        z = 0.0
        for j in range(n + 1):
            z += alpha[i, j]
        y_i = 0.0
        for j in range(n + 1):
            alpha[i, j] /= z  # a division, not × 1/z: α_ij as the spec writes it
            y_i += alpha[i, j] * o[i, j]
        yh[i] = y_i
        yhat += y_i
    d = y - yhat
    out[0] += d * d
    for i in range(H):
        for b in range(D1):
            gr[i, b] = 0.0
            ga[i, b] = 0.0
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
    offB = 1 + H * D1
    for i in range(H):
        for b in range(D1):
            out[1 + i * D1 + b] += gr[i, b]
            base = offB + (i * D1 + b) * D
            for c in range(D):
                out[base + c] += ga[i, b] * X[n, c]


@njit(**SERIAL)
def _soft_block(blk, idx, tokens, labels, cumulative, r, B, out):
    """One block of the softmax kernel: out = [Σ δ², Σ w ∂ŷ/∂r (H·D1), Σ w ∂ŷ/∂B (H·D1·D)]
    with w = δ (the caller scales by −2/(P T)).

    Per sample :func:`soft_load`, then per prefix :func:`soft_scores`, the weights e^(s − max)
    (branch free: the loop over tokens vectorises) and :func:`soft_finish` (the CUDA twin runs
    the same three functions, with the device's exp). Every sum keeps its order (over c; over b,
    then the label column; over j within a head), so finite results are those of the plain loops
    bit for bit (a NaN may come out with the other sign)."""
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
    for k in range(lo, hi):
        mu = idx[k]
        soft_load(mu, tokens, labels, X, XT)
        for n in range(n0, N + 1):
            soft_scores(n, r, BT, X, XT, af, alpha, o, mx)
            for i in range(H):
                m = mx[i]
                for j in range(n + 1):
                    alpha[i, j] = exp_nonpos(alpha[i, j] - m)
            soft_finish(n, labels[mu, n], X, alpha, o, yh, gr, ga, out)


@njit(**PARALLEL)
def soft(idx, tokens, labels, cumulative, r, B, partials):
    """Per-block partials of the softmax attention loss and gradient."""
    nb = partials.shape[0]
    for blk in prange(nb):
        partials[blk, :] = 0.0
        _soft_block(np.int64(blk), idx, tokens, labels, cumulative, r, B, partials[blk])


def softmax_loss_and_grad(
    kernel: Callable, r: np.ndarray, B: np.ndarray, prep: AttentionData, idx: np.ndarray,
    dr: np.ndarray, dB: np.ndarray,
) -> float:  # fmt: skip
    """Loss and (∂L/∂r, ∂L/∂B) of softmax attention over the samples ``idx`` on the per-sample
    kernel ``kernel``: :func:`soft` or its CUDA twin."""
    H, D1 = r.shape
    D = D1 - 1
    width = 1 + H * D1 + H * D1 * D
    partials = np.empty((n_blocks(idx.shape[0]), width))
    cumulative = prep.loss == "cumulative"
    kernel(idx, prep.tokens, prep.labels, cumulative, r, B, partials)
    nterm = idx.shape[0] * ((prep.tokens.shape[1] - 1) if cumulative else 1)
    tot = np.zeros(width)
    accumulate_blocks(tot, partials)
    coef = -2.0 / nterm
    dr[:] = coef * tot[1 : 1 + H * D1].reshape(H, D1)
    dB[:] = coef * tot[1 + H * D1 :].reshape(H, D1, D)
    return float(tot[0] / nterm)


def prepare_attention(
    tokens: np.ndarray, labels: np.ndarray, scale: str, loss: str, softmax: bool,
    prefix_rows: bool = True, moments: bool = True,
) -> LinearData | SoftmaxData:  # fmt: skip
    """Per-sample arrays the attention kernels read, computed once: the tokens and labels; for
    linear attention the rows :func:`lin_last` reads, samples contiguous — packed S as ``SpT``
    ((D+1)(D+2)/2, rows), the query as ``xqT`` (D, rows) and its target ``yq`` (rows,): for the
    last-token loss one row per sample (S_μ = X_μX_μᵀ, x_q, y_q, ``inv_rho`` = 1/ρ), for the
    cumulative loss N rows per sample (:func:`pack_prefixes`: S_n, x_n/ρ_n, y_n, ``inv_rho`` = 1)
    while they take at most ``PREFIX_BYTES_MAX`` bytes and ``prefix_rows`` (else none:
    :func:`lin_cum` then reads the tokens; the CUDA twin takes that path, as its last-token
    scratch per row would be about D times the prepared rows on the device). ``moments``: a
    full-batch loss on these rows comes from their moments (:func:`full_moments`) where
    :func:`~fastdyn.models.icl.config.uses_moments` says so (``prep.moments``). Returns a
    :class:`~fastdyn.models.icl.prepared.LinearData` or, for softmax, a ``SoftmaxData``."""
    from ..config import PREFIX_BYTES_MAX, prefix_moment_bytes, uses_moments

    P, T1, D1 = tokens.shape
    N = T1 - 1
    D = D1 - 1
    common = {
        "n_samples": P,
        "loss": loss,
        "N": N,
        "scale_n": scale == "N",
        "tokens": np.ascontiguousarray(tokens, dtype=np.float64),
        "labels": np.ascontiguousarray(labels, dtype=np.float64),
    }
    if softmax:
        return SoftmaxData(**common)
    prep = LinearData(**common, inv_rho=(1.0 / N) if scale == "N" else 1.0)
    NP = D1 * (D1 + 1) // 2
    if loss == "last":
        Sp = np.empty((P, NP))
        pack_S(prep.tokens, Sp)
        prep.SpT = np.ascontiguousarray(Sp.T)
        prep.xqT = np.ascontiguousarray(tokens[:, -1, :D].T, dtype=np.float64)
        prep.yq = np.ascontiguousarray(labels[:, -1], dtype=np.float64)
    elif prefix_rows and prefix_moment_bytes(P, N, D) <= PREFIX_BYTES_MAX:
        prep.SpT = np.empty((NP, N * P))
        prep.xqT = np.empty((D, N * P))
        prep.yq = np.empty(N * P)
        pack_prefixes(prep.tokens, prep.labels, prep.scale_n, prep.SpT, prep.xqT, prep.yq)
        prep.inv_rho = 1.0
    prep.moments = bool(moments and prep.SpT is not None and uses_moments(prep.yq.shape[0], D))
    return prep


# ------------------------------------------------------------------------- the data's moments
#
# Linear attention's prediction is linear in the folded weights: ŷ = (1/ρ) φ·m with φ_q = S_p x_c
# and m_q = Msym[p, c] (q = p·D + c, NQ = NP·D entries). Over a fixed training set the loss and T
# are therefore quadratic and linear in m through three moments of the data, taken once:
#
#     G = Σ_μ φ_μ φ_μᵀ (NQ × NQ),   b = Σ_μ y_μ φ_μ,   y2 = Σ_μ y_μ²
#     Σ δ² = y2 − (2/ρ) m·b + (1/ρ²) m·Gm,   T = (1/ρ) b − (1/ρ²) Gm
#
# so a full-batch step costs O(NQ²) instead of O(P·NQ). The same sums as :func:`lin_last`'s,
# in another order: their difference is round-off, but Σ δ² is a difference of terms of size
# y2, so its absolute error is ~1e-16·y2 (relative ~1e-16·y2/Σδ²) where the per-sample sum's is
# ~1e-16·Σδ²; T's likewise ~1e-16·|b|. Below MOMENT_FLOOR·y2 (near an exact fit) a step's
# totals come from the rows instead (``icl.config.MOMENT_FLOOR``). MOMENT_CHUNK rows of φ are
# formed at a time (≤ 1 MB for NQ ≤ 512);
# :func:`fastdyn.models.icl.config.uses_moments` says which sets use them.

#: rows of φ a block forms at once (NQ × MOMENT_CHUNK floats)
MOMENT_CHUNK = 256


@njit(**SERIAL)
def _moments_block(blk, SpT, xqT, yq, phi, out):
    """Block ``blk``'s rows [blk·BLOCK, …) added into out = [G (NQ × NQ, upper triangle q ≤ q2),
    b (NQ), y2] (zeroed here), MOMENT_CHUNK rows at a time, each chunk's sums in row order."""
    NP = SpT.shape[0]
    D = xqT.shape[0]
    NQ = NP * D
    lo = blk * BLOCK
    hi = min(lo + BLOCK, yq.shape[0])
    for q in range(out.shape[0]):
        out[q] = 0.0
    y = np.empty(MOMENT_CHUNK)
    for c0 in range(lo, hi, MOMENT_CHUNK):
        m = min(MOMENT_CHUNK, hi - c0)
        for p in range(NP):
            for c in range(D):
                row = phi[p * D + c]
                for k in range(m):
                    row[k] = SpT[p, c0 + k] * xqT[c, c0 + k]
        for k in range(m):
            y[k] = yq[c0 + k]
        for q in range(NQ):
            a = phi[q]
            for q2 in range(q, NQ):
                out[q * NQ + q2] += lane_dot(a, phi[q2], m)
            out[NQ * NQ + q] += lane_dot(a, y, m)
        out[NQ * NQ + NQ] += lane_dot(y, y, m)


@njit(**PARALLEL)
def _moments_pass(b0, nb, SpT, xqT, yq, partials):
    D = xqT.shape[0]
    NQ = SpT.shape[0] * D
    for j in prange(nb):
        phi = np.empty((NQ, MOMENT_CHUNK))
        _moments_block(np.int64(b0 + j), SpT, xqT, yq, phi, partials[j])


@njit(**SERIAL)
def data_moments(SpT, xqT, yq, G, b):
    """G = Σ φφᵀ (both triangles filled), b = Σ y φ over all rows of the SoA arrays (see above);
    returns y2 = Σ y². Blocks of ``reduce.BLOCK`` rows, MOMENT_BLOCKS_AT_ONCE blocks at a time on the
    threads, added in block order: bit-identical for any number of threads."""
    NQ = G.shape[0]
    nblk = (yq.shape[0] + BLOCK - 1) // BLOCK
    partials = np.empty((min(MOMENT_BLOCKS_AT_ONCE, nblk), NQ * NQ + NQ + 1))
    tot = np.zeros(NQ * NQ + NQ + 1)
    for b0 in range(0, nblk, MOMENT_BLOCKS_AT_ONCE):
        nb = min(MOMENT_BLOCKS_AT_ONCE, nblk - b0)
        _moments_pass(b0, nb, SpT, xqT, yq, partials)
        accumulate_blocks(tot, partials[:nb])
    for q in range(NQ):
        for q2 in range(q, NQ):
            G[q, q2] = tot[q * NQ + q2]
            G[q2, q] = tot[q * NQ + q2]
        b[q] = tot[NQ * NQ + q]
    return tot[NQ * NQ + NQ]


@njit(**SERIAL)
def lin_moments(G, b, y2, inv_rho, m, u, tot):
    """tot = [Σ δ², T_pc (packed, p-major)] of the full set from its moments (see above), the
    totals :func:`lin_last`'s partials add up to: u = Gm (columns of G in order, vectorised),
    then the two dot products in order. ``m``: Msym (:func:`contract_M`) flat, p-major (NQ);
    ``u``: scratch of NQ."""
    prefer_wide_vectors()  # Gm streams G: 512-bit vectors, 15.6 -> 12.2 µs at NQ = 360
    NQ = m.shape[0]
    for q in range(NQ):
        u[q] = 0.0
    q2 = 0  # G symmetric: row q2 is column q2; four columns a pass, added in column order
    while q2 + 4 <= NQ:
        g0, g1, g2, g3 = G[q2], G[q2 + 1], G[q2 + 2], G[q2 + 3]
        m0, m1, m2, m3 = m[q2], m[q2 + 1], m[q2 + 2], m[q2 + 3]
        for q in range(NQ):
            u[q] = (((u[q] + g0[q] * m0) + g1[q] * m1) + g2[q] * m2) + g3[q] * m3
        q2 += 4
    while q2 < NQ:
        g0, m0 = G[q2], m[q2]
        for q in range(NQ):
            u[q] = u[q] + g0[q] * m0
        q2 += 1
    mb = 0.0
    mu = 0.0
    for q in range(NQ):
        mb += m[q] * b[q]
        mu += m[q] * u[q]
    ir2 = inv_rho * inv_rho
    tot[0] = y2 - 2.0 * inv_rho * mb + ir2 * mu
    for q in range(NQ):
        tot[1 + q] = inv_rho * b[q] - ir2 * u[q]
