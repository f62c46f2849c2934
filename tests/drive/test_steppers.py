"""Steppers on analytic solutions: y' = −y and the logistic y' = y(1 − y); orders as log-log slopes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from fastdyn.core import steppers as C
from fastdyn.models.msfr import steps as S
from fastdyn.models.msfr.ode import task_dir, task_dir_q1
from tests.reference import msfr_ode_reference as ref


@njit(inline="always")
def _decay(p, y):
    return (-y[0], -p * y[1], -y[2], -y[3]), y[0]


@njit(inline="always")
def _logistic(p, y):
    return (y[0] * (1.0 - y[0]), y[1] * (1.0 - y[1]), 0.0, 0.0), y[0]


@njit
def _fixed(kind, which, h, n, y0):
    y = (y0, y0, 1.0, 1.0)
    if which == 0:
        k, _ = _decay(2.0, y)
    else:
        k, _ = _logistic(0.0, y)
    for _ in range(n):
        if which == 0:
            if kind == 0:
                y, k, f, e = S.euler_step(_decay, 2.0, y, k, h)
            elif kind == 1:
                y, k, f, e = S.rk4_step(_decay, 2.0, y, k, h)
            else:
                y, k, f, e = S.dopri5_step(_decay, 2.0, y, k, h)
        else:
            if kind == 1:
                y, k, f, e = S.rk4_step(_logistic, 0.0, y, k, h)
            else:
                y, k, f, e = S.dopri5_step(_logistic, 0.0, y, k, h)
    return y[0], y[1]


@njit
def _adaptive(rtol, t_end, y0):
    y = (y0, y0, 0.0, 0.0)
    k, _ = _logistic(0.0, y)
    t, h, rej = 0.0, 1e-3, False
    n = 0
    while t < t_end:
        clipped = h >= t_end - t
        hh = t_end - t if clipped else h
        yn, kn, f, e = S.dopri5_step(_logistic, 0.0, y, k, hh)
        err = S.error_norm(e, y, yn, 0.0, rtol)
        acc, hnew = C.dopri5_controller(err, hh, rej)
        if acc:
            t = t_end if clipped else t + hh
            y, k, rej = yn, kn, False
            n += 1
        else:
            rej = True
        h = hnew
    return y[0], n


@njit(inline="always")
def _logistic_dir(p, y):
    """y0' = κ(λ − y0)·y0 in rk4_gain_step's form: A = (y0, 0, 0, 0), f = y0."""
    return (y[0], 0.0, 0.0, 0.0), y[0]


@njit
def _gain_logistic(h, n, y0, kappa, lam):
    y = (y0, 0.0, 0.0, 0.0)
    a, f = _logistic_dir(0.0, y)
    w = S.rk4_gain_weights(kappa, lam, h)
    for _ in range(n):
        y, a, f = S.rk4_gain_step(_logistic_dir, 0.0, y, a, f, w)
    return y[0]


@njit
def _gain_msfr(lam, psi, q, rate, y0, h, n):
    p = (lam, psi, q, rate)
    y = (y0[0], y0[1], y0[2], y0[3])
    w = S.rk4_gain_weights(rate, lam, h)
    if q == 1.0:
        a, f = task_dir_q1(p, y)
        for _ in range(n):
            y, a, f = S.rk4_gain_step(task_dir_q1, p, y, a, f, w)
    else:
        a, f = task_dir(p, y)
        for _ in range(n):
            y, a, f = S.rk4_gain_step(task_dir, p, y, a, f, w)
    return np.array(y), f


def _slope(hs, errs):
    return np.polyfit(np.log(hs), np.log(errs), 1)[0]


def test_orders_decay():
    t_end = 2.0
    ns = np.array([20, 40, 80, 160])
    for kind, order in ((0, 1), (1, 4), (2, 5)):
        errs = [abs(_fixed(kind, 0, t_end / n, n, 1.0)[1] - math.exp(-2 * t_end)) for n in ns]
        s = _slope(t_end / ns, errs)
        assert abs(s - order) < 0.25, (kind, s, errs)  # global order p: slope p ± 0.25


def test_orders_logistic():
    t_end, y0 = 5.0, 0.01
    exact = 1.0 / (1.0 + (1.0 / y0 - 1.0) * math.exp(-t_end))
    ns = np.array([25, 50, 100, 200])
    for kind, order in ((1, 4), (2, 5)):
        errs = [abs(_fixed(kind, 1, t_end / n, n, y0)[0] - exact) for n in ns]
        assert abs(_slope(t_end / ns, errs) - order) < 0.3, (kind, errs)


def test_rk4_gain_step_order_logistic():
    """The factored RK4 on y' = κ(λ − y)y: global order 4 against the exact logistic."""
    t_end, y0, kappa, lam = 5.0, 0.01, 0.5, 2.0
    exact = lam / (1.0 + (lam / y0 - 1.0) * math.exp(-kappa * lam * t_end))
    ns = np.array([25, 50, 100, 200])
    errs = [abs(_gain_logistic(t_end / n, n, y0, kappa, lam) - exact) for n in ns]
    assert abs(_slope(t_end / ns, errs) - 4) < 0.3, errs


