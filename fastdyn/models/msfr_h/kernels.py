"""Per-task maths of msfr-h, the three functions of :class:`fastdyn.models.OdeMaths` (the driver
compiles them into its CPU integrators and, from the same source, into CUDA device functions).

p = (#/N, Λ, P(s), H row-major (d² entries), μ, P0, Q0); y = (v, w) ∈ R^{2d}. f = vᵀHw,
r = f − Λ, dv/dt = −(#/N) r H w, dw/dt = −(#/N) r H v (docs/theory.md, MSFR with a general H).
μ, P0, Q0 are the closed form's constants (:mod:`.theory`); the flow never reads them. The
functions call no other compiled function, so each compiles as one CUDA device function.
"""

from __future__ import annotations

from numba import njit

from ..._jit import SERIAL

#: rows of the parameter column before H's entries
N_SCALARS = 3
#: rows after H's entries: the closed form's μ, P0, Q0
N_THEORY = 3


def n_params(d: int) -> int:
    """Rows of the parameter column of a d-dim task."""
    return N_SCALARS + d * d + N_THEORY


@njit(**SERIAL)
def rhs(p, y, dy):
    """(dv, dw) = −(#/N) r (H w, H v)."""
    d = y.shape[0] // 2
    f = 0.0
    for i in range(d):
        hw = 0.0
        hv = 0.0
        for j in range(d):
            hij = p[N_SCALARS + i * d + j]
            hw += hij * y[d + j]
            hv += hij * y[j]
        dy[i] = hw
        dy[d + i] = hv
        f += y[i] * hw
    c = -p[0] * (f - p[1])
    for k in range(2 * d):
        dy[k] *= c


@njit(**SERIAL)
def observe(p, y):
    """f = vᵀ H w."""
    d = y.shape[0] // 2
    f = 0.0
    for i in range(d):
        hw = 0.0
        for j in range(d):
            hw += p[N_SCALARS + i * d + j] * y[d + j]
        f += y[i] * hw
    return f


@njit(**SERIAL)
def loss(p, y):
    """(P(s) r²/2, (#/N) r²/2), r = vᵀ H w − Λ (vᵀ H w: :func:`observe`)."""
    r = observe(p, y) - p[1]
    h = 0.5 * r * r
    return p[2] * h, p[0] * h
