"""msfr-h (docs/msfr-h.md): MSFR tasks with a general d×d H_s, the generic RK4 and the Riccati form.

Cheap by design (a few tasks, short times): one RK4 compile for the file, each run < 1 s after it.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.models.msfr._closed_form import exact_curve
from tests.reference import msfr_h_reference as ref

#: a small MSFR task set: 4 tasks, ψ = 4, Λ = 1 (κ = 8), P(s) ∝ s^-2, every task tracked
BASE = {"model": '"msfr-h"', "task.n_tasks": 4, "task.psi0": 4, "time.t_max": 40, "time.n_times": 40,
        "output.track": "[1, 2, 3, 4]"}  # fmt: skip


def _run(tmp_path, sets: dict, name: str = "run"):
    cfg = fastdyn.load_config(None, [f"{k}={v}" for k, v in (BASE | sets).items()])
    out = tmp_path / f"{name}.h5"
    assert fastdyn.simulate(cfg, out).startswith("complete")
    return fastdyn.load(out), out


def _attrs(path) -> dict:
    with h5py.File(path, "r") as f:
        return dict(f.attrs)


@pytest.mark.parametrize(("k", "mu"), [(1, 1.0), (2, 0.5), (3, 2.0), (4, 1.0)])
def test_rank_k_projector_equals_the_riccati_closed_form(tmp_path, k, mu):
    """Acceptance 3: H_s = μ κ_s Π_s, Π_s a Haar-random rank-k projector in d = 5 (k = 1 … 4):
    the simulation equals the closed form to ≤ 1e-8 relative. Measured with
    steps_per_timescale = 100: 1.3e-11 … 1.6e-11 (50: 2e-10, 200: 9e-13; RK4's h⁴)."""
    spec = [mu] * k + [0.0] * (5 - k)
    sets = {"h.dim": 5, "h.spectrum": str(spec), "h.eigenvectors": "random",
            "init.scheme": "random", "solver.steps_per_timescale": 100}  # fmt: skip
    run, path = _run(tmp_path, sets)
    f, fth = run["tasks/f"], run["theory/tasks/f"]
    assert np.max(np.abs(f[-1] - 1.0)) < 0.3  # tasks are (mostly) learnt: the test covers the rise
    assert np.max(np.abs(f - fth)) <= 1e-8 * 1.0  # Λ = 1
    assert np.max(np.abs(run["loss/test"] - run["theory/loss/test"])) <= 1e-8
    a = _attrs(path)
    assert a["theory_exact"] == 1 and a["theory_defect_max"] < 1e-14


def test_perturbed_h_error_is_linear_in_delta(tmp_path):
    """H_s/κ_s = Π + δ E_s (rank-2 Π in d = 5): the max error vs the closed form scales with δ,
    log-log slope 1 ± 0.1. Measured: 7.9e-5, 7.9e-4, 7.9e-3 for δ = 1e-4, 1e-3, 1e-2 (slope 1.000);
    the file says the theory is not exact and gives the defect (≈ 0.42 δ)."""
    deltas = [1e-4, 1e-3, 1e-2]
    errs = []
    for d in deltas:
        sets = {"h.dim": 5, "h.spectrum": "[1, 1, 0, 0, 0]", "h.eigenvectors": "random",
                "h.perturbation": d, "solver.steps_per_timescale": 100}  # fmt: skip
        run, path = _run(tmp_path, sets, f"d{d:g}")
        errs.append(float(np.max(np.abs(run["tasks/f"] - run["theory/tasks/f"]))))
        a = _attrs(path)
        assert a["theory_exact"] == 0 and 0.1 * d < a["theory_defect_max"] < 3 * d
    slope = np.polyfit(np.log(deltas), np.log(errs), 1)[0]
    assert abs(slope - 1.0) <= 0.1, (errs, slope)


def test_independent_numpy_reference(tmp_path):
    """A general (not idempotent-like) H per task from h.file against scipy's DOP853 of the
    d-dim flow (tests/reference/msfr_h_reference.py), and a rank-2 μΠ against the reference's
    own Riccati integration. Measured max |Δf|: general H 1.7e-11, 1.2e-11, 5.6e-13 (tasks 1–3);
    μΠ 1e-12 … 2.4e-12 (closed form and simulation) (steps_per_timescale 200)."""
    rng = np.random.default_rng(5)
    n, d = 3, 3
    a = rng.standard_normal((n, d, d))
    m = np.einsum("nij,nkj->nik", a, a) / d  # per-task PSD matrices (units of κ_s)
    path = tmp_path / "h.npz"
    np.savez(path, H=m)
    sets = {"task.n_tasks": n, "output.track": "[1, 2, 3]", "h.file": f'"{path}"',
            "solver.steps_per_timescale": 200, "time.t_max": 30, "time.n_times": 12}  # fmt: skip
    run, _ = _run(tmp_path, sets)
    t = run.time
    s = np.arange(1, n + 1)
    p = s**-2.0 / np.sum(s**-2.0)
    kappa = 4 * (1 + 1.0)
    for i in range(n):
        h = kappa * m[i]
        x1 = np.linalg.eigh(h)[1][:, -1]
        want = ref.f_curve(h, 1.0, p[i], 1e-3 * x1, 1e-3 * x1, t)
        assert np.max(np.abs(run["tasks/f"][:, i] - want)) < 1e-9, i
    # a rank-2 projector: the reference's own Riccati
    q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    proj = q[:, :2] @ q[:, :2].T
    np.savez(path, H=1.5 * proj)
    run, _ = _run(tmp_path, sets | {"init.scheme": "random"}, "proj")
    v0, w0 = _random_init(run, d)
    for i in range(n):
        want = ref.riccati_curve(1.5 * kappa, proj, 1.0, p[i], v0[:, i], w0[:, i], run.time)
        assert np.max(np.abs(run["theory/tasks/f"][:, i] - want)) < 1e-9, i
        assert np.max(np.abs(run["tasks/f"][:, i] - want)) < 1e-9, i


def _random_init(run, d):
    """The run's random init, from the setup (the seeded streams are fastdyn's)."""
    from fastdyn.config.load import from_dict
    from fastdyn.core.device import Device
    from fastdyn.models.registry import get_model

    job = get_model("msfr-h").setup(from_dict(run.config), Device.CPU)
    y0 = job.init(0, job.n_tasks)  # (v0 above w0, n)
    return y0[:d], y0[d:]


def test_reproduces_msfr_exact_dynamics(tmp_path):
    """MSFR's H_s = κ_s(ûûᵀ + ε'eeᵀ) (û = (1, Λ)/√(1+Λ²), e = (1, 0), ε' = 1/κ_s) given as h.file
    with MSFR's random init (the same seeded streams): msfr-h's tracked f equals an msfr run's
    (dopri5, rtol 1e-10) and its exact finite-ψ reduction. In MSFR's eigenbasis (spectrum
    [λ+, λ−] of ûûᵀ + ε'eeᵀ, identity eigenvectors, balanced init v = w = σ0 x+) it equals MSFR's
    exact reduction started at σ0 x+. Measured: 5.6e-11 (vs msfr's dopri5), 1.3e-12 (vs its exact
    reduction), 2.7e-12 (eigenbasis)."""
    lam, psi = 1.0, 4.0
    kappa = psi * (1 + lam * lam)
    u = np.array([1.0, lam]) / np.sqrt(1 + lam * lam)
    e = np.array([1.0, 0.0])
    m = np.outer(u, u) + np.outer(e, e) / kappa
    path = tmp_path / "msfr.npz"
    np.savez(path, H=m)
    common = {"task.n_tasks": 4, "task.psi0": psi, "init.scheme": "random", "init.scale": 0.1,
              "output.track": "[1, 2, 3, 4]", "time.t_max": 40, "time.n_times": 40}  # fmt: skip
    run, _ = _run(tmp_path, common | {"h.file": f'"{path}"', "solver.steps_per_timescale": 200})
    cfg = fastdyn.load_config(
        None, [f"{k}={v}" for k, v in (common | {"model": '"msfr"', "solver.rtol": 1e-10}).items()]
    )
    fastdyn.simulate(cfg, tmp_path / "msfr.h5")
    ms = fastdyn.load(tmp_path / "msfr.h5")
    assert np.array_equal(ms.time, run.time)
    assert np.max(np.abs(run["tasks/f"] - ms["tasks/f"])) < 1e-8
    assert np.max(np.abs(run["tasks/f"] - ms["theory/tasks/f"])) < 1e-8  # theory.level = exact
    # the eigenbasis: spectrum [λ+, λ−], identity eigenvectors, balanced init along x+
    ev, x = np.linalg.eigh(m)
    spec = f"[{float(ev[1])!r}, {float(ev[0])!r}]"
    run2, _ = _run(tmp_path, common | {"h.spectrum": spec, "init.scheme": "balanced", "init.scale": 1e-3,
                                       "solver.steps_per_timescale": 200}, "eig")  # fmt: skip
    xp = x[:, 1] * np.sign(x[0, 1]) * 1e-3
    s = np.arange(1, 5)
    p = s**-2.0 / np.sum(s**-2.0)
    for i in range(4):
        out = np.empty(len(run2.time))
        exact_curve(run2.time, lam, psi, p[i], xp[0], xp[1], xp[0], xp[1], 1e-12, out)
        assert np.max(np.abs(run2["tasks/f"][:, i] - out)) < 1e-8, i


def test_config_errors_are_one_line_exit_2(tmp_path):
    cases = [
        (["--set", "h.dim=3", "--set", "h.spectrum=[1, 0]"], "h.spectrum: must have h.dim = 3 eigenvalues, got 2"),
        (["--set", "h.dim=9"], "h.dim: must be an integer ≥ 1 and ≤ 8, got 9"),
        (["--set", "h.file=nope.npz", "--set", "h.spectrum=[1, 0]"], "h.spectrum: not used with h.file"),
        (["--set", "h.spectrum=[0, 0]"], "h.spectrum: the largest eigenvalue must be > 0"),
    ]  # fmt: skip
    for args, msg in cases:
        res = CliRunner().invoke(
            main, ["simulate", "--set", "model=msfr-h", *args, "-o", str(tmp_path / "x.h5")]
        )
        assert res.exit_code == 2, res.output
        assert msg in res.output and len(res.output.strip().splitlines()) == 1, res.output
        assert not (tmp_path / "x.h5").exists()
