"""``fastdyn.models.msfr.time_law.time_law``: the time law a stored MSFR config predicts over a
window of times: the regime's closed form, a family's local law, or none (with why)."""

from __future__ import annotations

import math

import pytest

from fastdyn.models.msfr.time_law import time_law
from tests.analysis.test_load import msfr_config
from tests.reference.msfr_local_laws_reference import (
    emergence_times,
    family,
    learned,
    local_exponents,
)


@pytest.mark.parametrize(
    "strength0, regime, kappa_t",
    [(1e-3, "small", 2.0 + 0.3 + 0.25), (100.0, "large", 2.0 + 0.3 + 3 * 0.25)],
)
def test_power_laws_name_the_regime_and_give_eta_over_kappa_t(strength0, regime, kappa_t):
    """α = 2, β = 0.3, γ = 0.25: η = α + 2γ − 1 = 1.5 and p = η/κ_t of the regime of the
    tasks emerging in the window (Λ_s = Λ0 s^-γ ≤ 1e-3 or ≥ 100/1000^0.25 = 17.8 there)."""
    cfg = msfr_config(n_tasks=10_000, strength0=strength0)
    law = time_law(cfg, (1e2, 1e6))
    assert law.kind == "power" and law.regime == regime and law.single
    assert law.exponent == pytest.approx(1.5 / kappa_t, rel=1e-14)
    assert law.s_lo >= 1 and law.s_hi > law.s_lo
    assert law.theory().exponent == law.exponent


def test_outside_the_laws_domain_none_applies_and_says_why():
    law = time_law(msfr_config(n_tasks=1000, alpha=1.0, gamma=0.0), (1.0, 1e3))
    assert law.kind == "none" and math.isnan(law.exponent)
    assert "alpha + 2*gamma > 1" in law.text and law.theory().reason == law.text


def test_a_family_gets_the_local_law_of_the_tasks_emerging_in_the_window():
    cfg = msfr_config(n_tasks=3000, beta=0.0, gamma=0.0, strength_law="exponential",
                      strength_decay=300.0)  # fmt: skip
    window = (1.0, 1e4)
    law = time_law(cfg, window)
    P, lam, psi = family(3000, strength_law="exponential", strength_decay=300.0)
    ts = emergence_times(P, lam, psi, 1e-3)
    s_lo, s_hi = learned(ts, window[0], strict=True) + 1, learned(ts, window[1])
    ref = local_exponents(P, lam, psi, s_lo, s_hi, 1e-3)
    assert law.kind == "local" and (law.s_lo, law.s_hi) == (ref["first"], ref["last"])
    assert law.exponent == pytest.approx(ref["time"], rel=1e-10)
    assert "local law of task.strength_law = 'exponential'" in law.source


def test_a_table_that_cannot_be_read_here_gives_none(tmp_path):
    cfg = msfr_config(n_tasks=100, beta=0.0, gamma=0.0)
    for k in ("alpha", "beta", "gamma", "psi0"):
        cfg["task"].pop(k)
    cfg["task"]["table"] = str(tmp_path / "gone.npz")
    law = time_law(cfg, (1.0, 10.0))
    assert law.kind == "none" and "task.table" in law.text and "cannot be read here" in law.text
