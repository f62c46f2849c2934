"""MSFR's one-task steps on its 4-component state y = (v_x, v_y, w_x, w_y), as tuples.

One step signature shared by every method (as scipy.integrate._ivp's step contract)::

    y_new, k_new, f_new, err = step(rhs, p, y, k1, h)

- ``rhs(p, y) -> (dy, f)``: the right-hand side (an ``inline="always"`` njit function,
  :func:`fastdyn.models.msfr.ode.task_rhs`), ``p`` the task's parameter tuple, ``f`` = vᵀHw, the
  scalar output that the lanes use for settling and loss terms;
- ``y``, ``k1 = rhs(p, y)[0]``: 4-tuples (state and its derivative at the start of the step; FSAL);
- returns the state after one step of size ``h``, its derivative and output (so the next step needs
  no extra evaluation), and the local error estimate ``err`` (a 4-tuple; zeros for methods without
  an embedded pair).

Methods: :func:`euler_step` (1 evaluation; exactly discrete gradient descent with learning rate h
when rhs is a negative gradient), :func:`rk4_step` (classical RK4, 4 evaluations),
:func:`dopri5_step` (Dormand–Prince 5(4), 6 new evaluations thanks to FSAL, 5th-order solution
propagated). :func:`rk4_gain_step` is classical RK4 for right-hand sides of the form
dy/dt = κ·(λ − f(y))·A(y) (per-task constants κ, λ, a scalar f and a direction A: MSFR's
gradient flow), with its own signature. :func:`error_norm` is the norm-wise error of a step; the
step-size controller is the engine's one (:func:`fastdyn.core.steppers.step_factor`).

These are MSFR's fast path (its lane kernels and their CUDA twins); the engine's generic solver
steps any state width from the tableaux of :mod:`fastdyn.drive.tableaux`. All functions are
inlined at the numba IR level, so a loop over tasks calling them vectorises, and
``cuda.jit(device=True)(step.py_func)`` compiles them for the device from the same source.
"""

from __future__ import annotations

import math

from numba import njit

from ..._jit import SERIAL
from ...core.steppers import (
    DP_A21,
    DP_A31,
    DP_A32,
    DP_A41,
    DP_A42,
    DP_A43,
    DP_A51,
    DP_A52,
    DP_A53,
    DP_A54,
    DP_A61,
    DP_A62,
    DP_A63,
    DP_A64,
    DP_A65,
    DP_B,
    DP_E,
    error_norm_of_rms,
)

_INLINE = dict(SERIAL, inline="always")


@njit(**_INLINE)
def _axpy(y, h, k):
    return (y[0] + h * k[0], y[1] + h * k[1], y[2] + h * k[2], y[3] + h * k[3])


@njit(**_INLINE)
def euler_step(rhs, p, y, k1, h):
    """y_new = y + h·k1 (forward Euler; with rhs = −∇L it is one gradient-descent step, lr h)."""
    yn = _axpy(y, h, k1)
    kn, fn = rhs(p, yn)
    return yn, kn, fn, (0.0, 0.0, 0.0, 0.0)


@njit(**_INLINE)
def rk4_step(rhs, p, y, k1, h):
    """Classical RK4: y_new = y + h/6 (k1 + 2k2 + 2k3 + k4); global error O(h⁴)."""
    k2, _ = rhs(p, _axpy(y, 0.5 * h, k1))
    k3, _ = rhs(p, _axpy(y, 0.5 * h, k2))
    k4, _ = rhs(p, _axpy(y, h, k3))
    h6 = h * (1.0 / 6.0)
    yn = (
        y[0] + h6 * (k1[0] + 2.0 * k2[0] + 2.0 * k3[0] + k4[0]),
        y[1] + h6 * (k1[1] + 2.0 * k2[1] + 2.0 * k3[1] + k4[1]),
        y[2] + h6 * (k1[2] + 2.0 * k2[2] + 2.0 * k3[2] + k4[2]),
        y[3] + h6 * (k1[3] + 2.0 * k2[3] + 2.0 * k3[3] + k4[3]),
    )
    kn, fn = rhs(p, yn)
    return yn, kn, fn, (0.0, 0.0, 0.0, 0.0)


@njit(**_INLINE)
def rk4_gain_weights(kappa, lam, h):
    """(κh/2, κh/2 · λ): the constants of :func:`rk4_gain_step` for step size h."""
    w2 = (0.5 * h) * kappa
    return w2, w2 * lam


