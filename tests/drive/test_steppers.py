"""Steppers on analytic solutions: y' = −y and the logistic y' = y(1 − y); orders as log-log slopes."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from fastdyn.drive import steppers as S


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
        acc, hnew = S.dopri5_controller(err, hh, rej)
        if acc:
            t = t_end if clipped else t + hh
            y, k, rej = yn, kn, False
            n += 1
        else:
            rej = True
        h = hnew
    return y[0], n


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
        (S.DP_A21,),
        (S.DP_A31, S.DP_A32),
        (S.DP_A41, S.DP_A42, S.DP_A43),
        (S.DP_A51, S.DP_A52, S.DP_A53, S.DP_A54),
        (S.DP_A61, S.DP_A62, S.DP_A63, S.DP_A64, S.DP_A65),
    ]
    for i, r in enumerate(rows, start=1):
        assert abs(sum(r) - S.DP_C[i]) < 1e-15
    assert abs(sum(S.DP_B) - 1.0) < 1e-15
    assert abs(sum(S.DP_E)) < 1e-15


def test_controller():
    acc, h = S.dopri5_controller(0.0, 1.0, False)
    assert acc and h == S.MAX_FACTOR
    acc, h = S.dopri5_controller(2.0, 1.0, False)
    assert not acc and S.MIN_FACTOR <= h < 1.0
    acc, h = S.dopri5_controller(1e-6, 1.0, True)
    assert acc and h == 1.0  # no growth right after a rejection
    acc, h = S.dopri5_controller(math.inf, 1.0, False)
    assert not acc and h == S.MIN_FACTOR
