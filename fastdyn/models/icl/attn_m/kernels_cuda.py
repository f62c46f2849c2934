"""CUDA twins of the per-sample attention kernels of :mod:`.kernels` (ATTN_M and ATTN_S share
them through r_i, B_i): ``lin_last``, ``lin_cum`` and ``soft``, same arguments in the same
order, for :func:`.kernels.linear_loss_and_grad` and :func:`.kernels.softmax_loss_and_grad`.

Each kernel is two launches: one thread per sample (per row: ``lin_last`` also runs the
cumulative loss on its prepared prefix rows, as on the CPU) writes that sample's contribution row
[δ², gradient terms], then one thread per (block, column) adds its block's rows in sample order.
``lin_cum`` (the cumulative loss of a set above ``PREFIX_BYTES_MAX``, from the tokens) and
``soft``'s threads run the CPU's own per-sample functions (:func:`.kernels.lin_cum_sample`;
:func:`.kernels.soft_load`, :func:`~.kernels.soft_scores`, :func:`~.kernels.soft_finish`),
compiled for the device from the same Python source; only the softmax weights' exp is the
device's (the CPU's is the branch-free ``exp_nonpos``). ``lin_last`` keeps its own per-row loop:
the CPU kernel has no per-row function (it runs elementwise across the rows of a tile, in lanes).
The CPU sums differ by round-off only (≤ 1e-15 relative in tests/cuda): its ``lin_last`` adds a
block's rows into lanes that are summed pairwise, and for ``lin_cum`` and ``soft`` the GPU sums
the prefixes of one sample first and then adds them (the CPU adds every prefix straight into the
block sum). The per-sample arrays (packed S, x_q, y_q, tokens, labels) are copied to the device
once and reused across steps.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .... import _cuda_memory as _mem
from ....reduce import BLOCK
from .kernels import lin_cum_sample, soft_finish, soft_load, soft_scores

_k: dict[str, object] = {}


def _dev(a: np.ndarray, name: str):
    """The device copy of a constant host array (the training data: copied once per array)."""
    return _mem.resident("attn", name, a)


def _buf(name: str, shape: tuple[int, ...]):
    """A device scratch array reused from step to step (allocated once per shape)."""
    return _mem.buffer("attn", name, shape)


def _build() -> None:
    @cuda.jit
    def lin_last_rows(idx, SpT, xqT, yq, inv_rho, Mf, D, rows):
        k = cuda.grid(1)
        if k >= idx.shape[0]:
            return
        mu = idx[k]
        NQ = Mf.shape[0]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        q = 0
        while q + 4 <= NQ:
            s0 += (SpT[q // D, mu] * xqT[q % D, mu]) * Mf[q]
            s1 += (SpT[(q + 1) // D, mu] * xqT[(q + 1) % D, mu]) * Mf[q + 1]
            s2 += (SpT[(q + 2) // D, mu] * xqT[(q + 2) % D, mu]) * Mf[q + 2]
            s3 += (SpT[(q + 3) // D, mu] * xqT[(q + 3) % D, mu]) * Mf[q + 3]
            q += 4
        while q < NQ:
            s0 += (SpT[q // D, mu] * xqT[q % D, mu]) * Mf[q]
            q += 1
        yhat = (s0 + s1) + (s2 + s3)
        d = yq[mu] - yhat * inv_rho
        rows[k, 0] = d * d
        w = d * inv_rho
        for q in range(NQ):
            rows[k, 1 + q] = w * (SpT[q // D, mu] * xqT[q % D, mu])

    cum_sample = cuda.jit(device=True)(lin_cum_sample.py_func)

    @cuda.jit
    def lin_cum_rows(idx, tokens, labels, scale_n, Msym, Sc, Sn, rows):
        k = cuda.grid(1)
        if k >= idx.shape[0]:
            return
        for c in range(rows.shape[1]):
            rows[k, c] = 0.0
        cum_sample(idx[k], tokens, labels, scale_n, Msym, Sc[k], Sn[k], rows[k])

    load = cuda.jit(device=True)(soft_load.py_func)
    scores = cuda.jit(device=True)(soft_scores.py_func)
    finish = cuda.jit(device=True)(soft_finish.py_func)

    @cuda.jit
    def soft_rows(
        idx, tokens, labels, cumulative, r, BT, X, XT, af, alpha, o, mx, yh, gr, ga, rows
    ):
        k = cuda.grid(1)
        if k >= idx.shape[0]:
            return
        H = r.shape[0]
        N = tokens.shape[1] - 1
        mu = idx[k]
        for c in range(rows.shape[1]):
            rows[k, c] = 0.0
        load(mu, tokens, labels, X[k], XT[k])
        for n in range(1 if cumulative else N, N + 1):
            scores(n, r, BT, X[k], XT[k], af[k], alpha[k], o[k], mx[k])
            for i in range(H):
                for j in range(n + 1):
                    alpha[k, i, j] = math.exp(alpha[k, i, j] - mx[k, i])
            finish(n, labels[mu, n], X[k], alpha[k], o[k], yh[k], gr[k], ga[k], rows[k])

    @cuda.jit
    def reduce_rows(rows, partials):
        blk, c = cuda.grid(2)
        nb, width = partials.shape
        if blk >= nb or c >= width:
            return
        lo = blk * BLOCK
        hi = min(rows.shape[0], lo + BLOCK)
        s = 0.0
        for k in range(lo, hi):
            s += rows[k, c]
        partials[blk, c] = s

    _k.update(lin_last=lin_last_rows, lin_cum=lin_cum_rows, soft=soft_rows, reduce=reduce_rows)


def _kernels() -> dict[str, object]:
    if not _k:
        _build()
    return _k


def _per_sample(n: int) -> tuple[int, int]:
    tpb = 128
    return max(1, math.ceil(n / tpb)), tpb


def _reduce(d_rows, partials: np.ndarray) -> None:
    nb, width = partials.shape
    d_p = _buf("partials", (nb, width))
    grid = (max(1, math.ceil(nb / 4)), max(1, math.ceil(width / 64)))
    _kernels()["reduce"][grid, (4, 64)](d_rows, d_p)
    d_p.copy_to_host(partials)


def lin_last(idx, SpT, xqT, yq, inv_rho, Msym, full, partials) -> None:  # noqa: ARG001
    """GPU twin of :func:`.kernels.lin_last` (per-block partials of loss and T; ``full`` unused:
    every sample is read through idx)."""
    NP, D = Msym.shape
    d_rows = _buf("rows", (idx.shape[0], 1 + NP * D))
    _kernels()["lin_last"][_per_sample(idx.shape[0])](
        _mem.to_device("attn", "idx", idx), _dev(SpT, "SpT"), _dev(xqT, "xqT"), _dev(yq, "yq"), float(inv_rho), _mem.to_device("attn", "Msym", np.ascontiguousarray(Msym).ravel()), D, d_rows
    )  # fmt: skip
    _reduce(d_rows, partials)


def lin_cum(idx, tokens, labels, scale_n, Msym, partials) -> None:
    """GPU twin of :func:`.kernels.lin_cum`."""
    NP, D = Msym.shape
    P = idx.shape[0]
    d_rows = _buf("rows", (P, 1 + NP * D))
    sc, sn = _buf("sc", (P, NP)), _buf("sn", (P, NP))
    _kernels()["lin_cum"][_per_sample(P)](
        _mem.to_device("attn", "idx", idx), _dev(tokens, "tokens"), _dev(labels, "labels"), bool(scale_n), _mem.to_device("attn", "Msym", Msym), sc, sn, d_rows
    )  # fmt: skip
    _reduce(d_rows, partials)


def soft(idx, tokens, labels, cumulative, r, B, partials) -> None:
    """GPU twin of :func:`.kernels.soft` (the device's exp for the weights, where the CPU has
    its branch-free exp_nonpos)."""
    H, D1 = r.shape
    N1 = tokens.shape[1]
    P = idx.shape[0]
    d_rows = _buf("rows", (P, partials.shape[1]))
    BT = np.ascontiguousarray(B.reshape(H * D1, D1 - 1).T)  # BT[c, i·D1 + b] = B[i, b, c]
    scratch = (_buf("s_X", (P, N1, D1)), _buf("s_XT", (P, D1, N1)), _buf("s_af", (P, H * D1)),
               _buf("s_alpha", (P, H, N1)), _buf("s_o", (P, H, N1)), _buf("s_mx", (P, H)),
               _buf("s_yh", (P, H)), _buf("s_gr", (P, H, D1)), _buf("s_ga", (P, H, D1)))  # fmt: skip
    _kernels()["soft"][_per_sample(P)](
        _mem.to_device("attn", "idx", idx), _dev(tokens, "tokens"), _dev(labels, "labels"), bool(cumulative), _mem.to_device("attn", "r", r), _mem.to_device("attn", "BT", BT), *scratch, d_rows
    )  # fmt: skip
    _reduce(d_rows, partials)
