"""Tests of fastdyn.models.msfr.scaling: theory exponents, prefactors, emergence and cutoff."""

import math
import warnings

import numpy as np
import pytest
from scipy import integrate, special

from fastdyn.analysis import auto_window, fit_power_law
from fastdyn.models.msfr.scaling import (
    cutoff_time,
    emergence_times,
    exponents,
    learned_task_cutoff,
    loss_vs_data,
    loss_vs_model_size,
    normaliser,
)


@pytest.mark.parametrize(
    "abg, expected",
    [
        # (alpha, beta, gamma): eta, kappa_t, time, model_size, data, compute, d_star by hand
        ((2.0, 0.0, 0.0), (1.0, 2.0, 1 / 2, 1.0, 1 / 2, 1 / 3, 1 / 3)),
        ((2.0, 0.3, 0.25), (1.5, 2.55, 1.5 / 2.55, 1.5, 0.75, 1.5 / 3.55, 1 / 3.55)),
        ((1.5, -0.2, 0.1), (0.7, 1.4, 0.5, 0.7, 0.7 / 1.5, 0.7 / 2.4, 1 / 2.4)),
    ],
)
def test_exponents_hand_values(abg, expected):
    e = exponents(*abg)
    got = (e.eta, e.kappa_t, e.time, e.model_size, e.data, e.compute, e.d_star)
    assert got == pytest.approx(expected, rel=1e-14)
    assert e.to_dict()["compute"] == e.compute


def test_beta_changes_only_time_and_compute():
    e0, e1 = exponents(2.0, 0.0, 0.1), exponents(2.0, 0.5, 0.1)
    assert (e0.model_size, e0.data) == (e1.model_size, e1.data)
    assert e1.time < e0.time and e1.compute < e0.compute


@pytest.mark.parametrize(
    "abg, match",
    [
        ((1.0, 0.0, 0.0), r"alpha \+ 2\*gamma > 1"),
        ((1.2, 0.0, -0.1), r"alpha \+ 2\*gamma > 1"),
        ((0.0, 0.0, 1.0), "alpha must be > 0"),
        ((2.0, -3.0, 0.0), "kappa_t"),
        ((float("nan"), 0.0, 0.0), "alpha must be finite"),
        (("two", 0.0, 0.0), "alpha must be a real number"),
    ],
)
def test_exponents_validation(abg, match):
    with pytest.raises(ValueError, match=match):
        exponents(*abg)


@pytest.mark.parametrize("alpha, gamma", [(2.0, 0.0), (1.5, 0.25)])
def test_model_size_prefactor(alpha, gamma):
    # exact tail for N_s = inf: Λ0² ζ(α+2γ, D+1) / (2 ζ(α)); Euler-Maclaurin says the
    # D^-η/(2Zη) estimate has relative error ≈ η/(2D), so tolerate η/D
    eta = alpha + 2 * gamma - 1
    for D in (1e2, 1e3, 1e4):
        exact = 0.7**2 * special.zeta(alpha + 2 * gamma, D + 1) / (2 * special.zeta(alpha))
        est = loss_vs_model_size(D, alpha, gamma, strength0=0.7)
        assert abs(est / exact - 1) < eta / D


@pytest.mark.parametrize("alpha, gamma", [(2.0, 0.0), (1.5, 0.25)])
def test_data_prefactor(alpha, gamma):
    # E L(N) = Σ_s P(s) Λ_s²/2 (1 - P(s))^N (tasks never sampled) with N_s = 2e6; the Γ-function
    # estimate is the integral approximation: measured relative error 1.4e-4 and 6.4e-4 at N=1e5
    Ns = 2_000_000
    s = np.arange(1, Ns + 1, dtype=float)
    P = s**-alpha
    P /= P.sum()
    exact = np.sum(P * s ** (-2 * gamma) / 2 * (1 - P) ** 1e5)
    est = loss_vs_data(1e5, alpha, gamma, n_tasks=Ns)
    assert abs(est / exact - 1) < 2e-3


def test_normaliser():
    assert normaliser(2.0) == pytest.approx(math.pi**2 / 6, rel=1e-14)
    assert normaliser(2.0, 3) == pytest.approx(1 + 1 / 4 + 1 / 9, rel=1e-14)
    big = normaliser(1.5, 10**6)
    assert big == pytest.approx(special.zeta(1.5) - special.zeta(1.5, 10**6 + 1), rel=1e-12)
    with pytest.raises(ValueError, match="alpha > 1"):
        normaliser(0.9)


