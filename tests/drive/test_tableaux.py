"""The generic solver's methods as data (``drive/tableaux.py``) and the one step-size controller
(``core/steppers.step_factor``), against the Runge–Kutta order conditions and the controller's
textbook rule (Hairer, Nørsett & Wanner I, §II.2 and §II.4), written out here in plain Python."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastdyn.core import steppers
from fastdyn.drive.tableaux import DOPRI5, METHODS, RK4


def _order_conditions(c, a, b) -> dict[str, float]:
    """Residuals of the order conditions up to order 5 that Butcher's trees give for (c, A, b)."""
    c, a, b = (np.asarray(x, dtype=float) for x in (c, a, b))
    ac, ac2, ac3 = a @ c, a @ c**2, a @ c**3
    return {
        "1": b.sum() - 1,
        "2": b @ c - 1 / 2,
        "3a": b @ c**2 - 1 / 3,
        "3b": b @ ac - 1 / 6,
        "4a": b @ c**3 - 1 / 4,
        "4b": b @ (c * ac) - 1 / 8,
        "4c": b @ ac2 - 1 / 12,
        "4d": b @ (a @ ac) - 1 / 24,
        "5a": b @ c**4 - 1 / 5,
        "5b": b @ (c**2 * ac) - 1 / 10,
        "5c": b @ (c * ac2) - 1 / 15,
        "5d": b @ (c * (a @ ac)) - 1 / 30,
        "5e": b @ (ac * ac) - 1 / 20,
        "5f": b @ ac3 - 1 / 20,
        "5g": b @ (a @ (c * ac)) - 1 / 40,
        "5h": b @ (a @ ac2) - 1 / 60,
        "5i": b @ (a @ (a @ ac)) - 1 / 120,
    }


@pytest.mark.parametrize("tab", [RK4, DOPRI5], ids=lambda t: t.name)
def test_tableaux_satisfy_their_order_conditions(tab):
    """RK4: every condition of order ≤ 4, and not all of order 5; DOPRI5's b: order 5, its
    embedded b̂ = b − e: order 4 and not 5; c_i = Σ_j a_ij (internal consistency); A strictly
    lower triangular (explicit). Tolerance: 1e-15, the rounding of sums of a few fractions."""
    a, b = tab.a, tab.b / tab.b_den
    assert np.allclose(a.sum(axis=1), tab.c, rtol=0, atol=1e-15)
    assert np.all(np.triu(a) == 0.0)
    res = _order_conditions(tab.c, a, b)
    order = 4 if tab is RK4 else 5
    for k, v in res.items():
        if int(k[0]) <= order:
            assert abs(v) <= 1e-15, (tab.name, k, v)
    if tab is RK4:
        assert max(abs(v) for k, v in res.items() if k[0] == "5") > 1e-3
    else:
        assert tab.fsal and np.array_equal(a[-1, :-1], b[:-1]) and b[-1] == 0.0
        res4 = _order_conditions(tab.c, a, b - tab.e)
        assert max(abs(v) for k, v in res4.items() if int(k[0]) <= 4) <= 1e-15
        assert max(abs(v) for k, v in res4.items() if k[0] == "5") > 1e-5
        assert tab.error_order == 4


def test_every_generic_integrator_is_registered():
    assert sorted(METHODS) == ["dopri5", "gd", "rk4"]
    assert METHODS["gd"].stages == 1 and METHODS["gd"].b.tolist() == [1.0]  # y + h·rhs(y)


def _textbook(err: float, rejected_before: bool) -> float:
    """h_new/h: accept iff err ≤ 1; clip(0.9·err^(−1/5), 0.2, 10), at most 1 after a
    rejection; 0.2 for a non-finite err, 10 for err = 0."""
    if not err < math.inf:
        return 0.2
    if err == 0.0:
        fac = 10.0
    else:
        fac = min(10.0, max(0.2, 0.9 * err ** (-1 / 5)))
    if err <= 1.0 and rejected_before:
        fac = min(1.0, fac)
    return fac


@pytest.mark.parametrize("rej", [False, True])
def test_the_one_controller_is_the_textbook_rule(rej):
    """step_factor (with pw = err^(−1/5)) and dopri5_controller against the rule above on errors
    from 0 to 1e12 and inf, NaN: equal to the last bit (the same operations)."""
    errs = [0.0, 1e-300, 1e-12, 1e-3, 0.5, 1.0, 1.0000001, 3.0, 1e3, 1e12, math.inf, math.nan]
    for err in errs:
        pw = err**steppers.CONTROL_EXPONENT if 0.0 < err < math.inf else 1.0
        got = steppers.step_factor(err, pw, rej)
        want = _textbook(err, rej)
        assert got == want, (err, got, want)
        acc, h = steppers.dopri5_controller(err, 2.0, rej)
        assert acc == (err <= 1.0) and h == 2.0 * want, (err, acc, h)
