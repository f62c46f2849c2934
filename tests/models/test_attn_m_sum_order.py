"""ATTN_M's per-step contractions keep their sums' order: ``contract_M`` and ``heads_from_T``
against plain loops that add one term at a time in the documented order (numpy only), equal bit
for bit. Their loops take several heads or steps a pass for speed; this pins down that the
additions, and so every run's bits, are those of the plain loops."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.models.icl.attn_m.kernels import contract_M, heads_from_T

SHAPES = [(H, D) for H in (1, 3, 4, 5, 8, 9) for D in (1, 2, 4, 7)]


def _contract_plain(r, B):
    """M_abc + M_bac (a < b) or M_aac, head i's terms in head order (r_ia B_ibc, then r_ib B_iac)."""
    H, D1 = r.shape
    D = B.shape[2]
    M = np.zeros((D1 * (D1 + 1) // 2, D))
    for i in range(H):
        p = 0
        for a in range(D1):
            for b in range(a, D1):
                for c in range(D):
                    M[p, c] = M[p, c] + r[i, a] * B[i, b, c]
                    if a != b:
                        M[p, c] = M[p, c] + r[i, b] * B[i, a, c]
                p += 1
    return M


def _heads_plain(r, B, Tp, coef):
    """dr_ia = coef Σ_bc T_abc B_ibc ((b, c) in order), dB_ibc = coef Σ_a r_ia T_abc (a in order)."""
    H, D1 = r.shape
    D = B.shape[2]
    T = np.empty((D1, D1, D))
    p = 0
    for a in range(D1):
        for b in range(a, D1):
            T[a, b] = T[b, a] = Tp[p * D : (p + 1) * D]
            p += 1
    dr, dB = np.empty((H, D1)), np.empty((H, D1, D))
    for i in range(H):
        for a in range(D1):
            s = 0.0
            for b in range(D1):
                for c in range(D):
                    s = s + T[a, b, c] * B[i, b, c]
            dr[i, a] = coef * s
        for b in range(D1):
            for c in range(D):
                s = 0.0
                for a in range(D1):
                    s = s + r[i, a] * T[a, b, c]
                dB[i, b, c] = coef * s
    return dr, dB


@pytest.mark.parametrize(("H", "D"), SHAPES)
def test_contractions_add_in_the_plain_order(H, D):
    rng = np.random.default_rng(100 * H + D)
    D1 = D + 1
    r, B = rng.standard_normal((H, D1)), rng.standard_normal((H, D1, D))
    M = np.empty((D1 * (D1 + 1) // 2, D))
    contract_M(r, B, M)
    assert np.array_equal(M, _contract_plain(r, B))
    Tp = rng.standard_normal(M.size)
    dr, dB = np.empty((H, D1)), np.empty((H, D1, D))
    heads_from_T(r, B, Tp, -0.37, dr, dB)
    want_r, want_B = _heads_plain(r, B, Tp, -0.37)
    assert np.array_equal(dr, want_r)
    assert np.array_equal(dB, want_B)
