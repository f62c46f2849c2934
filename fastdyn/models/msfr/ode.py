"""③ The MSFR per-task gradient flow (docs/theory.md, MSFR): right-hand side and loss terms.

Task s has two weight vectors v_s, w_s ∈ R² (its block of W_V and W_KQ); the state of one task is
``y = (v_x, v_y, w_x, w_y)`` (dimensionless weights). With u = (1, Λ) the context direction and
e = (1, 0) the query direction,

    H = ψ u uᵀ + q e eᵀ                       (q = 1: exact Rademacher H; q = 0: H⁰, the ε = 0 model)
    f = vᵀ H w = ψ (uᵀv)(uᵀw) + q v_x w_x,     r = f − Λ
    dv/dt = −rate · r · H w,    dw/dt = −rate · r · H v,      rate = #_s / N

t is gradient-flow time (dimensionless; for gd t = η · step). The per-task loss terms are
``wtest · r² / 2`` (test, wtest = P(s)) and ``rate · r² / 2`` (train).

Scalar kernels (``task_*``) take the task parameters as one tuple ``p = (lam, psi, q, rate)`` and the
state as a 4-tuple, so that steppers can be written once for any small ODE (see
:mod:`fastdyn.core.steppers`); they are inlined at the numba IR level, which lets LLVM vectorise
the lane loops of :mod:`fastdyn.models.msfr.integrate`. :func:`rhs` and :func:`loss` are the array
versions of the kernel interface (``models/_spec.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..._jit import SERIAL

#: state components per task, rows of a (N_STATE, n) state array
N_STATE: int = 4
VX, VY, WX, WY = 0, 1, 2, 3

#: rows of the (N_PARAMS, n) parameter array of the array interface
N_PARAMS: int = 5
P_LAM, P_PSI, P_RATE, P_WTEST, P_QUERY = 0, 1, 2, 3, 4

_INLINE = dict(SERIAL, inline="always")


@njit(**_INLINE)
def task_rhs(p, y):
    """``(dy/dt, f)`` of one task: dv = −rate·r·H w, dw = −rate·r·H v, with p = (Λ, ψ, q, rate)."""
    lam, psi, q, rate = p
    vx, vy, wx, wy = y
    uv = vx + lam * vy
    uw = wx + lam * wy
    f = psi * uv * uw + q * (vx * wx)
    c = -rate * (f - lam)
    a = psi * uw  # H w = (a + q w_x, a Λ)
    b = psi * uv  # H v = (b + q v_x, b Λ)
    return (c * (a + q * wx), c * (a * lam), c * (b + q * vx), c * (b * lam)), f


@njit(**_INLINE)
def task_rhs_q1(p, y):
    """:func:`task_rhs` specialised to q = 1 (the exact Rademacher H, the default): the same
    operations with the multiplications by q = 1 left out, so it is bit-identical to
    ``task_rhs`` (x · 1.0 == x for every float) with three multiplications fewer (p[2] is unused).
    The RK4/gd lane loops use it when q == 1."""
    lam, psi, q, rate = p
    vx, vy, wx, wy = y
    uv = vx + lam * vy
    uw = wx + lam * wy
    f = psi * uv * uw + vx * wx
    c = -rate * (f - lam)
    a = psi * uw
    b = psi * uv
    return (c * (a + wx), c * (a * lam), c * (b + vx), c * (b * lam)), f


@njit(**_INLINE)
def task_dir(p, y):
    """``(A, f)`` of one task with dy/dt = rate·(Λ − f)·A: the direction A = (H w, H v) =
    (ψ u·w + q w_x, ψΛ u·w, ψ u·v + q v_x, ψΛ u·v) and f = vᵀHw, p = (Λ, ψ, q, rate). The factored
    :func:`task_rhs` that RK4 steps with (:func:`fastdyn.models.msfr.steps.rk4_gain_step`); ψΛ is
    one product per step once the stages are inlined."""
    lam, psi, q, rate = p
    vx, vy, wx, wy = y
    uv = vx + lam * vy
    uw = wx + lam * wy
    b = psi * uv
    f = b * uw + q * (vx * wx)
    pl = psi * lam
    return (psi * uw + q * wx, pl * uw, b + q * vx, pl * uv), f


@njit(**_INLINE)
def task_dir_q1(p, y):
    """:func:`task_dir` specialised to q = 1 (the default): the same operations with the
    multiplications by q = 1 left out (p[2] is unused). Bit-identical to ``task_dir`` with q = 1
    (x · 1.0 == x for every float) where nothing is contracted; under FMA contraction (the RK4
    lanes) the compiler may fuse a different product, 1–2 ulp apart, so a kernel picks one of
    the two by q once and uses it for every step and restart."""
    lam, psi, q, rate = p
    vx, vy, wx, wy = y
    uv = vx + lam * vy
    uw = wx + lam * wy
    b = psi * uv
    f = b * uw + vx * wx
    pl = psi * lam
    return (psi * uw + wx, pl * uw, b + vx, pl * uv), f


@njit(**_INLINE)
def task_f(p, y):
    """f = vᵀ H w of one task."""
    lam, psi, q, rate = p
    vx, vy, wx, wy = y
    return psi * (vx + lam * vy) * (wx + lam * wy) + q * (vx * wx)


@njit(**SERIAL)
def h_eigmax(lam, psi, q):
    """Largest eigenvalue of H = ψ u uᵀ + q e eᵀ: [T + sqrt(T² − 4ψqΛ²)]/2, T = ψ(1+Λ²) + q."""
    tr = psi * (1.0 + lam * lam) + q
    det = psi * q * lam * lam
    disc = tr * tr - 4.0 * det
    return 0.5 * (tr + math.sqrt(max(disc, 0.0)))


@njit(**SERIAL)
def rate_scale(p, y):
    """σ = rate · λmax(H) · (|Λ| + |r(y)|), the task's fastest rate (units 1/time).

    The linearised flow has growth rate rate·|r|·λmax (early, |r| ≈ Λ) and decay rate
    rate·|∇f|² ≈ 2·rate·λmax·Λ (late); σ bounds both for small init and equals a_s R_s = 2 a_s Λ_s
    of the Riccati solution up to O(ε, init). Zero only when the task never moves.
    """
    lam, psi, q, rate = p
    r = task_f(p, y) - lam
    return rate * h_eigmax(lam, psi, q) * (abs(lam) + abs(r))


@njit(**_INLINE)
def task_loss(r, rate, wtest):
    """(test term wtest·r²/2, train term rate·r²/2) of one task."""
    rr = 0.5 * r * r
    return wtest * rr, rate * rr


@njit(**SERIAL)
def rhs(t, state, params, d_state):
    """Array interface: d_state[:, i] = dy/dt of task i; state (4, n), params (5, n) rows
    (Λ, ψ, rate, wtest, q). ``t`` is unused (the flow is autonomous)."""
    n = state.shape[1]
    for i in range(n):
        p = (params[P_LAM, i], params[P_PSI, i], params[P_QUERY, i], params[P_RATE, i])
        d, _ = task_rhs(p, (state[0, i], state[1, i], state[2, i], state[3, i]))
        d_state[0, i] = d[0]
        d_state[1, i] = d[1]
        d_state[2, i] = d[2]
        d_state[3, i] = d[3]


@njit(**SERIAL)
def loss(state, params, out):
    """Array interface: out[0] += Σ_i wtest_i r_i²/2, out[1] += Σ_i rate_i r_i²/2 (task order)."""
    n = state.shape[1]
    for i in range(n):
        p = (params[P_LAM, i], params[P_PSI, i], params[P_QUERY, i], params[P_RATE, i])
        r = task_f(p, (state[0, i], state[1, i], state[2, i], state[3, i])) - params[P_LAM, i]
        te, tr = task_loss(r, params[P_RATE, i], params[P_WTEST, i])
        out[0] += te
        out[1] += tr


def pack_params(
    lam: np.ndarray, psi: np.ndarray, rate: np.ndarray, wtest: np.ndarray, query: bool = True
) -> np.ndarray:
    """The (5, n) parameter array of the array interface."""
    n = np.asarray(lam).shape[0]
    out = np.empty((N_PARAMS, n))
    out[P_LAM], out[P_PSI], out[P_RATE], out[P_WTEST] = lam, psi, rate, wtest
    out[P_QUERY] = 1.0 if query else 0.0
    return out


# ---- one task's column: the functions of the engine's ODE contract (fastdyn.models.OdeMaths) ----
# p = (Λ, ψ, rate, wtest, q) (rows P_*), y = (v_x, v_y, w_x, w_y). Each calls no other compiled
# function, so the driver compiles each, from its Python source, as one CUDA device function too.


@njit(**SERIAL)
def column_rhs(p, y, dy):
    """dy/dt of one task: dv = −rate·r·H w, dw = −rate·r·H v (the operations of :func:`task_rhs`)."""
    lam, psi, rate, q = p[P_LAM], p[P_PSI], p[P_RATE], p[P_QUERY]
    vx, vy, wx, wy = y[0], y[1], y[2], y[3]
    uv = vx + lam * vy
    uw = wx + lam * wy
    f = psi * uv * uw + q * (vx * wx)
    c = -rate * (f - lam)
    a = psi * uw
    b = psi * uv
    dy[0] = c * (a + q * wx)
    dy[1] = c * (a * lam)
    dy[2] = c * (b + q * vx)
    dy[3] = c * (b * lam)


@njit(**SERIAL)
def column_f(p, y):
    """f = vᵀ H w of one task."""
    lam = p[P_LAM]
    return p[P_PSI] * (y[0] + lam * y[1]) * (y[2] + lam * y[3]) + p[P_QUERY] * (y[0] * y[2])


@njit(**SERIAL)
def column_loss(p, y):
    """(wtest·r²/2, rate·r²/2) of one task, r = f − Λ."""
    lam = p[P_LAM]
    f = p[P_PSI] * (y[0] + lam * y[1]) * (y[2] + lam * y[3]) + p[P_QUERY] * (y[0] * y[2])
    rr = 0.5 * (f - lam) * (f - lam)
    return p[P_WTEST] * rr, p[P_RATE] * rr


@njit(**SERIAL)
def column_rate_scale(p, y):
    """σ = rate·λmax(H)·(|Λ| + |r|) of one task (the operations of :func:`rate_scale`): the
    generic rk4's step is 1/(steps_per_timescale·σ), as MSFR's own."""
    lam, psi, rate, q = p[P_LAM], p[P_PSI], p[P_RATE], p[P_QUERY]
    vx, vy, wx, wy = y[0], y[1], y[2], y[3]
    r = psi * (vx + lam * vy) * (wx + lam * wy) + q * (vx * wx) - lam
    tr = psi * (1.0 + lam * lam) + q
    det = psi * q * lam * lam
    disc = tr * tr - 4.0 * det
    return rate * (0.5 * (tr + math.sqrt(max(disc, 0.0)))) * (abs(lam) + abs(r))


@njit(**SERIAL)
def column_residual(p, y):
    """(r, Λ) of one task, r = f − Λ: the settling rule's residual and its scale."""
    lam = p[P_LAM]
    f = p[P_PSI] * (y[0] + lam * y[1]) * (y[2] + lam * y[3]) + p[P_QUERY] * (y[0] * y[2])
    return f - lam, lam
