"""The host side of a segment (fastdyn.models.msfr.integrate): per-task parameters already in the
kernels' form pass through as the same objects (the GPU twins find their device copies by
identity) and are checked once per array; tracked-position arrays are reused between segments;
bad input is still refused."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.models.msfr import integrate


def test_parameters_pass_through_and_are_checked():
    n = 1000
    lam, psi, rate, wt = np.ones(n), np.full(n, 2.0), np.full(n, 0.1), np.full(n, 1e-3)
    out = integrate._params(lam, psi, rate, wt)
    assert all(o is a for o, a in zip(out, (lam, psi, rate, wt), strict=True))
    assert integrate._params(lam, psi, rate, wt)[0] is lam  # again: from the checked cache
    as_list = integrate._params(list(lam), psi, rate, wt)  # converted, then checked
    assert as_list[0] is not lam and np.array_equal(as_list[0], lam)
    for bad, what in (
        ((np.r_[lam[:-1], np.nan], psi, rate, wt), "lam: must be finite"),
        ((lam, np.r_[psi[:-1], 0.0], rate, wt), "psi: must be > 0"),
        ((lam, psi, np.r_[rate[:-1], -1e-9], wt), "rate: must be ≥ 0"),
        ((lam, psi, rate, np.r_[wt[:-1], np.inf]), "wtest: must be finite"),
    ):
        with pytest.raises(ValueError, match=what):
            integrate._params(*bad)


def test_an_overflowing_sum_of_finite_values_is_not_refused():
    big = np.full(10, 1e308)  # the sum overflows; every entry is finite
    assert integrate._f64("lam", big) is big


def test_tracked_positions_are_reused_and_right():
    tr, tpos = integrate._track_positions([3, 1], 10)
    tr2, tpos2 = integrate._track_positions(np.array([3, 1]), 10)
    assert tpos2 is tpos
    np.testing.assert_array_equal(tpos, [-1, 1, -1, 0, -1, -1, -1, -1, -1, -1])
    _, other = integrate._track_positions([1, 3], 10)  # another order: other rows of f_track
    np.testing.assert_array_equal(other, [-1, 0, -1, 1, -1, -1, -1, -1, -1, -1])
    with pytest.raises(ValueError, match="unique"):
        integrate._track_positions([1, 1], 10)
