"""Acceptance 4: one MSFR run split into 4 task-index parts on 2 Dask workers equals the
single-process run bit for bit (partials combined in block order, parts aligned to chunks)."""

from __future__ import annotations

import tomllib

import h5py
import numpy as np
from click.testing import CliRunner

from fastdyn import simulate
from fastdyn.cli import main
from fastdyn.config import from_dict, load_config, to_toml
from fastdyn.drive.split import plan, run_part, run_split

from .conftest import write_sweep

CONFIG = """
model = "msfr"
seed = 3
[task]
n_tasks = 40000
model_size = 30000
psi0 = 10
beta = 0.3
gamma = 0.25
n_samples = 300000
[init]
scheme = "random"
[time]
t_min = 0.1
t_max = 1e5
n_times = 12
[solver]
integrator = "dopri5"
[theory]
level = "exact"
[output]
chunk_tasks = 4096
times_per_segment = 5
track = [1, 2, 8192, 8193, 16384, 16385, 30000]
"""

#: everything a run writes except provenance (timings, created) and the resume state
DATASETS = (
    "time",
    "loss/test",
    "loss/train",
    "tasks/f",
    "tasks/index",
    "tasks/emergence",
    "theory/loss/test",
    "theory/loss/train",
    "theory/tasks/f",
)


def _same(a, b, parts: int = 4) -> None:
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        for k in DATASETS:
            x, y = fa[k][()], fb[k][()]
            assert x.shape == y.shape and x.tobytes() == y.tobytes(), k
        for k in (
            "status",
            "config",
            "seed",
            "model",
            "n_represented",
            "tail_loss_test",
            "tail_loss_train",
        ):
            assert fa.attrs[k] == fb.attrs[k], k
        for k in fa.attrs:
            if k.startswith("solver_"):  # task status counts and step counts add up across parts
                assert fa.attrs[k] == fb.attrs[k], k
        assert fb.attrs["split_parts"] == parts


def test_plan_aligns_parts_to_chunks():
    cfg = from_dict(tomllib.loads(CONFIG))
    spans = plan(cfg, 4)
    assert spans == [(0, 8192), (8192, 8192), (16384, 8192), (24576, 5424)]
    assert plan(cfg, 100) == [(i * 4096, min(4096, 30000 - i * 4096)) for i in range(8)]
    assert plan(cfg, 3) == [(0, 8192), (8192, 12288), (20480, 9520)]  # 2, 3, 3 chunks


def test_split_bitwise_equal(tmp_path, dask_client):
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(CONFIG)
    cfg = load_config(cfg_path)
    assert simulate(cfg, tmp_path / "single.h5") == "complete"
    client, threads = dask_client
    assert run_split(cfg, tmp_path / "split.h5", 4, client, threads) == "complete"
    _same(tmp_path / "single.h5", tmp_path / "split.h5")
    # the order matters, so the equality above is a real check: adding each part's own total
    # (Σ_parts Σ_blocks instead of one chain over all blocks) changes the last bits
    parts = [
        f.result()
        for f in (
            client.submit(run_part, to_toml(cfg), a, n, threads, pure=False)
            for a, n in plan(cfg, 4)
        )
    ]
    with h5py.File(tmp_path / "single.h5", "r") as f:
        ref, tail = f["loss/test"][()], f.attrs["tail_loss_test"]
    naive = sum(p["sim_test"].sum(axis=0) for p in parts) + tail
    assert np.any(naive != ref) and np.allclose(
        naive, ref, rtol=1e-13, atol=0
    )  # 1e-13: rounding only
    # the CLI: a sweep file with a [split] section, parts run one after another in-process
    sweep = write_sweep(tmp_path, f'[sweep]\nbase = "{cfg_path}"\n[split]\nparts = 4\n')
    r = CliRunner().invoke(main, ["sweep", str(sweep), "-o", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    _same(tmp_path / "single.h5", tmp_path / "cli" / "run.h5")
    r = CliRunner().invoke(main, ["sweep", str(sweep), "-o", str(tmp_path / "cli")])
    assert r.exit_code == 2 and "run.h5 exists" in r.output
    # a plain config file with --split-tasks
    r = CliRunner().invoke(
        main, ["sweep", str(cfg_path), "--split-tasks", "3", "-o", str(tmp_path / "plain")]
    )
    assert r.exit_code == 0, r.output
    _same(tmp_path / "single.h5", tmp_path / "plain" / "run.h5", parts=3)


def test_split_rejects_axes(tmp_path):
    sweep = write_sweep(tmp_path, '[base]\nmodel = "msfr"\n[grid]\ntask.alpha = [1.5, 2]\n')
    r = CliRunner().invoke(
        main, ["sweep", str(sweep), "-o", str(tmp_path / "o"), "--split-tasks", "2"]
    )
    assert r.exit_code == 2 and "split: a split run divides one config" in r.output
