"""Eq. 21 beside rank-one ATTN_S population runs (issue 19, acceptance 2): the balanced v_0 of a
head from its initial weights, the half-rise time, and the chained prediction of the Fig. 3
plateaus against a population run of the model (the run is the independent reference)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from fastdyn.config import load_config
from fastdyn.drive.optim import make_optimizer
from fastdyn.drive.train import train
from fastdyn.models.icl.attn_s import theory as ts
from fastdyn.models.icl.setup import eq21_theory, prepare, setup

FIG3 = "data/configs/icl_fig3.toml"
POP = ["data.population=true", "attention.reduced=true"]


@pytest.mark.parametrize(
    "v, sigma",
    # (0.01, 1e-9): σ ≪ v, where v − √(v² − σ²) cancels (the ln form used σ²/(v + √c) instead)
    [(0.01, 0.01), (0.01, 0.004), (0.004, 0.01), (-0.007, 0.002), (-0.002, 0.009), (0.01, 1e-9)],
)
def test_balanced_v0_has_the_heads_blow_up_time(v, sigma):
    # independent: integrate the scalar head τv̇ = a k q, τk̇ = a v q, τq̇ = a v k from k = σ,
    # q = sgn(v) σ until |v| = V, then add the tail ∫_V^∞ dv/(a(v² − c)) ≈ 1/(aV) (error ~c/V³)
    lam, kappa = 0.3, 31.0
    a = kappa * lam * lam
    V = 10.0

    def f(_t, y):
        return [a * y[1] * y[2], a * y[0] * y[2], a * y[0] * y[1]]

    def hit(_t, y):
        return abs(y[0]) - V

    hit.terminal = True
    sol = solve_ivp(f, (0, 1e6), [v, sigma, np.sign(v) * sigma], method="DOP853", events=hit,
                    rtol=1e-12, atol=1e-16)  # fmt: skip
    T = sol.t_events[0][0] + 1.0 / (a * V)
    v0 = ts.balanced_v0(v, sigma)
    assert 1.0 / (a * v0) == pytest.approx(T, rel=1e-8)  # measured ≤ 2.2e-10 (rtol 1e-12 + tail)
    if v == sigma:
        assert v0 == v


def test_half_rise_time_reaches_half():
    lam, tr, N, kappa, v0 = 0.2, 1.0, 31, 31.0, 0.003
    t = ts.half_rise_time(v0, lam, tr, N, kappa)
    v = ts.rank_one_ode(np.array([0.0, t]), v0, lam, tr, N, kappa)[-1]
    vstar = ts.rank_one_fixed_point(lam, tr, N, kappa)
    assert v**3 / vstar**3 == pytest.approx(0.5, rel=1e-8)  # quad vs DOP853 at rtol 1e-12


def _crossing(t, y, level):
    i = int(np.argmax(y > level))
    return t[i - 1] + (level - y[i - 1]) / (y[i] - y[i - 1]) * (t[i] - t[i - 1])


def test_fig3_plateaus_against_the_run():
    # Fig. 3 setting (D = 4, H = 5, N = 31, ρ = 1, init 1e-2, lr 2e-2), population, t/τ = 1660
    cfg = load_config(FIG3, POP)
    p = prepare(cfg.settings)
    m, n = p.model, 41500
    saves = np.arange(0, n + 1, 5)
    th = p.theta.copy()
    rec = train(m, p.prep, th, make_optimizer("gd", m.n_params, 2e-2), n, saves, eigvecs=p.eigvecs)
    t = 2 * 2e-2 * saves
    G = rec["Gamma_eig"]
    pred, static, _ = eq21_theory(cfg.settings, p, t)
    final = 1.0 / ts.shrink(p.eigvals, m.N)  # e_dᵀΓ*e_d
    np.testing.assert_allclose(G[-1], final, rtol=1e-6)
    half = np.array([_crossing(t, G[:, d], 0.5 * final[d]) for d in range(4)])  # 26.68 … 1632.3
    drop = static["theory/eq21/drop_time"]
    dur = static["theory/eq21/plateau_duration"]
    # acceptance 10 %; measured −0.82, −0.71, −0.02, +0.64 % (durations), half of it GD vs flow
    np.testing.assert_allclose(dur, np.diff(np.concatenate([[0.0], half])), rtol=0.02)
    np.testing.assert_allclose(drop, half, rtol=0.02)
    # the head that carries direction d at the end is the one the chain picked
    r, K, Q = m.views(th)  # eigvals are decreasing: columns of eigvecs in order
    carried = r[:, -1, None] * (K[:, 0, : m.D] @ p.eigvecs) * (Q[:, 0, :] @ p.eigvecs)
    np.testing.assert_array_equal(static["theory/eq21/head"], np.argmax(np.abs(carried), axis=0))
    # the streamed curve has the run's shape: shifted by the half-time offset, it matches the run
    # within 3 % from 10 % to 50 % of the final value (measured 2.2, 1.6, 0.4, 0.2 %); unshifted,
    # the ≤ 0.8 % timing error on a rise of e-folding time ~0.3 τ leaves 35–90 % (not held)
    for d in range(4):
        shifted = np.interp(t + drop[d] - half[d], t, pred[:, d])
        w = (G[:, d] >= 0.1 * final[d]) & (t <= half[d])
        assert np.abs(shifted[w] / G[w, d] - 1).max() < 0.03, d


def test_setup_writes_eq21_only_for_rank_one_population_attn_s():
    s = setup(load_config(FIG3, POP + ["schedule.epochs=11"]))
    assert s.series["theory/eq21/Gamma_eig"] == (4,)
    assert {"theory/eq21/plateau_duration", "theory/eq21/drop_time"} <= set(s.static)
    for extra in (["attention.R=2"], ["attention.loss=cumulative"]):
        s2 = setup(load_config(FIG3, POP + ["schedule.epochs=11"] + extra))
        assert "theory/eq21/Gamma_eig" not in s2.series
    s3 = setup(load_config(FIG3, ["data.P=20", "data.n_test=5", "schedule.epochs=11"]))
    assert "theory/eq21/Gamma_eig" not in s3.series


def test_setup_notes_the_directions_where_the_chain_does_not_apply():
    """Seed 0 without rotation: the head picked for direction 2 passes half-rise during direction
    1's plateau (two heads grow on directions 1 and 2 together), so direction 2's duration is 0
    and direction 1 is learned by two heads: the note names both, and the run shows why (the
    independent reference): direction 1 rises 28 % before its predicted time, direction 3, not
    named, within 5 % of it. With rotation (the paper's Fig. 3) no note."""
    cfg = load_config(FIG3, POP + ["data.rotate=false"])
    p = prepare(cfg.settings)
    m, n = p.model, 3500  # t/τ = 140: past direction 3's drop (t/τ ≈ 122)
    saves = np.arange(0, n + 1, 5)
    th = p.theta.copy()
    rec = train(m, p.prep, th, make_optimizer("gd", m.n_params, 2e-2), n, saves, eigvecs=p.eigvecs)
    t, G = 2 * 2e-2 * saves, rec["Gamma_eig"]
    final = 1.0 / ts.shrink(p.eigvals, m.N)
    half = np.array([_crossing(t, G[:, d], 0.5 * final[d]) for d in range(3)])
    s = setup(load_config(FIG3, POP + ["schedule.epochs=11", "data.rotate=false"]))
    drop = s.static["theory/eq21/drop_time"]
    assert s.static["theory/eq21/plateau_duration"][1] == 0.0
    assert s.extra_attrs["note"].startswith("theory/eq21: not a prediction for direction(s) 1, 2 ")
    # measured: 34.95 vs 48.35 (−27.7 %), 45.85 vs 48.35 (−5.2 %), 121.99 vs 118.01 (+3.4 %)
    assert half[0] / drop[0] - 1 < -0.2
    assert abs(half[2] / drop[2] - 1) < 0.05
    s = setup(load_config(FIG3, POP + ["schedule.epochs=11"]))
    assert np.all(s.static["theory/eq21/plateau_duration"] > 0) and "note" not in s.extra_attrs


def test_streamed_eq21_matches_a_run_started_on_the_ansatz(tmp_path):
    # Fig. 3 setting (population, reduced, last-token loss, D = 4, linear spectrum), started ON the
    # ansatz through init.from_file: head d carries eigen-direction d with v = k_d = q_d (model
    # units, so Γ = Σ_i v_i k_i q_iᵀ has e_dᵀΓe_d = v_d³), distinct v_d, the spare head exactly 0
    # and the keys' label entries 0. The population gradient is then diagonal in the eigenbasis,
    # the heads decouple and Eq. 21 is exact per direction in the flow limit.
    cfg0 = load_config(FIG3, POP)
    p0 = prepare(cfg0.settings)
    m = p0.model
    H, D = m.H, m.D
    v = 1e-2 * np.array([1.0, 0.9, 0.8, 0.7])
    order = np.argsort(p0.eigvals)[::-1]
    E = p0.eigvecs[:, order]  # rotated eigenvectors (data.rotate): not the coordinate axes
    WV, WK, WQ = np.zeros((H, D + 1, D + 1)), np.zeros((H, 1, D + 1)), np.zeros((H, 1, D + 1))
    for d in range(D):
        WV[d, -1, D], WK[d, 0, :D], WQ[d, 0, :D] = v[d], v[d] * E[:, d], v[d] * E[:, d]
    path = tmp_path / "on_ansatz.npz"
    np.savez(path, W_V=WV, W_K=WK, W_Q=WQ)
    cfg = load_config(FIG3, POP + [f"init.from_file={path}"])
    p = prepare(cfg.settings)
    lam, trace = p0.eigvals[order], float(p0.eigvals.sum())
    final = 1.0 / ts.shrink(p.eigvals, m.N)
    tmax = 1.3 * ts.half_rise_time(v[-1], lam[-1], trace, m.N, m.kappa)  # t/τ ≈ 593
    err_run, err_flow = {}, {}
    for lr in (1e-3, 2e-4):
        n = int(tmax / (2 * lr))
        saves = np.unique(np.linspace(0, n, 801).astype(np.int64))
        th = p.theta.copy()
        rec = train(m, p.prep, th, make_optimizer("gd", m.n_params, lr), n, saves,
                    eigvecs=p.eigvecs)  # fmt: skip
        t, G = 2 * lr * saves, rec["Gamma_eig"]
        pred, static, _ = eq21_theory(cfg.settings, p, t)
        # the chain gives direction d to head d, from its own v (balanced_v0 of a balanced head)
        np.testing.assert_array_equal(static["theory/eq21/head"][order], np.arange(D))
        assert static["theory/eq21/v0"][order][0] == v[0]
        # independent flow-limit reference: each head alone on Eq. 21 from its v_d at t = 0
        exact = np.stack(
            [
                m.kappa * ts.rank_one_ode(t, v[d], lam[d], trace, m.N, m.kappa) ** 3
                for d in range(D)
            ],
            axis=1,
        )[:, np.argsort(order)]
        w = (G >= 1e-3 * final) & (G <= 0.99 * final)  # before and through each drop
        err_run[lr] = np.array(
            [np.abs(pred[w[:, d], d] / G[w[:, d], d] - 1).max() for d in range(D)]
        )
        err_flow[lr] = np.array(
            [np.abs(G[w[:, d], d] / exact[w[:, d], d] - 1).max() for d in range(D)]
        )
        np.testing.assert_allclose(G[-1], final, rtol=1e-6)
    # GD vs flow is first order: the run's distance from the exact flow shrinks ∝ lr (measured
    # ratios 4.97, 4.98, 4.99, 5.00 for lr 1e-3 → 2e-4; 1.81, 1.19, 0.64, 0.21 % at lr 1e-3)
    np.testing.assert_allclose(err_flow[1e-3] / err_flow[2e-4], 5.0, rtol=0.02)
    # acceptance: the streamed /theory/eq21/Gamma_eig within 1 % of the run before and through
    # each drop; measured 0.37, 0.32, 0.16, 0.05 % at lr 2e-4 (1.84, 1.28, 0.67, 0.22 % at 1e-3).
    # The chain's own floor (≤ 8.1e-4, direction 2) is its small-weight flow between drops, which
    # drops Eq. 21's v⁵ term for the heads still waiting (relative size (v/v*)³ there).
    assert err_run[2e-4].max() <= 0.01
    assert (err_run[2e-4] < err_run[1e-3]).all()