@pytest.mark.parametrize("q", [1.0, 0.0])
def test_rk4_gain_step_is_textbook_rk4_on_msfr(q):
    """The factored step with the MSFR direction equals the textbook RK4 of the reference
    right-hand side (numpy, k_i in full) to round-off, over 200 steps of tasks from f(0) ≈ 1e-3·Λ
    to convergence. Measured: ≤ 1.1e-15 relative to max|y| (the two roundings of the
    increments, accumulated over the steps), so 1e-14; a wrong stage weight moves y by ≥ 1e-4."""
    rng = np.random.default_rng(3)
    worst = 0.0
    for _ in range(20):
        lam, psi = np.exp(rng.uniform(np.log(0.1), np.log(10))), np.exp(rng.uniform(0, np.log(500)))
        s0 = math.sqrt(1e-3 * lam / (psi * (1 + lam * lam)))
        y0 = s0 * np.array([1.0, lam, 1.0, lam]) / math.sqrt(1 + lam * lam)
        y0 = y0 * (1 + 0.1 * rng.standard_normal(4))
        rate = 1.0
        h = 0.05 / (psi * (1 + lam * lam) * lam)  # 1/20 of the fastest rate's timescale (2aΛ)
        y, f = _gain_msfr(lam, psi, q, rate, y0, h, 200)
        y_ref = ref.rk4(lam, psi, rate, y0, h, 200, query=q == 1.0)
        worst = max(worst, float(np.max(np.abs(y - y_ref)) / np.max(np.abs(y_ref))))
        assert abs(f - ref.f_of(y_ref, lam, psi, query=q == 1.0)) <= 1e-12 * lam
    print(f"q={q}: max |y − y_ref|/max|y_ref| {worst:.2e}")
    assert worst <= 1e-14


def test_dopri5_error_scales_with_rtol():
    t_end, y0 = 8.0, 0.01
    exact = 1.0 / (1.0 + (1.0 / y0 - 1.0) * math.exp(-t_end))
    rtols = 10.0 ** -np.arange(5, 10)
    errs, steps = [], []
    for rt in rtols:
        y, n = _adaptive(rt, t_end, y0)
        errs.append(abs(y - exact))
        steps.append(n)
    s = _slope(rtols, errs)
    assert 0.7 <= s <= 1.3, (s, errs)  # tolerance proportionality: error ∝ rtol
    assert max(errs[i] / rtols[i] for i in range(len(rtols))) < 100.0
    assert steps == sorted(steps)  # tighter tolerance, more steps


def test_tableau_consistency():
    # row sums of A equal c; b sums to 1; E sums to 0 (both weight sets are consistent)
    rows = [
        (C.DP_A21,),
        (C.DP_A31, C.DP_A32),
        (C.DP_A41, C.DP_A42, C.DP_A43),
        (C.DP_A51, C.DP_A52, C.DP_A53, C.DP_A54),
        (C.DP_A61, C.DP_A62, C.DP_A63, C.DP_A64, C.DP_A65),
    ]
    for i, r in enumerate(rows, start=1):
        assert abs(sum(r) - C.DP_C[i]) < 1e-15
    assert abs(sum(C.DP_B) - 1.0) < 1e-15
    assert abs(sum(C.DP_E)) < 1e-15


def test_controller():
    acc, h = C.dopri5_controller(0.0, 1.0, False)
    assert acc and h == C.MAX_FACTOR
    acc, h = C.dopri5_controller(2.0, 1.0, False)
    assert not acc and C.MIN_FACTOR <= h < 1.0
    acc, h = C.dopri5_controller(1e-6, 1.0, True)
    assert acc and h == 1.0  # no growth right after a rejection
    acc, h = C.dopri5_controller(math.inf, 1.0, False)
    assert not acc and h == C.MIN_FACTOR
