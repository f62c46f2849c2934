"""Fits of files beside theory: time fits (auto window, MSFR cutoff), D/N scans, frontier, plateaus."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fastdyn.analysis import compare
from fastdyn.h5 import load
from fastdyn.models.icl.commands import plateau_table
from fastdyn.models.msfr import scaling
from tests.analysis.test_load import make_run, msfr_config

EX = scaling.exponents(2.0, 0.3, 0.25)  # eta = 1.5, kappa_t = 2.55


def plateau_power(t, p, t0=10.0, L0=1.0):
    """L0 until t0, then exactly L0 (t/t0)^-p."""
    return L0 * np.minimum(1.0, (t / t0) ** -p)


def test_theory_lookup_for_msfr_and_none_otherwise(tmp_path):
    t = np.geomspace(1, 10, 4)
    r = load(make_run(tmp_path / "m.h5", t, {"loss/test": t}))
    assert compare.theory_for(r, "time").exponent == pytest.approx(1.5 / 2.55, abs=1e-15)
    assert compare.theory_for(r, "model_size").exponent == pytest.approx(1.5, abs=1e-15)
    assert compare.theory_for(r, "n_samples").exponent == pytest.approx(0.75, abs=1e-15)
    c = compare.theory_for(r, "compute")
    assert c.exponent == pytest.approx(1.5 / 3.55, abs=1e-15) and c.d_star == pytest.approx(
        1 / 3.55
    )
    assert "alpha=2, beta=0.3, gamma=0.25" in c.source
    other = load(make_run(tmp_path / "a.h5", t, {"loss/test": t}, model="attn_s"))
    assert compare.theory_for(other, "time") is None
    bad = load(make_run(tmp_path / "b.h5", t, {"loss/test": t}, config=msfr_config(alpha=0.5)))
    assert compare.theory_for(bad, "time") is None  # alpha + 2 gamma = 1: outside the laws
    with pytest.raises(ValueError, match="x must be one of"):
        compare.theory_for(r, "tokens")


def test_time_fit_recovers_exponent_and_skips_plateau(tmp_path):
    t = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 400)])
    L = np.concatenate([[1.0], plateau_power(t[1:], EX.time)])  # t = 0 is kept in the file
    r = load(make_run(tmp_path / "m.h5", t, {"loss/test": L}))
    rep = compare.fit_run(r, bootstrap=200)
    assert rep.fit.exponent == pytest.approx(EX.time, abs=1e-10)
    assert rep.fit.window[0] >= 10.0  # the plateau (t < 10) is excluded
    assert rep.window_mode == "auto" and rep.difference == pytest.approx(0, abs=1e-10)
    assert rep.cutoff > 1e8 and rep.warnings == ()  # N_s = 1e6: s_c stays far below 0.1 N_s
    d = rep.to_dict()
    assert d["exponent"] == pytest.approx(EX.time) and d["theory"] == pytest.approx(EX.time)
    assert d["ci"][0] <= d["exponent"] <= d["ci"][1] and d["window"][0] >= 10.0
    # an explicit window is honoured
    rep2 = compare.fit_run(r, window=(1e3, 1e5), bootstrap=0)
    assert rep2.fit.window[0] >= 1e3 and rep2.fit.window[1] <= 1e5 and rep2.window_mode == "given"


def test_auto_window_stops_at_the_msfr_cutoff_and_warns_naming_it(tmp_path):
    cfg = msfr_config(n_tasks=1000)
    probe = load(make_run(tmp_path / "p.h5", [1.0, 2.0], {"loss/test": [1.0, 1.0]}, config=cfg))
    tc = compare.cutoff_for(probe).time
    # independent reference: s_c(tc) from scaling.learned_task_cutoff reaches 10% of 1000 tasks
    kw = dict(n_tasks=1000, alpha=2.0, beta=0.3, gamma=0.25, psi0=100.0, init_scale=1e-3)
    assert (
        scaling.learned_task_cutoff(tc, **kw) >= 100 > scaling.learned_task_cutoff(tc * 0.999, **kw)
    )
    t = np.geomspace(1e-2, tc * 1e4, 600)
    # the law up to tc, then a much steeper finite-size drop
    L = plateau_power(t, EX.time, t0=1e-1) * np.where(t > tc, (t / tc) ** -2.0, 1.0)
    r = load(make_run(tmp_path / "m.h5", t, {"loss/test": L}, config=cfg))
    with pytest.warns(UserWarning, match="cutoff"):
        rep = compare.fit_run(r, bootstrap=0)
    assert rep.fit.window[1] <= tc * (1 + 1e-12)
    assert rep.fit.exponent == pytest.approx(EX.time, abs=1e-3)
    assert any("learned-task cutoff" in w and f"{tc:g}" in w for w in rep.warnings)
    # an explicit window past the cutoff fits what it is told, but says so
    with pytest.warns(UserWarning, match="extends past the learned-task cutoff"):
        compare.fit_run(r, window=(1.0, None), bootstrap=0)


def _scan_runs(tmp_path, key, values, p, A=3.0):
    runs = []
    t = np.geomspace(1, 1e4, 20)
    for v in values:
        final = A * v**-p
        L = final * (t / 1e4) ** -0.1  # ends at ``final``; a power of t (log-log interp is exact)
        cfg = msfr_config(**{key: v})
        runs.append(load(make_run(tmp_path / f"{key}{v}.h5", t, {"loss/test": L}, config=cfg)))
    return runs


def test_model_size_scan_final_and_at_time(tmp_path):
    Ds = [10, 30, 100, 300, 1000, 3000]
    runs = _scan_runs(tmp_path, "model_size", Ds, 1.5)
    rep = compare.scan(runs[::-1], "model_size", bootstrap=100)  # order of the runs is irrelevant
    np.testing.assert_array_equal(rep.x, Ds)
    np.testing.assert_allclose(rep.y, 3.0 * np.array(Ds, float) ** -1.5, rtol=1e-12)
    assert rep.fit.exponent == pytest.approx(1.5, abs=1e-10)
    assert rep.theory.exponent == pytest.approx(1.5) and rep.difference == pytest.approx(
        0, abs=1e-10
    )
    at = compare.scan(runs, "model_size", at=100.0, bootstrap=0)
    np.testing.assert_allclose(at.y, 3.0 * np.array(Ds, float) ** -1.5 * 100**0.1, rtol=1e-9)
    with pytest.raises(ValueError, match="at least 3 runs"):
        compare.scan(runs[:2], "model_size")


def test_n_samples_scan_and_inf_is_an_error(tmp_path):
    Ns = [1e3, 1e4, 1e5, 1e6]
    runs = _scan_runs(tmp_path, "n_samples", Ns, 0.75)
    rep = compare.scan(runs, "n_samples", bootstrap=0)
    assert rep.fit.exponent == pytest.approx(0.75, abs=1e-10)
    assert rep.theory.exponent == pytest.approx(0.75)
    t = np.geomspace(1, 10, 3)
    inf = load(
        make_run(tmp_path / "inf.h5", t, {"loss/test": t}, config=msfr_config(n_samples="inf"))
    )
    with pytest.raises(ValueError, match="task.n_samples is not a finite"):
        compare.scan([*runs, inf], "n_samples")


def test_value_at_interpolates_in_log_log(tmp_path):
    t = np.geomspace(1, 1e4, 5)
    r = load(make_run(tmp_path / "m.h5", t, {"loss/test": t**-0.5}))
    assert compare.value_at(r, "loss/test", 31.0) == pytest.approx(31.0**-0.5, rel=1e-12)
    assert compare.value_at(r) == pytest.approx(1e-2)
    with pytest.raises(ValueError, match="outside the recorded times"):
        compare.value_at(r, "loss/test", 1e5)
    with pytest.raises(KeyError, match="no dataset 'loss/nope'"):
        compare.value_at(r, "loss/nope")


def grid_runs(tmp_path, Ds, a=EX.model_size, b=EX.time, config=None):
    """Synthetic L(t, D) = D^-a + t^-b, one file per D."""
    t = np.geomspace(1e-1, 1e12, 300)
    runs = []
    for D in Ds:
        cfg = config or msfr_config(model_size=int(D))
        cfg = {**cfg, "task": {**cfg["task"], "model_size": int(D)}}
        runs.append(
            load(make_run(tmp_path / f"D{D}.h5", t, {"loss/test": D**-a + t**-b}, config=cfg))
        )
    return runs


def test_frontier_matches_analytic_and_theory_exponents(tmp_path):
    # min_D D^-a + (C/D)^-b: L* ∝ C^-(ab/(a+b)), D* ∝ C^(b/(a+b)); with a = eta, b = eta/kappa_t
    # these are exactly the MSFR compute laws eta/(kappa_t+1) and 1/(kappa_t+1)
    Ds = np.geomspace(10, 1e5, 25).round().astype(int)
    runs = grid_runs(tmp_path, Ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = compare.compute_frontier(runs, n_C=48)
    a, b = EX.model_size, EX.time
    assert rep.frontier.loss_exponent == pytest.approx(a * b / (a + b), abs=0.01)
    assert rep.frontier.d_star_exponent == pytest.approx(b / (a + b), abs=0.01)
    assert rep.theory.exponent == pytest.approx(EX.compute) and rep.theory.d_star == pytest.approx(
        EX.d_star
    )
    assert abs(rep.difference) < 0.01
    d = rep.to_dict()
    assert d["d_star_theory"] == pytest.approx(EX.d_star) and abs(d["d_star_difference"]) < 0.01
    with pytest.raises(ValueError, match="one run per model size"):
        compare.compute_frontier([*runs, runs[0]])


def test_plateau_table_matches_hand_values():
    tab = plateau_table(4, 31, "linear")
    np.testing.assert_allclose(tab["eigenvalues"], [0.4, 0.3, 0.2, 0.1], rtol=1e-15)
    np.testing.assert_allclose(tab["plateaus"], [1, 0.64058, 0.37737, 0.20980, 0.13600], atol=5e-6)
    # white, by hand: λ = 1/D each, gain λ / (1 + (1 + D)/N)
    D, N = 3, 10
    w = plateau_table(D, N, "white")
    gain = (1 / D) / (1 + (1 + D) / N)
    np.testing.assert_allclose(w["plateaus"], [1 - m * gain for m in range(D + 1)], rtol=1e-14)
    assert w["loss_star"] == pytest.approx(w["plateaus"][-1], rel=1e-14)
    with pytest.raises(ValueError, match="--context"):
        plateau_table(4, 0.0)


def test_flat_or_narrow_windows_warn(tmp_path):
    """A fit over a plateau (|p| < FLAT_P) or over less than a decade says what it is."""
    t = np.geomspace(1.0, 1e4, 200)
    r = load(make_run(tmp_path / "f.h5", t, {"loss/test": t**-0.01}, model="other",
                      config={"model": "other"}))  # fmt: skip
    with pytest.warns(UserWarning, match="is below 0.05: the window is flat"):
        rep = compare.fit_run(r, window=(1.0, 1e4), bootstrap=0)
    assert rep.fit.exponent == pytest.approx(0.01, abs=1e-12)
    r = load(make_run(tmp_path / "n.h5", t, {"loss/test": t**-0.5}, model="other",
                      config={"model": "other"}))  # fmt: skip
    with pytest.warns(UserWarning, match=r"the window spans 0\.\d+ decades \(< 1\)"):
        compare.fit_run(r, window=(100.0, 500.0), bootstrap=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a law over three decades: no warning
        compare.fit_run(r, window=(10.0, 1e4), bootstrap=0)