@njit(**_INLINE)
def rk4_gain_step(dirf, p, y, a1, f1, w):
    """Classical RK4 for dy/dt = κ·(λ − f(y))·A(y) (per-task constants κ, λ; a scalar f and a
    direction A: MSFR's gradient flow), factored: ``dirf(p, y) -> (A, f)``, (a1, f1) at y,
    w = :func:`rk4_gain_weights` (κ, λ, h). With s = κh/2 · (λ − f) = κhλ/2 − κh/2 · f (one
    fused operation) at each stage, the stages are y + s1 A1, y + s2 A2, y + 2 s3 A3 and
    y_new = y + [s1 A1 + 2 s2 A2 + 2 s3 A3 + s4 A4]/3: the step of :func:`rk4_step` with
    k_i = κ(λ − f_i)A_i, rounded differently (one scale per stage instead of four products). The
    increment is summed before it is added to y, as in rk4_step: added term by term, increments
    below half an ulp of y would each be lost and a converging task would stall (measured: 28
    of 200 tasks stopped 5 % above a settle tolerance of 1e-13·Λ). Returns (y_new, A_new,
    f_new) (FSAL)."""
    w2, w2l = w
    s1 = w2l - w2 * f1
    a2, f2 = dirf(p, _axpy(y, s1, a1))
    s2 = w2l - w2 * f2
    a3, f3 = dirf(p, _axpy(y, s2, a2))
    s3 = w2l - w2 * f3
    a4, f4 = dirf(p, _axpy(y, 2.0 * s3, a3))
    s4 = w2l - w2 * f4
    c1 = s1 * (1.0 / 3.0)
    c2 = s2 * (2.0 / 3.0)
    c3 = s3 * (2.0 / 3.0)
    c4 = s4 * (1.0 / 3.0)
    s = _axpy(_axpy((c1 * a1[0], c1 * a1[1], c1 * a1[2], c1 * a1[3]), c2, a2), c3, a3)
    s = _axpy(s, c4, a4)
    yn = (y[0] + s[0], y[1] + s[1], y[2] + s[2], y[3] + s[3])
    an, fn = dirf(p, yn)
    return yn, an, fn


@njit(**_INLINE)
def _lin2(a1, k1, a2, k2):
    return (
        a1 * k1[0] + a2 * k2[0],
        a1 * k1[1] + a2 * k2[1],
        a1 * k1[2] + a2 * k2[2],
        a1 * k1[3] + a2 * k2[3],
    )


@njit(**_INLINE)
def _acc(s, a, k):
    return (s[0] + a * k[0], s[1] + a * k[1], s[2] + a * k[2], s[3] + a * k[3])


@njit(**_INLINE)
def _step_from(y, h, s):
    return (y[0] + h * s[0], y[1] + h * s[1], y[2] + h * s[2], y[3] + h * s[3])


@njit(**_INLINE)
def dopri5_step(rhs, p, y, k1, h):
    """Dormand–Prince 5(4): 5th-order y_new, k7 = rhs(y_new) (FSAL), err = h Σ_i E_i k_i (4th-order
    local error estimate of the embedded pair). The stage sums Σ_j a_ij k_j are formed left to
    right over the non-zero coefficients only (LLVM may not drop a ``+ 0.0`` itself)."""
    k2, _ = rhs(p, _axpy(y, h * DP_A21, k1))
    k3, _ = rhs(p, _step_from(y, h, _lin2(DP_A31, k1, DP_A32, k2)))
    k4, _ = rhs(p, _step_from(y, h, _acc(_lin2(DP_A41, k1, DP_A42, k2), DP_A43, k3)))
    s5 = _acc(_acc(_lin2(DP_A51, k1, DP_A52, k2), DP_A53, k3), DP_A54, k4)
    k5, _ = rhs(p, _step_from(y, h, s5))
    s6 = _acc(_acc(_acc(_lin2(DP_A61, k1, DP_A62, k2), DP_A63, k3), DP_A64, k4), DP_A65, k5)
    k6, _ = rhs(p, _step_from(y, h, s6))
    sb = _acc(_acc(_acc(_lin2(DP_B[0], k1, DP_B[2], k3), DP_B[3], k4), DP_B[4], k5), DP_B[5], k6)
    yn = _step_from(y, h, sb)
    k7, fn = rhs(p, yn)
    se = _acc(_acc(_acc(_lin2(DP_E[0], k1, DP_E[2], k3), DP_E[3], k4), DP_E[4], k5), DP_E[5], k6)
    err = (h * se[0], h * se[1], h * se[2], h * se[3])
    err = _axpy(err, h * DP_E[6], k7)
    return yn, k7, fn, err


@njit(**_INLINE)
def rms4(a):
    return math.sqrt(0.25 * (a[0] * a[0] + a[1] * a[1] + a[2] * a[2] + a[3] * a[3]))


@njit(**_INLINE)
def error_norm(err, y, y_new, atol, rtol):
    """:func:`fastdyn.core.steppers.error_norm_of_rms` of the 4-tuples err, y and y_new (‖·‖ the
    RMS over the 4 components)."""
    return error_norm_of_rms(rms4(err), rms4(y), rms4(y_new), atol, rtol)
