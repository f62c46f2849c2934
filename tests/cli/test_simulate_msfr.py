"""MSFR runs end to end through the CLI: file contents, theory beside simulation, determinism."""

import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main

BASE = [
    "--set",
    "task.n_tasks=5000",
    "--set",
    "time.t_max=1e7",
    "--set",
    "time.n_times=40",
    "--set",
    "theory.level=exact",
]


def _sim(path, *args):
    res = CliRunner().invoke(main, ["simulate", *BASE, *args, "-o", str(path), "--overwrite"])
    assert res.exit_code == 0, res.output
    return fastdyn.load(path)


def test_dopri5_run_matches_the_exact_reduction_and_stores_provenance(tmp_path):
    r = _sim(
        tmp_path / "a.h5",
        "--set",
        "task.model_size=3000",
        "--set",
        "task.n_samples=1e6",
        "--set",
        "task.beta=0.2",
    )
    assert r.status == "complete" and r.model == "msfr"
    assert r.config["task"]["model_size"] == 3000 and r.attrs["seed"] == 0
    assert set(r.attrs["versions"]) >= {"numpy", "numba", "h5py", "fastdyn"}
    assert r.time[0] == 0.0 and np.all(np.diff(r.time) > 0)
    # tasks beyond D = 3000 are unrepresented: their loss is the constant floor of both curves
    assert np.all(r["loss/test"] >= r.attrs["tail_loss_test"])
    # simulation vs exact reduction: dopri5 at rtol 1e-8 (default) plus settling at rtol·Λ gives
    # |Δf| ≲ 1e-7 Λ per task, so |ΔL| ≤ Σ P Λ |r| |Δf| ≲ 1e-7 · L-scale; atol 1e-12 covers L → tail
    for k in ("test", "train"):
        a, b = r[f"loss/{k}"], r[f"theory/loss/{k}"]
        assert np.all(np.abs(a - b) <= 1e-12 + 1e-6 * np.abs(b)), np.max(np.abs(a - b) / b)
    f, g = r["tasks/f"], r["theory/tasks/f"]
    assert f.shape == (41, len(r["tasks/index"])) and np.nanmax(np.abs(f - g)) < 1e-6
    em = r["tasks/emergence"]  # inf marks a task drawn 0 times (never trained) at finite N
    assert (
        not np.any(np.isnan(em))
        and np.all(np.isfinite(em[:3]))
        and np.all(np.diff(em[np.isfinite(em)]) > 0)
    )


def test_rk4_agrees_with_theory(tmp_path):
    r = _sim(tmp_path / "b.h5", "--set", "solver.integrator=rk4")
    a, b = r["loss/test"], r["theory/loss/test"]
    # 200 steps per timescale: RK4 error (1/200)^4 per timescale ≈ 1e-9 relative
    assert np.max(np.abs(a - b) / (1e-12 + b)) < 1e-6


def test_gd_approaches_the_flow_at_order_eta(tmp_path):
    errs = []
    for lr in (4e-4, 2e-4):
        r = _sim(
            tmp_path / f"g{lr}.h5",
            "--set",
            "task.n_tasks=1024",
            "--set",
            "time.t_max=10",
            "--set",
            "solver.integrator=gd",
            "--set",
            f"solver.lr={lr}",
        )
        assert r.status == "complete" and r.attrs["solver_step_limit"] == 0
        np.testing.assert_array_equal(r["step"], np.round(r.time / lr).astype(np.int64))
        a, b = r["loss/test"], r["theory/loss/test"]
        errs.append(np.max(np.abs(a - b)))
    # GD is a first-order discretisation of the flow: halving η halves the error (±20%)
    assert 1.6 < errs[0] / errs[1] < 2.4, errs


def _loss_in_subprocess(tmp_path, name, threads, *sets):
    out = tmp_path / name
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
    cmd = [
        sys.executable,
        "-m",
        "fastdyn",
        "simulate",
        *BASE,
        "--set",
        "init.scheme=random",
        "--set",
        "task.n_samples=1e5",
        *sets,
        "-o",
        str(out),
        "--overwrite",
    ]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    r = fastdyn.load(out)
    return np.concatenate(
        [r["loss/test"], r["loss/train"], r["theory/loss/test"], r["tasks/f"].ravel()]
    )


def test_bit_identical_across_threads_chunks_and_segments(tmp_path):
    a = _loss_in_subprocess(tmp_path, "t1.h5", 1)
    b = _loss_in_subprocess(
        tmp_path,
        "t2.h5",
        2,
        "--set",
        "output.chunk_tasks=1024",
        "--set",
        "output.times_per_segment=7",
    )
    np.testing.assert_array_equal(a, b)


def test_xarray_opens_a_real_output(tmp_path):
    xr = pytest.importorskip("xarray")
    r = _sim(tmp_path / "x.h5")
    ds = xr.open_dataset(tmp_path / "x.h5", engine="h5netcdf", group="loss")
    np.testing.assert_array_equal(ds["test"].coords["time"].values, r.time)
    np.testing.assert_array_equal(ds["test"].values, r["loss/test"])
    # per-task series share the task axis: emergence times align with f by coordinate
    tasks = xr.open_dataset(tmp_path / "x.h5", engine="h5netcdf", group="tasks")
    (axis,) = tasks["emergence"].dims
    assert tasks["f"].dims == ("time", axis), (tasks["f"].dims, axis)
    np.testing.assert_array_equal(tasks[axis].values, r["tasks/index"])
    np.testing.assert_array_equal(tasks["emergence"].sel({axis: r["tasks/index"][0]}).values,
                                  r["tasks/emergence"][0])  # fmt: skip


def test_gd_that_would_exceed_the_step_budget_is_refused(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "simulate",
            "--set",
            "solver.integrator=gd",
            "--set",
            "solver.lr=1e-3",
            "--set",
            "time.t_max=1e12",
            "-o",
            str(tmp_path / "g.h5"),
        ],
    )
    assert (
        res.exit_code == 2
        and "solver.lr: gd needs" in res.output
        and not (tmp_path / "g.h5").exists()
    )
