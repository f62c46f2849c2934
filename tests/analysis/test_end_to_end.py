"""Acceptance 3 of issue #4: scaling exponents fitted from real msfr-core outputs vs theory.

The runs are written by the simulator itself (``fastdyn simulate`` for the time run, the
``fastdyn.simulate`` API for the scans) with the closed form (``solver.integrator = "none"``,
``theory.level = "leading"``, the Riccati f0 of spec msfr.md §4 that §6 is derived from) at
α = 2, β = 0.3, γ = 0.25, N_s = 2e6 tasks for every run (as the issue asks), ψ0 = 1000 and
σ0 = 1e-3 (spec §6's measurement setting), and fitted through ``fastdyn fit``. Theory by hand:
η = α + 2γ − 1 = 1.5, κ_t = α + β + γ = 2.55, so the exponents are t: 1.5/2.55, D: 1.5,
N: 1.5/2 = 0.75, C: 1.5/3.55 and D*(C): 1/3.55. Acceptance: every fitted exponent within ±0.02.

Measured (this file's settings; 2-core machine): t 0.58202 (−0.0062), D 1.49585 (−0.0042),
N 0.75156 (+0.0016), C 0.41805 (−0.0045), D* 0.27905 (−0.0026). The fixture takes about 6 s on an idle
machine (19 s at load average 9).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.config import from_dict

ALPHA, BETA, GAMMA = 2.0, 0.3, 0.25
N_S = 2_000_000
PSI0 = 1000.0
ETA, KAPPA_T = 1.5, 2.55  # by hand from (α, β, γ) above
THEORY = {
    "time": ETA / KAPPA_T,
    "model_size": ETA,
    "n_samples": ETA / ALPHA,
    "compute": ETA / (KAPPA_T + 1),
}
D_STAR = 1 / (KAPPA_T + 1)
TOL = 0.02  # the acceptance band of issue #4, point 3

# model sizes for the D scan and the (t, D) frontier grid: 21 sizes, 10 .. 1e5 (half-decade
# quarters). D/N_s ≤ 0.05 keeps the finite-N_s correction of the D law, ~ η (D/N_s)^η ≤ 0.017 in
# the local slope at the top point, inside the band; D* of the frontier (∝ C^0.28 over
# C ∈ [1e1, 1e20]) stays inside this grid, so the optimum is interior for 43 of 64 C values.
MODEL_SIZES = np.unique(np.geomspace(10, 1e5, 21).round().astype(int))
# data: N = 1e4 .. 1e8 (9 values). Below ~1e4 only the few tasks s ≲ sqrt(N/Z) ~ 80 are ever
# drawn and the law (an integral over s) is not reached: 1e3 .. 1e8 gives +0.0116, 1e3 .. 1e7
# +0.016. At 1e8 the slowest sampled task still settles before t_max = 1e15 (final losses equal
# the loss at t = 3e13 to all digits). One multinomial draw of the counts (seed 0) is one sample:
# over seeds 0..11 the N exponent minus theory was mean +0.0031, sd 0.0072, max |.| 0.0142 (the
# expectation Σ P(s) Λ_s²/2 (1 − P(s))^N itself gives 0.75002), so any seed passes at ~2.8 sd.
N_SAMPLES = np.geomspace(1e4, 1e8, 9).round()
TRACK_CUTOFF = N_S // 10  # task index where s_c(t) = 0.1 N_s (compare.DEFAULT_CUTOFF_FRACTION)


def _config(task: dict | None = None, time: dict | None = None) -> object:
    t = {"n_tasks": N_S, "alpha": ALPHA, "beta": BETA, "gamma": GAMMA, "psi0": PSI0}
    t |= task or {}
    tm = {"t_min": 1e-1, "t_max": 1e15, "n_times": 161} | (time or {})
    return from_dict({"model": "msfr", "seed": 0, "task": t, "time": tm,
                      "solver": {"integrator": "none"}, "theory": {"level": "leading"},
                      "output": {"track": [1]}})  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    # time run: through the CLI, as a user would; 241 log times 0.1 .. 1e15 (t_c of the full
    # N_s is ~1e14, so the grid also shows the finite-task cutoff the auto window must avoid)
    time_file = root / "time.h5"
    sets = {
        "task.n_tasks": N_S, "task.alpha": ALPHA, "task.beta": BETA, "task.gamma": GAMMA,
        "task.psi0": PSI0, "solver.integrator": "none", "theory.level": "leading",
        "time.t_min": 0.1, "time.t_max": 1e15, "time.n_times": 241,
        "output.track": f"[1, {TRACK_CUTOFF}]",
    }  # fmt: skip
    args = ["simulate", "-o", str(time_file), "--quiet"]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    sizes = []
    for D in MODEL_SIZES:
        p = root / f"D{D}.h5"
        assert fastdyn.simulate(_config({"model_size": int(D)}), p) == "complete"
        sizes.append(p)
    data = []
    for i, N in enumerate(N_SAMPLES):
        p = root / f"N{i}.h5"
        cfg = _config({"n_samples": float(N)}, {"t_min": 1e3, "n_times": 33})
        assert fastdyn.simulate(cfg, p) == "complete"
        data.append(p)
    return {"time": time_file, "model_size": sizes, "n_samples": data}


def _fit(*args) -> tuple[dict, str]:
    res = CliRunner().invoke(main, ["fit", *map(str, args), "--y", "theory/loss/test", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


def _text(*args) -> str:
    res = CliRunner().invoke(main, ["fit", *map(str, args), "--y", "theory/loss/test"])
    assert res.exit_code == 0, res.output
    return res.stdout


def _check_theory_and_difference(d: dict, x: str) -> None:
    assert d["theory"] == pytest.approx(THEORY[x], rel=1e-12), d["theory_source"]
    assert "alpha=2, beta=0.3, gamma=0.25" in d["theory_source"]
    assert d["difference"] == pytest.approx(d["exponent"] - d["theory"], abs=1e-12)
    assert abs(d["difference"]) <= TOL, (x, d["exponent"], d["theory"])


def _polyfit_exponent(x, y) -> float:
    """Independent reference: ordinary least squares of ln y on ln x (numpy)."""
    return -float(np.polyfit(np.log(x), np.log(y), 1)[0])


def test_time_exponent(files):
    d, err = _fit(files["time"], "--bootstrap", 200)
    _check_theory_and_difference(d, "time")
    assert d["window_mode"] == "auto" and d["ci"][0] <= d["exponent"] <= d["ci"][1]
    # the auto window says in one line why it ends where it ends; a warning that it ends at the
    # learned-task cutoff only when it does (here the local slope drifts first, at ~t_c / 4)
    run = fastdyn.load(files["time"])
    assert "learned-task cutoff s_c(t) reaches" in d["cutoff_text"]
    if "fit window ends at the learned-task cutoff t_c" in err:
        assert "ends at the learned-task cutoff" in d["window_reason"]
    else:
        assert (
            "drifts by more than tol" in d["window_reason"] and "before t_c" in d["window_reason"]
        )
    # the cutoff (from models/msfr/scaling.py) is the emergence time of task 0.1 N_s that the
    # driver stored for the tracked task (models/msfr/theory.py, a separate code path)
    assert run["tasks/index"][1] == TRACK_CUTOFF
    t_em = float(run["tasks/emergence"][1])
    assert d["cutoff"] == pytest.approx(t_em, rel=1e-9)
    lo, hi = d["window"]
    assert 0.1 < lo and hi <= d["cutoff"]
    # the plateau region just after t = 0 and the cutoff region are outside the window; the fit is
    # the plain least-squares line through the stored points in the window (to 1e-9: the same
    # normal equations in another order)
    t, L = np.asarray(run.time), np.asarray(run["theory/loss/test"])
    m = (t >= lo) & (t <= hi)
    assert m.sum() >= 100
    assert d["exponent"] == pytest.approx(_polyfit_exponent(t[m], L[m]), abs=1e-9)
    # the curve past the cutoff is steeper (local slope 0.60 at t = 1e11, 0.90 at 1e13): a fit
    # that runs on to t = 1e14 is NOT within the band (measured +0.025), which is what the
    # cutoff exclusion is for
    d_all, _ = _fit(files["time"], "--bootstrap", 0, "--window", "1:1e14")
    assert d_all["exponent"] - THEORY["time"] > TOL


def test_time_plain_text_prints_fit_theory_and_difference(files):
    out = _text(files["time"], "--bootstrap", 0)
    d, _ = _fit(files["time"], "--bootstrap", 0)
    assert f"p = {d['exponent']:.5f} ±" in out
    assert f"theory     p = {THEORY['time']:.5f}" in out
    assert f"diff       {d['exponent'] - THEORY['time']:+.5f} (fit - theory)" in out


def test_model_size_exponent(files):
    d, _ = _fit(*files["model_size"], "--x", "model_size", "--bootstrap", 200)
    _check_theory_and_difference(d, "model_size")
    assert len(d["paths"]) == MODEL_SIZES.size and d["window"] == [10, 1e5]
    # the final losses are the exact unrepresented-task tail Σ_{s>D} P(s) Λ_s²/2 (every task s ≤ D
    # has emerged by t ~ 4e10 ≪ t_max = 1e15): numpy reference, to rounding (measured 1e-14)
    s = np.arange(1, N_S + 1, dtype=float)
    P = s**-ALPHA / np.sum(s**-ALPHA)
    tail = np.cumsum((P * s ** (-2 * GAMMA) / 2)[::-1])[::-1]
    finals = [float(fastdyn.load(p)["theory/loss/test"][-1]) for p in files["model_size"]]
    assert np.allclose(finals, tail[MODEL_SIZES], rtol=1e-11, atol=0)
    assert d["exponent"] == pytest.approx(_polyfit_exponent(MODEL_SIZES, finals), abs=1e-9)
    assert f"theory     p = {ETA:.5f}" in _text(*files["model_size"], "--x", "model_size",
                                                 "--bootstrap", 0)  # fmt: skip


def test_data_exponent(files):
    d, _ = _fit(*files["n_samples"], "--x", "n_samples", "--bootstrap", 200)
    _check_theory_and_difference(d, "n_samples")
    finals = [float(fastdyn.load(p)["theory/loss/test"][-1]) for p in files["n_samples"]]
    assert d["exponent"] == pytest.approx(_polyfit_exponent(N_SAMPLES, finals), abs=1e-9)
    out = _text(*files["n_samples"], "--x", "n_samples", "--bootstrap", 0)
    assert f"theory     p = {THEORY['n_samples']:.5f}" in out and "diff       " in out


def test_compute_frontier_exponents(files):
    d, _ = _fit(*files["model_size"], "--x", "compute", "--bootstrap", 200)
    _check_theory_and_difference(d, "compute")
    assert d["d_star_theory"] == pytest.approx(D_STAR, rel=1e-12)
    assert d["d_star_difference"] == pytest.approx(d["d_star_exponent"] - D_STAR, abs=1e-12)
    assert abs(d["d_star_difference"]) <= TOL, d["d_star_exponent"]
    fr = d["frontier"]
    interior = np.array(fr["interior"])
    assert interior.sum() >= 20  # the optimum lies inside the D grid over many decades of C
    C = np.array(fr["C"])[interior]
    assert C.max() / C.min() > 1e10
    out = _text(*files["model_size"], "--x", "compute", "--bootstrap", 0)
    assert f"theory     p = {THEORY['compute']:.5f}" in out
    assert f"theory q = {D_STAR:.5f}, diff" in out
