"""Plateaus and drops of a loss curve (fastdyn.analysis.plateaus) on curves with known answers:
the plateau levels and the midpoint-crossing times are solved here from the closed forms by hand
or by bisection on the formula, never from the detector."""

from __future__ import annotations

import math

import numpy as np

from fastdyn.analysis.plateaus import find_shape, local_slope

#: levels of the saddle-to-saddle curve and the centres (in t) of its logistic drops, width W in ln t
LEVELS = np.array([1.0, 0.6, 0.35, 0.2])
CENTRES = np.array([10.0, 30.0, 90.0])
W = 0.02


def saddles(t: np.ndarray) -> np.ndarray:
    """ℓ_0 minus a logistic fall of ℓ_k − ℓ_{k+1} centred at t_k (in ln t, width W)."""
    L = np.full_like(t, LEVELS[0])
    for k, c in enumerate(CENTRES):
        L -= (LEVELS[k] - LEVELS[k + 1]) / (1.0 + np.exp(-(np.log(t) - np.log(c)) / W))
    return L


def test_local_slope_is_the_power_of_a_power_law():
    t = np.geomspace(1.0, 100.0, 50)
    # window sums are differences of running sums: round-off 2e-12 measured at the last point
    np.testing.assert_allclose(local_slope(np.log(t), np.log(3.0 * t**-0.7)), 0.7, rtol=1e-10)


def test_sigmoidal_drops_between_known_levels():
    t = np.geomspace(1.0, 1000.0, 3001)
    s = find_shape(t, saddles(t))
    # the other logistics' tails are ≤ e^{-ln(3)/W} ≈ 1e-24 at the plateaus' slowest points
    np.testing.assert_allclose([p.L for p in s.plateaus], LEVELS, rtol=1e-9)
    assert [(d.upper, d.lower) for d in s.drops] == [(0, 1), (1, 2), (2, 3)]
    assert s.falling is None
    for k, (d, c) in enumerate(zip(s.drops, CENTRES, strict=True)):
        # midpoint crossing L = √(ℓ_k ℓ_{k+1}): the logistic's fraction q = (ℓ_k − √(ℓ_kℓ_{k+1}))
        # /(ℓ_k − ℓ_{k+1}) is reached at ln t = ln t_k + W ln(q/(1 − q)); the linear interpolation
        # between samples 0.0023 apart in ln t is within 1e-5 of it in ln t
        a, b = LEVELS[k], LEVELS[k + 1]
        q = (a - math.sqrt(a * b)) / (a - b)
        want = c * math.exp(W * math.log(q / (1 - q)))
        assert abs(math.log(d.t / want)) < 1e-5, (k, d.t, want)
    # each plateau ends and starts where the slope passes 0.05 (± the 2.5 % window): around the
    # drops, never across them
    for p, q, c in zip(s.plateaus, s.plateaus[1:], CENTRES, strict=False):
        assert p.t1 < c < q.t0 and q.t0 / p.t1 < 1.5, (p, q)


def test_a_slow_approach_crosses_a_level_without_a_plateau():
    """An abrupt drop from 0.95 at t ≈ 2.2, then an exponential approach to 0.125 (time constant
    1.5): it passes 0.136 near t = 5.7 on a slope |dlnL/dlnt| ≈ 0.3 (as icl_fig1 passes L*).
    One drop, from the start to the end level; no plateau near 0.136."""
    t = np.linspace(0.02, 30.0, 1500)
    L0, Lmin, A, tau = 0.95, 0.125, 0.49, 1.5
    s_ = 1.0 / (1.0 + (t / 2.2) ** 40)

    def curve(x):
        sx = 1.0 / (1.0 + (x / 2.2) ** 40)
        return Lmin + (L0 - Lmin) * sx + A * np.exp(-x / tau) * (1.0 - sx)

    L = Lmin + (L0 - Lmin) * s_ + A * np.exp(-t / tau) * (1.0 - s_)
    s = find_shape(t, L)
    assert len(s.plateaus) == 2 and len(s.drops) == 1 and s.falling is None, s
    first, last = s.plateaus
    assert first.t0 == t[0] and abs(first.L / L0 - 1) < 1e-9
    assert last.t1 == t[-1] and abs(last.L / Lmin - 1) < 1e-6  # A e^{-30/1.5} = 1e-9
    assert not any(abs(p.L / 0.136 - 1) < 0.05 for p in s.plateaus)
    # the drop: bisection of curve(x) = √(L0 Lmin) on the formula, between 1 and 4
    lo, hi, mid = 1.0, 4.0, math.sqrt(L0 * Lmin)
    for _ in range(60):
        m = 0.5 * (lo + hi)
        lo, hi = (m, hi) if curve(m) > mid else (lo, m)
    # linear interpolation in (ln t, ln L) between samples 0.02 apart on the steep drop
    assert abs(s.drops[0].t / lo - 1) < 2e-3, (s.drops[0].t, lo)


def test_a_curve_still_falling_at_the_end_has_no_second_plateau():
    t = np.geomspace(0.01, 10.0, 400)
    L = 1.0 / (1.0 + (t / 2.0) ** 3)  # steepest in ln t where |dlnL/dlnt| = 3 u/(1 + u) is largest
    s = find_shape(t, L)
    assert len(s.plateaus) == 1 and s.drops == () and s.falling is not None
    assert s.falling.t_end == t[-1] and s.falling.t_steep >= 5.0  # slope still rising at the end


def test_power_law_and_noise():
    t = np.geomspace(1.0, 1e4, 500)
    assert find_shape(t, t**-0.5).plateaus == ()  # |dlnL/dlnt| = 0.5 throughout: no plateau
    # 0.2 % multiplicative noise (seeded) on the saddles: the same plateaus and drops
    rng = np.random.default_rng(1)
    t = np.geomspace(1.0, 1000.0, 3001)
    s = find_shape(t, saddles(t) * (1 + 2e-3 * rng.standard_normal(t.size)))
    assert [(d.upper, d.lower) for d in s.drops] == [(0, 1), (1, 2), (2, 3)]
    np.testing.assert_allclose([p.L for p in s.plateaus], LEVELS, rtol=1e-2)


def test_a_level_is_named_by_the_name_its_long_name_starts_with():
    """A level described "NAME: what it is" is named NAME in the table ("L*"), a plain
    description is used whole, and a long_name that is only its path names nothing."""
    from types import SimpleNamespace

    from fastdyn.analysis.labels import level_label

    meta = {
        "theory/L_star": {"long_name": "L*: the smallest population last-token loss, tr(Lambda)"},
        "theory/train_min": {"long_name": "train-set minimum (P = 5000)"},
        "theory/x": {"long_name": "theory/x"},
    }
    run = SimpleNamespace(meta=meta)
    assert level_label(run, "theory/L_star") == "L*"
    assert level_label(run, "theory/train_min") == "train-set minimum (P = 5000)"
    assert level_label(run, "theory/x") is None
