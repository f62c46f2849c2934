"""``/theory/pcr_loss``: the PCR predictor of M_m (issue 19) — population: equal to L(M_m) from the
closed form; finite P: its loss on the IC test set, against the numpy ATTN_M forward pass with
one head carrying Γ_m (tests/reference/icl_reference.py)."""

from __future__ import annotations

import numpy as np

from fastdyn.config import load_config
from fastdyn.models.icl.attn_m.theory import pcr_predictor, plateau_losses
from fastdyn.models.icl.setup import prepare, setup
from tests.reference.icl_reference import attn_loss

FIG3 = "data/configs/icl_fig3.toml"


def test_population_pcr_loss_is_the_plateau_loss():
    s = setup(load_config(FIG3, ["data.population=true", "attention.reduced=true"]))
    lam = s.static["theory/eigvals"]
    # moments (vec/kron, round-off of O(10) terms) vs the closed form: measured 4.4e-16
    np.testing.assert_allclose(s.static["theory/pcr_loss"], plateau_losses(lam, 31), atol=1e-12)


def test_finite_p_pcr_loss_on_the_ic_test_set():
    sets = ["data.P=10", "data.n_test=40", "data.N=9", "schedule.epochs=11"]
    cfg = load_config(FIG3, sets)
    got = setup(cfg).static["theory/pcr_loss"]
    p = prepare(cfg.settings)
    tok, lab = p.data.tests["ic"]
    D, N = 4, 9
    for m in range(D + 1):
        WV = np.zeros((1, D + 1, D + 1))
        WV[0, D, D] = 1.0  # ŷ = (1/N) Σ_j y_j x_jᵀ Γ x_q = βᵀ Γ x_q (ρ = N, 𝐮 = 0)
        KQ = np.zeros((1, D + 1, D + 1))
        KQ[0, :D, :D] = pcr_predictor(p.eigvals, p.eigvecs, N, m)
        ref = attn_loss({"W_V": WV, "W_KQ": KQ}, tok, lab, scale="N")
        assert abs(got[m] - ref) <= 1e-12 * ref  # two summation orders: measured 4.3e-16 rel
    assert "theory/pcr_loss" not in setup(load_config(FIG3, [*sets[:-1], "data.n_test=0"])).static
