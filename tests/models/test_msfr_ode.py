"""MSFR right-hand side vs the numpy reference and finite differences; the paper's f̃ formula."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.models.msfr import integrate as I
from fastdyn.models.msfr import ode
from tests.reference import msfr_ode_reference as ref


def _random(n, seed=0):
    rng = np.random.default_rng(seed)
    lam = np.exp(rng.uniform(np.log(1e-3), np.log(10), n))
    psi = np.exp(rng.uniform(np.log(1), np.log(1000), n))
    rate = np.exp(rng.uniform(-5, 0, n))
    y = rng.standard_normal((4, n)) * 0.1
    return lam, psi, rate, y


@pytest.mark.parametrize("query", [True, False])
def test_rhs_matches_reference_and_gradient(query):
    lam, psi, rate, y = _random(20)
    params = ode.pack_params(lam, psi, rate, rate, query)
    d = np.empty_like(y)
    ode.rhs(0.0, y, params, d)
    for i in range(20):
        dr = ref.rhs(y[:, i], lam[i], psi[i], rate[i], query)
        assert np.allclose(d[:, i], dr, rtol=1e-13, atol=1e-15 * np.abs(dr).max())
        # dy/dt = −∇ (rate·r²/2): central differences, error O(δ²) ~ 1e-8 relative
        g = np.empty(4)
        for c in range(4):
            e = np.zeros(4)
            e[c] = 1e-6
            lp = rate[i] * (ref.f_of(y[:, i] + e, lam[i], psi[i], query) - lam[i]) ** 2 / 2
            lm = rate[i] * (ref.f_of(y[:, i] - e, lam[i], psi[i], query) - lam[i]) ** 2 / 2
            g[c] = (lp - lm) / 2e-6
        assert np.allclose(d[:, i], -g, rtol=1e-6, atol=1e-8 * np.abs(g).max())


def test_loss_and_eigmax():
    lam, psi, rate, y = _random(30, seed=1)
    wt = rate[::-1].copy()
    out = np.zeros(2)
    ode.loss(y, ode.pack_params(lam, psi, rate, wt), out)
    r = np.array([ref.f_of(y[:, i], lam[i], psi[i]) - lam[i] for i in range(30)])
    assert np.allclose(out, [(wt * r**2 / 2).sum(), (rate * r**2 / 2).sum()], rtol=1e-12)
    for i in range(30):
        for q in (0.0, 1.0):
            ev = np.linalg.eigvalsh(ref.h_matrix(lam[i], psi[i], bool(q))).max()
            assert abs(ode.h_eigmax(lam[i], psi[i], q) - ev) <= 1e-12 * ev


@pytest.mark.parametrize("init", ["balanced", "random"])
def test_paper_unseen_strength_formula(init):
    """Acceptance point 4: after training from small init to convergence, a sequence of strength
    Λ̃ gives f̃ = ṽᵀH̃w̃ = Λ(1 + Λ̃Λ)²/(1 + Λ²)² within 10/ψ (H̃ = ψ ũũᵀ + eeᵀ, ũ = (1, Λ̃))."""
    rng = np.random.default_rng(2)
    n = 60
    lam = rng.uniform(0.2, 3.0, n)
    psi = np.exp(rng.uniform(np.log(20), np.log(2000), n))
    kap = psi * (1 + lam**2)
    s0 = 1e-4 * np.sqrt(lam / kap)  # small init relative to the converged weights
    if init == "balanced":
        u = np.stack([np.ones(n), lam]) / np.sqrt(1 + lam**2)
        v = w = s0 * u
    else:
        v, w = s0 * rng.standard_normal((2, n)), s0 * rng.standard_normal((2, n))
    rate = 1.0 / (kap * lam)
    r = I.integrate_dopri5(lam, psi, rate, rate, v[0], v[1], w[0], w[1], [200.0], rtol=1e-10)
    assert np.all(r.state.status == I.STATUS_SETTLED)  # converged
    y = r.state.y
    worst = 0.0
    for lt in (0.0, 0.5, 2.0, 5.0):
        ft = np.array([ref.f_of(y[:, i], lt, psi[i]) for i in range(n)])
        paper = lam * (1 + lt * lam) ** 2 / (1 + lam**2) ** 2
        dev = np.abs(ft - paper) * psi
        worst = max(worst, dev.max())
        assert np.all(dev <= 10.0), dev.max()
    assert worst > 1e-3  # the O(1/ψ) query correction is visible, not zero


def test_f_and_rate_scale():
    lam, psi, rate, y = _random(5, seed=3)
    for i in range(5):
        p = (lam[i], psi[i], 1.0, rate[i])
        yy = tuple(y[:, i])
        f = ref.f_of(y[:, i], lam[i], psi[i])
        assert abs(
            ode.rate_scale(p, yy)
            - rate[i] * ode.h_eigmax(lam[i], psi[i], 1.0) * (lam[i] + abs(f - lam[i]))
        ) <= 1e-12 * ode.rate_scale(p, yy)