def test_emergence_time_hand_value():
    # n_tasks = 2, α = 2: Z = 1.25, P(1) = 0.8; ψ = 100, Λ = 1: κ = 200, f0(0) = 200 σ0² = 2e-4
    # t_1 = ln(1/2e-4 - 1) / (2 · 0.8 · 200 · 1) = ln(4999) / 320
    ts = emergence_times(n_tasks=2, alpha=2.0, psi0=100, init_scale=1e-3)
    assert ts[0] == pytest.approx(math.log(4999) / 320, rel=1e-14)


def test_emergence_time_matches_ode():
    # balanced init along û, ε = 0: g = h, f = κ g², dg/dt = -a (f - Λ) g; half-rise time
    # from direct integration (rtol 1e-10) must equal the closed form
    kw = dict(n_tasks=50, alpha=1.5, beta=0.3, gamma=0.2, strength0=0.8, psi0=200, init_scale=1e-3)
    ts = emergence_times(**kw)
    for s in (1, 7, 50):
        lam = 0.8 * s**-0.2
        psi = max(1, math.floor(200 * s**-0.3 + 0.5))
        kap = psi * (1 + lam**2)
        P = s**-1.5 / np.sum(np.arange(1, 51, dtype=float) ** -1.5)
        a = P * kap

        def half(t, g, lam=lam, kap=kap):
            return kap * g[0] ** 2 - lam / 2

        half.terminal = True
        sol = integrate.solve_ivp(
            lambda t, g, a=a, lam=lam, kap=kap: [-a * (kap * g[0] ** 2 - lam) * g[0]],
            (0, 10 * ts[s - 1]),
            [1e-3],
            events=half,
            rtol=1e-11,
            atol=1e-15,
        )
        assert sol.t_events[0][0] == pytest.approx(ts[s - 1], rel=1e-7)


def test_cutoff_and_frequencies():
    kw = dict(n_tasks=1000, alpha=2.0, psi0=100, init_scale=1e-3)
    tc = cutoff_time(**kw)
    assert learned_task_cutoff(tc, **kw) == 1000
    assert learned_task_cutoff(tc * (1 - 1e-9), **kw) < 1000
    sc = learned_task_cutoff(np.logspace(-3, 8, 50), **kw)
    assert np.all(np.diff(sc) >= 0) and sc[0] == 0
    assert cutoff_time(0.5, **kw) < tc
    freq = np.full(1000, 1e-3)
    freq[-1] = 0.0
    ts = emergence_times(frequencies=freq, **kw)
    assert math.isinf(ts[-1]) and math.isinf(cutoff_time(frequencies=freq, **kw))
    with pytest.raises(ValueError, match="fraction"):
        cutoff_time(0.0, **kw)
    with pytest.raises(ValueError, match="n_tasks"):
        emergence_times(n_tasks=0)


def test_time_law_on_closed_form_with_cutoff():
    # leading-order closed form L(t) = Σ P(s) (Λ_s - f_s)² / 2 with logistic f_s (spec §4),
    # N_s = 2e4, α = 2, β = γ = 0, ψ0 = 1000: theory time exponent η/κ_t = 1/2. The auto window
    # with the s_c(t) cutoff must warn and give 1/2 within 0.02 (spec §6; measured 0.504).
    Ns, psi0, s0 = 20_000, 1000, 1e-3
    s = np.arange(1, Ns + 1, dtype=float)
    P = s**-2.0
    P /= P.sum()
    kap = psi0 * 2.0
    c = 1.0 / (kap * s0**2) - 1.0
    t = np.logspace(-1, 7.3, 400)
    cE = c * np.exp(np.maximum(-2 * (P * kap)[None, :] * t[:, None], -700))
    L = np.sum(P * (cE / (1 + cE)) ** 2 / 2, axis=1)
    tc = cutoff_time(n_tasks=Ns, alpha=2.0, psi0=psi0, init_scale=s0)
    assert t[0] < tc < t[-1]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        win = auto_window(t, L, cutoff_x=tc)
    assert any(f"cutoff x = {tc:g}" in str(w.message) for w in rec)
    f = fit_power_law(t, L, window=win, bootstrap=0)
    assert abs(f.exponent - exponents(2.0, 0.0, 0.0).time) < 0.02
