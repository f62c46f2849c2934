"""MSFR theory kernels against independent references (spec msfr.md sections 4-6, issue 2).

Errors are |Δ| / (atol + rtol·|ref|); every tolerance states where it comes from.
References: tests/reference/msfr_reference.py (scipy DOP853 at rtol 1e-13 on the 4-dim v/w flow,
and the spec's formulas typed in literally).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from fastdyn.models.msfr._closed_form import exp_nonpos, log_pos, log_upper
from fastdyn.models.msfr.scaling import exponents
from fastdyn.models.msfr.theory import (
    emergence_times,
    f_curves,
    first_order_balanced,
    loss_curves,
    loss_partials,
)
from fastdyn.reduce import BLOCK, n_blocks
from tests._threads import assert_bit_identical, outputs_per_thread_count
from tests.reference.msfr_reference import (
    exact_reduction_f,
    loss_test_naive,
    ode_f,
    riccati_naive,
)


def err(x, ref, atol, rtol):
    """max |x − ref| / (atol + rtol |ref|)."""
    x, ref = np.asarray(x), np.asarray(ref)
    return float(np.max(np.abs(x - ref) / (atol + rtol * np.abs(ref))))


def one(i, *arrays):
    return [a[i : i + 1] for a in arrays]


def balanced(lam, s0):
    n = np.sqrt(1.0 + lam * lam)
    return s0 / n, s0 * lam / n


def horizon(ts, lam, psi, rate):
    """10 emergence times, or 50 learning times 1/(2aΛ) when the task starts past half-rise."""
    if np.isfinite(ts) and ts > 0:
        return 10.0 * ts
    return 50.0 / (2.0 * rate * psi * (1 + lam * lam) * abs(lam))


def random_tasks(rng, n, s0, lam_range=(0.1, 3.0), psi_range=(2.0, 1000.0)):
    lam = rng.uniform(*lam_range, n)
    psi = np.round(np.exp(rng.uniform(np.log(psi_range[0]), np.log(psi_range[1]), n)))
    rate = rng.uniform(0.1, 1.0, n)
    v0x, v0y, w0x, w0y = rng.normal(0.0, s0, (4, n))
    return lam, psi, rate, v0x, v0y, w0x, w0y


def test_exp_nonpos_matches_libm():
    # a degree-13 Taylor polynomial after Cody-Waite reduction: a few ulp (4e-16) everywhere
    xs = np.concatenate([-np.geomspace(1e-300, 708.0, 4000), [0.0, -0.5 * math.log(2.0)]])
    ours = np.array([exp_nonpos(x) for x in xs])
    assert err(ours, np.exp(xs), 0.0, 4e-16) <= 1.0


def test_log_pos_matches_libm():
    # fdlibm's log without branches: ≤ 1 ulp (2.2e-16 relative) on normal positive numbers
    rng = np.random.default_rng(1)
    xs = np.concatenate(
        [np.exp(rng.uniform(-700.0, 700.0, 2000)), 1.0 + np.geomspace(1e-15, 0.5, 200),
         1.0 - np.geomspace(1e-15, 0.3, 200), [1.0, 2.0, 0.5, 2.2250738585072014e-308, 1.7e308]]
    )  # fmt: skip
    ours = np.array([log_pos(x) for x in xs])
    ref = np.log(xs)
    assert np.all(np.abs(ours - ref) <= np.spacing(np.abs(ref)) + 1e-300)


def test_log_upper_bounds_ln_within_ln2():
    # the drop threshold's bound: ln x ≤ log_upper(x) ≤ ln x + ln 2 (x = m·2^e → (e + 1) ln 2),
    # exactly at powers of two (m = 1: ln x + ln 2), up to one rounding of (e + 1)·ln 2
    rng = np.random.default_rng(2)
    xs = np.concatenate(
        [np.exp(rng.uniform(-700.0, 700.0, 2000)), 2.0 ** np.arange(-1022, 1023, 7.0),
         np.nextafter(2.0 ** np.arange(-1021, 1023, 11.0), 0.0), [2.2250738585072014e-308, 1.7e308]]
    )  # fmt: skip
    up = np.array([log_upper(x) for x in xs])
    ln = np.log(xs)
    slack = np.spacing(np.abs(up))
    assert np.all(up >= ln - slack) and np.all(up <= ln + math.log(2.0) + slack)
    assert np.any(up - ln > 0.69) and np.any(up - ln < 1e-12)  # both ends of the range reached


def test_logistic_series_region_across_u0():
    # the fast path's degree-18 series (x ≤ R/16) vs the general Riccati evaluation, for
    # starts from f(0) ≈ Λ/2 (u0 ≈ 0, radius π) to f(0) = 1e-30 Λ (u0 ≈ 69), dense times
    f0 = np.geomspace(0.49, 1e-30, 3 * BLOCK + 5)
    n = f0.size
    lam, psi, rate = np.full(n, 0.7), np.full(n, 30.0), np.geomspace(1e-3, 1e3, n)
    kap = psi * (1 + lam * lam)
    vx, vy = balanced(lam, np.sqrt(f0 * lam / kap))
    wt = np.ones(n)
    times = np.concatenate([[0.0], np.geomspace(1e-6, 1e4, 300)])
    tp = np.empty((n_blocks(n), times.size))
    rp = np.empty_like(tp)
    loss_partials(times, lam, psi, rate, wt, vx, vy, vx, vy, "leading", tp, rp)
    f = f_curves(times, lam, psi, rate, vx, vy, vx, vy, "leading")
    ref = 0.5 * ((f - lam[:, None]) ** 2).sum(axis=0)
    assert err(tp.sum(axis=0), ref, 1e-13 * ref.max(), 1e-12) <= 1.0


def test_fast_setup_thresholds_are_never_nan():
    """The set-up's time thresholds X/c, u0/c, (u0 − u_lo)/c are products with 1/c: for c = 0
    (rate 0) they are ∞, and for c below the smallest normal double, where 1/c would overflow,
    they must not become 0·∞ = NaN (a NaN threshold leaves the walk at the previous task's
    index). Then the losses are the constant r(0)² of tasks that do not move."""
    from fastdyn.models.msfr.theory import _NROW, _R_OK, _R_T1, _R_T2, _R_TH, _fast_setup

    rate = np.array([0.0, 5e-324, 1e-310, 1e-300, 1.0, 1e-310, 0.0, 1.0])
    n = rate.size
    f0 = np.array([0.9, 0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1])  # f(0)/Λ: u0 < 0 and u0 > 0
    lam, psi = np.ones(n), np.full(n, 100.0)
    s0 = np.sqrt(f0 * lam / (psi * (1 + lam**2)))  # f⁰(0) = κ σ0² for v0 = w0 = σ0 û
    vx, vy = s0 / np.sqrt(1 + lam**2), s0 * lam / np.sqrt(1 + lam**2)
    tb = np.empty(_NROW * BLOCK)
    for level in (0, 1):
        nf = _fast_setup(level, lam, psi, rate, np.ones(n), vx, vy, vx, vy, 0, n, tb)
        assert nf == n and np.all(tb[_R_OK : _R_OK + n] == 1.0)
        for r in (_R_T1, _R_TH, _R_T2):
            assert not np.any(np.isnan(tb[r : r + n])), (level, r, tb[r : r + n])
    times = np.geomspace(1e-2, 1e12, 9)
    lt, _ = loss_curves(times, lam, psi, rate, np.ones(n), vx, vy, vx, vy, "leading")
    still = rate < 1e-290  # c·t ≤ 1e-278: r stays r(0) to round-off
    want = np.sum(0.5 * (f0[still] - 1.0) ** 2)
    moving = loss_curves(times, lam[~still], psi[~still], rate[~still], np.ones(n)[~still],
                         vx[~still], vy[~still], vx[~still], vy[~still], "leading")[0]  # fmt: skip
    np.testing.assert_allclose(lt - moving, want, rtol=1e-14)


@pytest.mark.parametrize("p", [1e-12, 5e-4, 0.01, 0.1, 0.3])
def test_series_degree_bounds_the_dropped_powers(p):
    # _series_degree's J for a tile with maxima (p, ξ) and terms m ≤ mmax (the kernel's rule):
    # the powers x^j, j > J, it drops add ≤ 1e-18 to (1 + p(e^x − 1))^−2 at every x ≤ ξ. Checked
    # in exact rational arithmetic: Σ_{J<j≤60} |Σ_{1≤m≤mmax} C[j, m] p^m| ξ^j, C[j, m] =
    # (−1)^m (m+1)! S(j, m)/j! (beyond j = 60 the terms are < 1e-40 for these ξ)
    from fractions import Fraction

    from fastdyn.models.msfr.theory import _DEG, _series_degree

    jhi = 60
    st = [[0] * (_DEG + 1) for _ in range(jhi + 1)]
    st[0][0] = 1
    for j in range(1, jhi + 1):
        for m in range(1, min(j, _DEG) + 1):
            st[j][m] = m * st[j - 1][m] + st[j - 1][m - 1]
    saved = 0
    for xi in (1e-6, 1e-3, 0.036, 0.2, 0.5, 1.0):
        ymax = p * math.expm1(xi)
        if ymax >= 0.5:
            continue  # the kernel keeps every power there
        mmax, tail = 0, 4.0 * ymax
        while mmax < _DEG and (mmax + 2) * tail > 1e-18:
            mmax, tail = mmax + 1, tail * ymax
        jd = _series_degree(p, xi, mmax)
        assert 0 <= jd <= _DEG
        if jd == _DEG:
            continue  # as before the bound: every power kept
        saved += _DEG - jd
        pf, xf = Fraction(p), Fraction(xi)
        dropped = Fraction(0)
        for j in range(jd + 1, jhi + 1):
            g = sum(
                Fraction((-1) ** m * math.factorial(m + 1) * st[j][m], math.factorial(j)) * pf**m
                for m in range(1, mmax + 1)
            )
            dropped += abs(g) * xf**j
        assert dropped <= Fraction(1e-18), (xi, mmax, jd, float(dropped))
    if p <= 0.01:
        assert saved >= 3 * 8  # slow tasks (small ξ) keep far fewer than 19 powers


# --- acceptance 2: orders of the theory (balanced init) -----------------------------------


def test_order_of_leading_and_first_order_balanced():
    lam0, s0 = 0.8, 1e-3
    psis = np.geomspace(50.0, 15000.0, 7)
    n = psis.size
    lam, rate = np.full(n, lam0), np.ones(n)
    vx, vy = balanced(lam, s0)
    vx, vy = np.full(n, vx[0]), np.full(n, vy[0])
    ts = emergence_times(lam, psis, rate, vx, vy, vx, vy)
    e0, e1, elin = [], [], []
    for i in range(n):
        times = np.linspace(0.0, 10.0 * ts[i], 300)
        args = one(i, lam, psis, rate, vx, vy, vx, vy)
        ex = f_curves(times, *args, "exact")[0]  # the reference: checked below vs the 4-dim ODE
        e0.append(np.abs(f_curves(times, *args, "leading")[0] - ex).max() / lam0)
        e1.append(np.abs(f_curves(times, *args, "first_order")[0] - ex).max() / lam0)
        f0, f1 = first_order_balanced(times, *args[:3], s0)
        elin.append(np.abs(f0[0] + f1[0] / psis[i] - ex).max() / lam0)
    x = np.log(1.0 / psis)
    slope0 = np.polyfit(x, np.log(e0), 1)[0]
    slope1 = np.polyfit(x, np.log(e1), 1)[0]
    slope_lin = np.polyfit(x, np.log(elin), 1)[0]
    # measured: f0 1.9e-2 ... 2.9e-5 (slope 1.14), first_order 8e-5 ... 3.6e-10 (2.16),
    # spec linearisation 3.1e-4 ... 8.4e-10 (2.24); the issue's windows
    assert 0.9 <= slope0 <= 1.3, (slope0, e0)
    assert 1.8 <= slope1 <= 2.5, (slope1, e1)
    assert 1.8 <= slope_lin <= 2.5, (slope_lin, elin)
    # the spec's quoted magnitudes at the ends of the ψ range (a factor 3 either way)
    assert 2e-2 / 3 < e0[0] < 2e-2 * 3 and 3e-4 / 3 < elin[0] < 3e-4 * 3


def test_first_order_general_init_is_second_order():
    # unbalanced init: error O(ε²) + O(ε σ0² log 1/σ0) (docstring of closed_form_setup)
    rng = np.random.default_rng(5)
    psis = np.geomspace(50.0, 15000.0, 6)
    v0x, v0y, w0x, w0y = rng.normal(0.0, 1e-3, (4, 1))
    errs = []
    for p in psis:
        args = [np.array([0.8]), np.array([p]), np.array([1.0]), v0x, v0y, w0x, w0y]
        ts = emergence_times(*args)[0]
        times = np.linspace(0.0, 10.0 * ts, 300)
        ex = f_curves(times, *args, "exact")[0]
        errs.append(np.abs(f_curves(times, *args, "first_order")[0] - ex).max() / 0.8)
    slope = np.polyfit(np.log(1.0 / psis), np.log(errs), 1)[0]
    assert 1.8 <= slope <= 2.5, (slope, errs)  # measured ≈ 2.2


# --- acceptance 3: ε = 0 closed form vs the ODE, extremes -------------------------------


@pytest.mark.parametrize("s0", [1e-3, 0.2])
def test_leading_equals_eps0_ode_random_init(s0):
    rng = np.random.default_rng(11)
    tasks = random_tasks(rng, 8, s0)
    lam, psi, rate, v0x, v0y, w0x, w0y = tasks
    # the mirrored branch: P0 = (g + h)² = 0 exactly (w0 = −v0 along û)
    v0x[0], v0y[0] = 1e-3, 2e-3
    w0x[0], w0y[0] = -1e-3, -2e-3
    ts = emergence_times(*tasks)
    worst = 0.0
    for i in range(lam.size):
        times = np.linspace(0.0, horizon(ts[i], lam[i], psi[i], rate[i]), 60)
        f = f_curves(times, *one(i, *tasks), "leading")[0]
        ref = ode_f(times, lam[i], psi[i], rate[i], [v0x[i], v0y[i]], [w0x[i], w0y[i]], query=0.0)
        # measured max |f − ref|/(Λ + |ref|): 3.4e-12 (s0 = 1e-3), 1.8e-11 (s0 = 0.2); this is the
        # DOP853 reference's global error (~100× its rtol 1e-13: at rtol 1e-11 it moves by
        # 3e-11 … 4e-9), the closed form is at rounding. 1e-10: ~5× the larger (the issue's bound
        # was 1e-9)
        worst = max(worst, err(f, ref, 1e-10 * lam[i], 1e-10))
    print(f"s0 = {s0}: worst error / tolerance {worst:.2e}")
    assert worst <= 1.0


def test_log_space_matches_naive_formula_where_it_does_not_overflow():
    rng = np.random.default_rng(3)
    tasks = random_tasks(rng, 20, 0.3)
    lam, psi, rate, v0x, v0y, w0x, w0y = tasks
    times = np.geomspace(1e-3, 1e2, 40)
    ours = f_curves(times, *tasks, "leading")
    for i in range(lam.size):
        n = math.sqrt(1 + lam[i] ** 2)
        g = (v0x[i] + lam[i] * v0y[i]) / n
        h = (w0x[i] + lam[i] * w0y[i]) / n
        kap = psi[i] * (1 + lam[i] ** 2)
        ref = riccati_naive(times, lam[i], kap, rate[i] * kap, g, h)
        # both double-precision evaluations of one formula: rounding (1e-12 of Λ) only
        assert err(ours[i], ref, 1e-12 * lam[i], 1e-12) <= 1.0


def test_no_nan_or_inf_at_extremes():
    times = np.concatenate([[0.0], np.geomspace(1e-12, 1e12, 49)])
    rows = []
    for a in (1e-12, 1e-3, 1.0, 1e6):
        for s0 in (1e-30, 1e-12, 1e-3, 1.0):
            for lam in (1e-3, 1.0, 10.0):
                for kind in ("balanced", "random"):
                    psi = 100.0
                    kap = psi * (1 + lam * lam)
                    if kind == "balanced":
                        vx, vy = balanced(np.array([lam]), s0)
                        init = (vx[0], vy[0], vx[0], vy[0])
                    else:
                        init = tuple(np.random.default_rng(len(rows)).normal(0, s0, 4))
                    rows.append((lam, psi, a / kap, *init))
    lam, psi, rate, v0x, v0y, w0x, w0y = (np.array(c) for c in zip(*rows, strict=True))
    for level in ("leading", "first_order"):
        f = f_curves(times, lam, psi, rate, v0x, v0y, w0x, w0y, level)
        assert np.all(np.isfinite(f)), level
        lt, lr = loss_curves(times, lam, psi, rate, np.ones_like(lam), v0x, v0y, w0x, w0y, level)
        assert np.all(np.isfinite(lt)) and np.all(np.isfinite(lr))
    f = f_curves(times, lam, psi, rate, v0x, v0y, w0x, w0y, "leading")
    # f(0) = v0ᵀ H⁰ w0 = κ g h to 1e-12 of κ(g² + h²) even at init 1e-30 (f(0) ~ 1e-58): f is
    # evaluated in a form with no subtraction from Λ; κ(g² + h²) is the scale of the
    # unavoidable cancellation κ(P0 − Q0)/4 for unbalanced init. Starts far above the fixed
    # point (f(0) ≫ Λ: 0 < K ≈ 1, 1 − E cancels) reach 2.7e-12 (measured): 1e-11 there
    n = np.sqrt(1 + lam * lam)
    kap = psi * (1 + lam * lam)
    g, h = (v0x + lam * v0y) / n, (w0x + lam * w0y) / n
    small = np.abs(kap * g * h) < lam
    ref0 = kap * g * h
    assert err(f[small, 0], ref0[small], 1e-12 * (kap * (g * g + h * h))[small], 1e-12) <= 1.0
    assert err(f[~small, 0], ref0[~small], 0.0, 1e-11) <= 1.0
    # fast tasks (a = 1e6) have learned by t = 1e12: f = Λ (to rounding)
    fast = np.isclose(rate * psi * (1 + lam * lam), 1e6)
    assert err(f[fast, -1], lam[fast], 0.0, 1e-12) <= 1.0


# --- the exact reduction vs the 4-dim ODE -------------------------------------------------


def test_exact_reduction_matches_4dim_ode():
    rng = np.random.default_rng(7)
    rows = []
    for psi in (2.0, 50.0, 1000.0, 15000.0):
        lam = rng.uniform(0.05, 3.0)
        vx, vy = balanced(np.array([lam]), 1e-3)
        rows.append((lam, psi, rng.uniform(0.2, 1.0), vx[0], vy[0], vx[0], vy[0]))
        rows.append((lam, psi, rng.uniform(0.2, 1.0), *rng.normal(0.0, 1e-2, 4)))
    tasks = [np.array(c) for c in zip(*rows, strict=True)]
    lam, psi, rate, v0x, v0y, w0x, w0y = tasks
    ts = emergence_times(*tasks, level="first_order")
    worst = 0.0
    for i in range(lam.size):
        times = np.linspace(0.0, horizon(ts[i], lam[i], psi[i], rate[i]), 80)
        f = f_curves(times, *one(i, *tasks), "exact")[0]
        ref = ode_f(times, lam[i], psi[i], rate[i], [v0x[i], v0y[i]], [w0x[i], w0y[i]], query=1.0)
        # measured max |f − ref|/(Λ + |ref|) 2.7e-12 (|f − ref| ≤ 5.5e-12·Λ; the spec quotes
        # ~3e-10): the reduction's DP5(4) at EXACT_RTOL 1e-12 on τ (≤ 3.8e-12·Λ from the same
        # reduction at rtol 1e-13) and the DOP853 reference at rtol 1e-13 (moves by up to 2e-10·Λ
        # at rtol 1e-12) contribute alike. 2e-11: ~7× the measured
        worst = max(worst, err(f, ref, 2e-11 * lam[i], 2e-11))
    print(f"worst error / tolerance {worst:.2e}")
    assert worst <= 1.0


# --- emergence times ----------------------------------------------------------------------


def test_emergence_times():
    rng = np.random.default_rng(2)
    lam, psi, rate, *_ = random_tasks(rng, 50, 1e-3)
    vx, vy = balanced(lam, 1e-3)
    ts = emergence_times(lam, psi, rate, vx, vy, vx, vy)
    kap = psi * (1 + lam * lam)
    spec = np.log(lam / (kap * 1e-6) - 1.0) / (2.0 * rate * kap * lam)
    assert err(ts, spec, 0.0, 1e-12) <= 1.0  # the same formula, rounding only
    # general init: f(t_s) = Λ/2 (the quadratic root is exact; 1e-10 covers rounding of log|K|)
    tasks = random_tasks(rng, 50, 1e-2)
    ts = emergence_times(*tasks)
    for i in range(50):
        f = f_curves(ts[i : i + 1], *one(i, *tasks), "leading")[0, 0]
        assert abs(f - tasks[0][i] / 2) <= 1e-10 * tasks[0][i]


# --- the fused losses ---------------------------------------------------------------------


@pytest.mark.parametrize("level", ["leading", "first_order", "exact"])
def test_loss_partials_equal_sum_of_curves(level):
    rng = np.random.default_rng(4)
    n = 2 * BLOCK + 300 if level != "exact" else BLOCK + 100
    lam, psi, rate, v0x, v0y, w0x, w0y = random_tasks(rng, n, 1e-3)
    bal = rng.random(n) < 0.5  # half balanced: the logistic fast path
    bx, by = balanced(lam, 1e-3)
    v0x[bal], v0y[bal], w0x[bal], w0y[bal] = bx[bal], by[bal], bx[bal], by[bal]
    rate[:7] = 0.0  # never trained
    wtest = rng.random(n) / n
    times = np.concatenate([[0.0], np.geomspace(1e-4, 1e5, 60)])
    tp = np.empty((n_blocks(n), times.size))
    rp = np.empty_like(tp)
    loss_partials(times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, level, tp, rp)
    if level == "exact":
        # every task's exact_curve is also what f_curves returns, so the reference is the
        # reduction set up and integrated independently (numpy eigh + scipy LSODA at rtol 1e-13)
        f = np.array([
            exact_reduction_f(times, lam[i], psi[i], rate[i], [v0x[i], v0y[i]], [w0x[i], w0y[i]])
            for i in range(n)
        ])  # fmt: skip
    else:
        # the fused kernel (logistic fast path: series / exp_nonpos by block) vs the per-task
        # closed form (riccati_eval) of f_curves
        f = f_curves(times, lam, psi, rate, v0x, v0y, w0x, w0y, level)
    assert np.all(np.isfinite(f))
    r2 = (f - lam[:, None]) ** 2
    ref_t = 0.5 * (wtest[:, None] * r2).sum(axis=0)
    ref_r = 0.5 * (rate[:, None] * r2).sum(axis=0)
    if level == "exact":
        # measured 4.0e-14 (test) and 4.6e-14 (train) of (peak + |ref|): the reference's own
        # error (its f is within 1.1e-11·Λ of the kernel's, and 10× further at rtol 1e-12, so the
        # LSODA reference dominates; the kernel's rtol is 1e-12 on τ); 2.5e-13: ~5× that
        atol, rtol = 2.5e-13, 2.5e-13
    else:
        # r from the no-cancellation form vs f − Λ: differ by rounding of f (1e-16 Λ); the
        # fast path's series/exp ≤ 1e-15 relative; summation order: 1e-13 relative covers all
        atol, rtol = 1e-13, 1e-12
    assert err(tp.sum(axis=0), ref_t, atol * ref_t.max(), rtol) <= 1.0
    assert err(rp.sum(axis=0), ref_r, atol * ref_r.max(), rtol) <= 1.0
    assert ref_t[0] > 0.0 and ref_r[-1] < 1e-6 * ref_r[0]  # the tasks do learn in the window


def assert_partials_match_curves(times, lam, psi, rate, wtest, vx, vy):
    """The fused partials of balanced tasks (v0 = w0 = (vx, vy)) at level leading equal the
    per-task closed form (f_curves) summed here, as in test_loss_partials_equal_sum_of_curves
    (rounding and summation order only: atol 1e-13 of the peak, rtol 1e-12)."""
    n = lam.size
    tp = np.empty((n_blocks(n), times.size))
    rp = np.empty_like(tp)
    loss_partials(times, lam, psi, rate, wtest, vx, vy, vx, vy, "leading", tp, rp)
    f = f_curves(times, lam, psi, rate, vx, vy, vx, vy, "leading")
    r2 = (f - lam[:, None]) ** 2
    ref_t = 0.5 * (wtest[:, None] * r2).sum(axis=0)
    ref_r = 0.5 * (rate[:, None] * r2).sum(axis=0)
    assert err(tp.sum(axis=0), ref_t, 1e-13 * ref_t.max(), 1e-12) <= 1.0
    assert err(rp.sum(axis=0), ref_r, 1e-13 * ref_r.max(), 1e-12) <= 1.0


def _logistic_series_m5(p, deg):
    """Coefficients of x^0 … x^deg of Σ_{m ≤ 5} (m + 1)(−y)^m, y = p(e^x − 1): the terms p^m,
    m ≤ 5, of (1 + p(e^x − 1))^−2, by power-series arithmetic in numpy (not the kernel's
    Stirling-number table)."""
    y = p * np.array([0.0] + [1.0 / math.factorial(j) for j in range(1, deg + 1)])
    out = np.zeros(deg + 1)
    ym = np.zeros(deg + 1)
    ym[0] = 1.0
    for m in range(6):
        out += (m + 1) * (-1) ** m * ym
        ym = np.convolve(ym, y)[: deg + 1]
    return out


@pytest.mark.parametrize(("nw", "nrow"), [(64, 19), (64, 6), (50, 12)])
def test_series_lanes_rows_equal_the_series(nw, nrow):
    """Each row j < nrow of the lanes, summed by _flush_lanes, is Σ_tasks a ξ^j Σ_{m ≤ 5}
    C[j, m] p^m (rows ≥ nrow stay 0; lanes ≥ nw are not read); the rows are zeroed after."""
    from fastdyn.models.msfr import theory

    rng = np.random.default_rng(21)
    p = 10.0 ** rng.uniform(-4, -2, nw)
    xi = rng.uniform(0.05, 1.5, nw)
    wt, rt, l2 = rng.uniform(0.5, 2.0, (3, nw))
    sv = np.zeros(theory._S_SIZE)
    theory._series_lanes(sv, nw, nrow, p, xi, wt, rt, l2)
    mb = np.zeros((2, theory._DEG + 1))
    theory._flush_lanes(sv, nrow, mb)
    assert not sv[: theory._LANE_ROWS * theory._TILE].any()
    g = np.array([_logistic_series_m5(pi, theory._DEG) for pi in p])  # (nw, deg + 1)
    terms = g * xi[:, None] ** np.arange(theory._DEG + 1)
    for k, a in enumerate((wt * l2, rt * l2)):
        ref = (a[:, None] * terms).sum(axis=0)
        mag = (np.abs(a[:, None] * terms)).sum(axis=0)
        # Horner in p, j products for ξ^j and a 64-lane tree: a few tens of ulp of the row's
        # magnitude (measured ≤ 1.3e-15); 1e-13
        assert np.all(np.abs(mb[k, :nrow] - ref[:nrow]) <= 1e-13 * mag[:nrow])
        assert not mb[k, nrow:].any()


def test_series_lanes_match_per_task_curves():
    """Tiles of 64 tasks that share their series bucket go through the vectorised lanes
    (theory._series_lanes: powers x^j in groups of 6, 12 and 19, summed per tile position, then
    a fixed tree per bucket); the sums equal the per-task closed form (f_curves) summed here.
    Sparse output times and rates sorted across the table put whole tiles in one bucket, from
    slow tasks (ξ = c·t_max ≪ 1: few powers) to tasks whose series ends just below x = R/16
    (ξ ≈ 0.6 at f(0) = 1e-4 Λ, ≈ 1.3 at 1e-9 Λ: up to 19 powers)."""
    n1 = 4 * BLOCK + 300
    n = 2 * n1
    lam, psi = np.full(n, 0.5), np.full(n, 20.0)
    rate = np.tile(np.geomspace(1e-13, 1e-3, n1), 2)
    f0 = np.repeat([1e-4, 1e-9], n1) * lam
    kap = psi * (1 + lam * lam)
    vx, vy = balanced(lam, np.sqrt(f0 / kap))  # f(0) = κ σ0² for balanced init
    wtest = np.linspace(1.0, 2.0, n)
    times = np.geomspace(1e-2, 1e8, 12)
    # the tiles the lanes take: one bucket k1 (first output time past the series), k1 ≥ 1
    u0 = np.log((lam - f0) / f0)
    c = 2.0 * rate * kap * lam
    k1 = np.searchsorted(times, np.sqrt(u0 * u0 + np.pi**2) / 16.0 / c, side="right")
    xi = c * times[np.maximum(k1 - 1, 0)]
    tiles = [slice(a, min(a + 64, b)) for a0, b in ((0, n1), (n1, n)) for a in range(a0, b, 64)]
    shared = [t for t in tiles if k1[t].min() == k1[t].max() >= 1]
    assert len(shared) > 0.8 * len(tiles)
    assert min(xi[t].max() for t in shared) < 1e-3 and max(xi[t].max() for t in shared) > 1.0
    assert_partials_match_curves(times, lam, psi, rate, wtest, vx, vy)


def test_loss_matches_naive_numpy_balanced():
    n = 5000
    s = np.arange(1, n + 1, dtype=float)
    p = s**-2.0 / np.sum(s**-2.0)
    lam, psi = s**-0.25, np.maximum(1.0, np.round(1000 * s**-0.3))
    vx, vy = balanced(lam, 1e-3)
    times = np.geomspace(1e-2, 1e9, 80)
    lt, lr = loss_curves(times, lam, psi, p, p, vx, vy, vx, vy, "leading")
    ref = loss_test_naive(times, lam, psi, p, p, 1e-3)
    # the naive f − Λ cancels (1e-16 Λ absolute per task, so its r² is lost below ~1e-32 Λ²:
    # atol 1e-28 of the peak); 1e-12 relative is rounding only
    assert err(lt, ref, 1e-28 * ref.max(), 1e-12) <= 1.0
    assert np.array_equal(lt, lr)  # wtest = rate here


def test_fast_path_with_many_exponent_batches():
    """One block whose exp ranges hold far more than EXP_BATCH exponents (dense times over every
    task's transition), so the kernel takes them in many batches: the fused partials equal the
    per-task closed form (f_curves) summed here, as in test_loss_partials_equal_sum_of_curves."""
    from fastdyn.models.msfr import theory

    rng = np.random.default_rng(12)
    n = BLOCK
    lam, psi = np.ones(n), np.full(n, 100.0)
    rate = np.exp(rng.uniform(np.log(1e-3), np.log(1e-2), n))
    vx, vy = balanced(lam, 1e-3)
    times = np.geomspace(1e-1, 1e6, 2000)
    # x = c·t between 1 and u0 is inside every task's exp range (the series ends at x ≤ R/16 < 1,
    # the dropped tail starts beyond u0); c = 2·rate·κ·Λ, u0 = ln((Λ − f0)/f0), f0 = κσ0²
    kap = psi * (1 + lam**2)
    f0 = kap * 1e-6
    x = 2 * rate[:, None] * kap[:, None] * lam[:, None] * times[None, :]
    assert ((x >= 1.0) & (x <= np.log((lam - f0) / f0)[:, None])).sum() > 5 * theory.EXP_BATCH
    assert_partials_match_curves(times, lam, psi, rate, rng.random(n), vx, vy)


_THREADS_SCRIPT = """
from fastdyn.models.msfr.theory import loss_curves
from fastdyn.reduce import BLOCK
from tests.models.test_msfr_theory import balanced, random_tasks

for level in ("leading", "exact"):
    rng = np.random.default_rng(9)
    n = 3 * BLOCK + 17 if level == "leading" else 2 * BLOCK + 5  # partial last blocks
    lam, psi, rate, v0x, v0y, w0x, w0y = random_tasks(rng, n, 1e-3)
    bx, by = balanced(lam, 1e-3)
    v0x[::2], v0y[::2], w0x[::2], w0y[::2] = bx[::2], by[::2], bx[::2], by[::2]
    wtest = rng.random(n)
    times = np.geomspace(1e-3, 1e6, 40)
    args = (times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, level)
    for chunk in (BLOCK, 4 * BLOCK):
        lt, lr = loss_curves(*args, chunk=chunk)
        OUT[f"{level}_{chunk}_test"], OUT[f"{level}_{chunk}_train"] = lt, lr
"""


def test_deterministic_across_threads_and_chunks(tmp_path):
    """L_test and L_train of both kernels (the logistic fast path and general Riccati at
    "leading", the adaptive reduction at "exact") are bit-identical with pools of 1 and 2 numba
    threads (separate interpreters, NUMBA_NUM_THREADS set before numba is imported) and with
    chunks of 1 and 4 blocks."""
    outs = outputs_per_thread_count(_THREADS_SCRIPT, tmp_path)
    assert_bit_identical(outs)
    one = outs[0]
    for level in ("leading", "exact"):
        for kind in ("test", "train"):
            a, b = one[f"{level}_{BLOCK}_{kind}"], one[f"{level}_{4 * BLOCK}_{kind}"]
            assert a.tobytes() == b.tobytes(), (level, kind)
            assert a[0] > 0.0 and a[-1] < 1e-6 * a[0]  # a real curve: the tasks learn


# --- acceptance 7: closed-form scaling slopes (alpha = 2, beta = 0.3, gamma = 0.25) -------


@pytest.fixture(scope="module")
def paper_table():
    """N_s = 2e6 tasks: P(s) = s^-α/Z, Λ = s^-γ, ψ = max(1, round(ψ0 s^-β)), σ0 = 1e-3."""
    alpha, beta, gamma, ns = 2.0, 0.3, 0.25, 2_000_000
    s = np.arange(1, ns + 1, dtype=float)
    p = s**-alpha
    p /= p.sum()
    lam = s**-gamma
    psi = np.maximum(1.0, np.round(1000.0 * s**-beta))
    vx, vy = balanced(lam, 1e-3)
    return dict(s=s, p=p, lam=lam, psi=psi, vx=vx, vy=vy, exps=exponents(alpha, beta, gamma))


def slope(x, y):
    return np.polyfit(np.log(x), np.log(y), 1)[0]


def test_time_law_slope(paper_table):
    tb = paper_table
    p, lam, psi, vx, vy = tb["p"], tb["lam"], tb["psi"], tb["vx"], tb["vy"]
    # window t ∈ [1e2, 1e7]: s_c(t) goes from ~50 to ~5e3, well below N_s = 2e6
    times = np.geomspace(1e2, 1e7, 26)
    lt, _ = loss_curves(times, lam, psi, p, p, vx, vy, vx, vy, "leading")
    ts = emergence_times(lam, psi, p, vx, vy, vx, vy)
    s_c = np.searchsorted(np.sort(ts), times[-1])  # tasks learned by the window's end
    assert s_c < 1e-2 * lam.size, s_c  # the finite-task cutoff stays far away
    # ±0.02: the issue's tolerance (the log factor ln(Λ/f(0)) bends it by ~0.002)
    assert abs(slope(times, lt) - (-tb["exps"].time)) <= 0.02, slope(times, lt)


def test_model_size_law_slope(paper_table):
    tb = paper_table
    p, lam, psi, vx, vy = tb["p"], tb["lam"], tb["psi"], tb["vx"], tb["vy"]
    tail = np.cumsum((0.5 * p * lam * lam)[::-1])[::-1]  # tail[D] = Σ_{s>D} P Λ²/2 (s>D constant)
    # D ∈ [1e2, 1e4] (≪ N_s; below 1e2 the discrete sum's D^-1 correction shows); L at t = 1e12,
    # by which every task s ≤ 1e4 has learned (t_s(1e4) ≈ 1e8): the driver's L(D) at t → ∞
    ds = np.unique(np.round(np.geomspace(100, 10_000, 15)).astype(int))
    loss = []
    for d in ds:
        lt, _ = loss_curves(np.array([1e12]), lam[:d], psi[:d], p[:d], p[:d], vx[:d], vy[:d],
                            vx[:d], vy[:d], "leading")  # fmt: skip
        loss.append(lt[0] + tail[d])
    assert abs(slope(ds, loss) - (-tb["exps"].model_size)) <= 0.02, slope(ds, loss)


def test_data_law_slope(paper_table):
    tb = paper_table
    p, lam, psi, vx, vy = tb["p"], tb["lam"], tb["psi"], tb["vx"], tb["vy"]
    # finite N with deterministic counts #_s = round(N P(s)) (no sampling noise); tasks with
    # #_s = 0 are never trained. N ∈ [1e4, 1e8]: the trained cutoff s_N = (2N/Z)^(1/α) goes from
    # ~1e2 to ~1e4 ≪ N_s. L at t = 1e12, where every trained task has learned (checked).
    ns = np.geomspace(1e4, 1e8, 13)
    loss = []
    for n in ns:
        rate = np.round(n * p) / n
        trained = rate > 0
        ts = emergence_times(lam[trained], psi[trained], rate[trained], vx[trained], vy[trained],
                             vx[trained], vy[trained])  # fmt: skip
        assert ts.max() < 1e10
        lt, _ = loss_curves(np.array([1e12]), lam, psi, rate, p, vx, vy, vx, vy, "leading")
        loss.append(lt[0])
    assert abs(slope(ns, loss) - (-tb["exps"].data)) <= 0.02, slope(ns, loss)


# --- input validation ---------------------------------------------------------------------


def test_wrappers_reject_bad_input():
    t = np.array([0.0, 1.0])
    one_ = np.ones(3)
    with pytest.raises(ValueError, match="level"):
        f_curves(t, one_, one_, one_, one_, one_, one_, one_, "second_order")
    with pytest.raises(ValueError, match="v0y"):
        f_curves(t, one_, one_, one_, one_, np.ones(4), one_, one_)
    with pytest.raises(ValueError, match="non-decreasing"):
        f_curves(t[::-1], one_, one_, one_, one_, one_, one_, one_)
    with pytest.raises(ValueError, match="psi"):
        f_curves(t, one_, -one_, one_, one_, one_, one_, one_)
    with pytest.raises(ValueError, match="test_partials"):
        loss_partials(t, *([one_] * 8), "leading", np.empty((2, 2)), np.empty((1, 2)))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lam", np.nan, "lam must be finite for every task"),
        ("v0y", np.inf, "v0y must be finite for every task"),
        ("psi", 0.0, "psi must be > 0 for every task"),
        ("rate", -1e-300, "rate must be ≥ 0 for every task"),
    ],
)
def test_loss_partials_rejects_bad_task_values(field, value, message):
    """The per-task checks (block by block inside the kernel) name the first bad array; one bad
    task in the middle of a 3000-task table is enough."""
    n = 3000
    a = dict(
        lam=np.ones(n), psi=np.full(n, 10.0), rate=np.full(n, 0.1), v0x=np.full(n, 1e-3),
        v0y=np.full(n, 1e-3), w0x=np.full(n, 1e-3), w0y=np.full(n, 1e-3),
    )  # fmt: skip
    a[field][1777] = value
    t = np.array([0.0, 1.0])
    pt, pr = np.zeros((3, 2)), np.zeros((3, 2))
    with pytest.raises(ValueError, match=message):
        loss_partials(
            t, a["lam"], a["psi"], a["rate"], np.ones(n), a["v0x"], a["v0y"], a["w0x"],
            a["w0y"], "leading", pt, pr,
        )  # fmt: skip


@pytest.mark.parametrize("where", [0, 1023, 1024, 2999])
def test_loss_partials_checks_every_block(where):
    """A bad value in the first, a middle or the last (partial) block is found, whichever
    block holds it."""
    n = 3000
    psi = np.full(n, 10.0)
    psi[where] = -0.0
    one = np.ones(n)
    pt, pr = np.zeros((3, 2)), np.zeros((3, 2))
    with pytest.raises(ValueError, match="psi must be > 0"):
        loss_partials(
            np.array([0.0, 1.0]), one, psi, one, one, *([one * 1e-3] * 4), "leading", pt, pr
        )


def test_value_counts_match_numpy():
    """The branch-free counts (non-finite, finite ≤ 0, finite < 0) against numpy's, on values
    that include ±0, ±inf, NaN, subnormals and the largest doubles."""
    from fastdyn.models.msfr._args import _bad_counts, block_is_valid

    rng = np.random.default_rng(3)
    big = np.finfo(np.float64).max
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, big, -big])
    arrs = [rng.choice(special, 5000) for _ in range(7)]
    ref = np.array(
        [[np.sum(~np.isfinite(a)), np.sum(np.isfinite(a) & (a <= 0)), np.sum(np.isfinite(a) & (a < 0))]
         for a in arrs]
    )  # fmt: skip
    np.testing.assert_array_equal(_bad_counts(*arrs), ref)
    out = np.empty((7, 3), dtype=np.int64)
    assert not block_is_valid(*arrs, 1000, 2000, out)
    sub = [a[1000:2000] for a in arrs]
    np.testing.assert_array_equal(out, _bad_counts(*sub))
    good = [np.full(10, 0.5)] * 7
    assert block_is_valid(*good, 0, 10, out)
    assert not out.any()


@pytest.mark.parametrize(("lam", "flip"), [(-0.5, 1.0), (-2.0, 1.0), (0.5, -1.0)])
def test_negative_strength_balanced_decays_to_zero(lam, flip):
    """Λ < 0 with balanced init (or its mirror image: Λ > 0 with w0 = −v0, solved as −f with
    strength −Λ): f(0) has the wrong sign, so f cannot reach Λ and decays to 0 along the
    logistic f = Λ'/(1 + (Λ'/f'(0) − 1) e^{−2aΛ't}), a = rate·κ, in the frame f' = flip·f,
    Λ' = flip·Λ (numpy, written here). Once e^{−aRt} underflows the Riccati form's e/d was
    0/0 (NaN); now f = 0 and r = −Λ exactly."""
    psi, rate, s0 = 10.0, 0.1, 1e-3
    t = np.array([0.0, 1.0, 10.0, 1e2, 1e3, 1e6, 1e12])
    v0 = (s0, s0 * lam)
    w0 = (flip * s0, flip * s0 * lam)
    kap = psi * (1.0 + lam * lam)
    f0 = kap * (v0[0] + lam * v0[1]) * (w0[0] + lam * w0[1]) / (1.0 + lam * lam)
    lp, fp = flip * lam, flip * f0
    with np.errstate(over="ignore"):
        ref = flip * lp / (1.0 + (lp / fp - 1.0) * np.exp(-2.0 * rate * kap * lp * t))
    f = f_curves(t, [lam], [psi], [rate], [v0[0]], [v0[1]], [w0[0]], [w0[1]], "leading")[0]
    # both exact forms; measured ≤ 2.6e-15 relative (the reference's e^{x} carries ≈ |x|·ε)
    np.testing.assert_allclose(f, ref, rtol=1e-14, atol=0.0)
    lt, lr = loss_curves(
        t, [lam], [psi], [rate], [1.0], [v0[0]], [v0[1]], [w0[0]], [w0[1]], "leading"
    )
    np.testing.assert_allclose(lt, 0.5 * (ref - lam) ** 2, rtol=1e-14, atol=0.0)
    np.testing.assert_allclose(lr, rate * lt, rtol=1e-15, atol=0.0)
    assert f[-1] == 0.0


_EXACT_EXTREMES = """
import numpy as np
from fastdyn.models.msfr.theory import f_curves
t = np.array([0.0, 3.0, 7.0])
base = dict(lam=0.5, psi=10.0, rate=0.1, v0x=1e-3, v0y=5e-4, w0x=1e-3, w0y=5e-4)
for name, value in (("lam", 1e300), ("psi", 1e-300), ("v0x", 1e300)):
    a = {k: np.array([v, v]) for k, v in base.items()}
    a[name][0] = value
    f = f_curves(t, *a.values(), "exact")
    print(bool(np.isnan(f[0]).all()), bool(np.isfinite(f[1]).all()))
"""


def test_exact_level_ends_on_parameters_outside_float_range():
    """Λ = 1e300, ψ = 1e-300 or v0 = 1e300 make the exact reduction's state NaN, on which its
    loop used to spin forever (no comparison with NaN is true, so neither the output time nor
    convergence was ever reached). Now that task's outputs are NaN, the call returns, and the
    other task of the same call is unaffected. Run in a subprocess with a timeout, so that a
    regression fails instead of hanging the suite."""
    r = subprocess.run(
        [sys.executable, "-c", _EXACT_EXTREMES], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"] * 3
