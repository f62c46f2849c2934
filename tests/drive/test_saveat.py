from __future__ import annotations

import numpy as np
import pytest

from fastdyn.core import saveat


def test_grids():
    t = saveat.log_grid(1e-2, 1e12, 57, include_zero=True)
    assert t[0] == 0.0 and t[1] == 1e-2 and t[-1] == 1e12 and t.size == 58
    assert np.allclose(np.diff(np.log10(t[1:])), 0.25)
    t = saveat.linear_grid(0.0, 10.0, 11, include_zero=True)
    assert t.size == 11 and np.array_equal(t, np.arange(11.0))  # 0 not duplicated
    assert np.array_equal(saveat.make_times("explicit", times=[1, 2, 5]), [1.0, 2.0, 5.0])
    with pytest.raises(ValueError, match="strictly increasing"):
        saveat.explicit_grid([1.0, 1.0])
    with pytest.raises(ValueError, match="grid"):
        saveat.make_times("cubic")
    with pytest.raises(ValueError, match="t_min"):
        saveat.log_grid(0.0, 1.0, 5)


def test_gd_steps():
    k, t = saveat.gd_steps([0.0, 0.004, 0.01, 0.012, 0.5], 0.01)
    assert k.dtype == np.int64
    assert np.array_equal(k, [0, 1, 50])  # 0.004 → step 1 (positive times map to ≥ 1), dups merged
    assert np.allclose(t, 0.01 * k)
    with pytest.raises(ValueError, match="eta"):
        saveat.gd_steps([1.0], -1.0)


def test_output_grid():
    class T:
        grid, t_min, t_max, n_times, times, include_zero = "log", 1e-2, 1e2, 5, (), True

    t, s = saveat.output_grid(T, "rk4", 0.1)
    assert s is None and t.size == 6
    t, s = saveat.output_grid(T, "gd", 0.01)
    assert np.array_equal(s, [0, 1, 10, 100, 1000, 10000]) and np.allclose(t, 0.01 * s)
