"""Shared fixtures of the sweep tests: tiny MSFR sweeps (closed form + RK4 on a few thousand
tasks, a dozen output times) so every point runs in a fraction of a second."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from fastdyn.sweep import load, run_sweep

#: a 12-point sweep: 3 model sizes x 2 exponents x 2 seeds; random init and finite N make every
#: point (and every seed) give different numbers, RK4 and the closed form both run
SWEEP12 = """
[sweep]
seeds = [0, 1]

[base]
model = "msfr"
task.n_tasks = 2500
task.psi0 = 10
task.n_samples = 100000
init.scheme = "random"
time.t_min = 0.1
time.t_max = 1e4
time.n_times = 10
solver.integrator = "rk4"
solver.steps_per_timescale = 8
theory.level = "leading"
output.chunk_tasks = 1024
output.track = [1, 2, 100]

[grid]
task.model_size = [300, 1100, 2500]
task.alpha = {lin = [1.5, 2.0], num = 2}
"""

#: datasets compared bit for bit between two point files
SERIES = (
    "time",
    "loss/test",
    "loss/train",
    "tasks/f",
    "tasks/index",
    "theory/loss/test",
    "theory/loss/train",
    "theory/tasks/f",
    "tasks/emergence",
)

FASTDYN = [sys.executable, "-m", "fastdyn"]


@pytest.fixture(autouse=True)
def _no_slurm_env(monkeypatch):
    """The tests choose shards explicitly; a SLURM array environment must not leak in."""
    for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"):
        monkeypatch.delenv(k, raising=False)


def write_sweep(tmp: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def assert_same_point_files(a: Path, b: Path) -> None:
    """Two point files hold the same config and bit-identical series."""
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        assert fa.attrs["config"] == fb.attrs["config"]
        assert fa.attrs["status"] == fb.attrs["status"] == "complete"
        for k in SERIES:
            x, y = fa[k][()], fb[k][()]
            assert x.dtype == y.dtype and x.shape == y.shape, k
            assert x.tobytes() == y.tobytes(), f"{a.name} {k} differs"


def sub_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_ARRAY")}
    env["PYTHONPATH"] = (
        str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    )
    return env


@pytest.fixture(scope="session")
def local12(tmp_path_factory):
    """The 12-point sweep run with the local scheduler: (sweep file, output dir, result)."""
    d = tmp_path_factory.mktemp("local12")
    path = write_sweep(d, SWEEP12)
    res = run_sweep(load(path), d / "out")
    return path, d / "out", res


@pytest.fixture(scope="session")
def dask_client():
    """A Dask LocalCluster of 2 worker processes x 1 thread (the `processes` scheduler)."""
    from fastdyn.sweep.cluster import executor

    with executor("processes", 2) as (client, threads):
        yield client, threads


def loss(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["loss/test"][()]
