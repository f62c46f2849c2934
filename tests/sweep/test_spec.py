"""Sweep files: axes, ranges, zips, seeds, point order and names, one-line errors (exit 2)."""

from __future__ import annotations

import math
import tomllib

import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.sweep import SweepError, parse
from fastdyn.sweep.spec import axis_values, parse_shard, shard_from_env

BASE = """
[base]
model = "msfr"
task.n_tasks = 1000
"""


def test_grid_zip_seeds_order_and_names():
    sw = parse(
        BASE
        + """
[sweep]
seeds = {count = 2, start = 5}
[grid]
task.alpha = [1.5, 2.0]
[[zip]]
task.model_size = [10, 100, 1000]
"time.t_max" = [1e3, 1e4, 1e5]
"""
    )
    pts = sw.points()
    assert len(pts) == 2 * 3 * 2
    assert [p.name for p in pts[:3]] == ["p0000", "p0001", "p0002"]
    # first grid axis slowest, then the zip group (advanced together), seeds innermost
    assert pts[0].params == {"task.alpha": 1.5, "task.model_size": 10, "time.t_max": 1e3, "seed": 5}
    assert pts[1].params["seed"] == 6
    assert pts[2].params == {
        "task.alpha": 1.5,
        "task.model_size": 100,
        "time.t_max": 1e4,
        "seed": 5,
    }
    assert pts[6].params["task.alpha"] == 2.0
    cfg = tomllib.loads(pts[3].config_toml)
    assert cfg["task"]["model_size"] == 100 and cfg["time"]["t_max"] == 1e4 and cfg["seed"] == 6
    assert cfg["task"]["n_tasks"] == 1000  # the base is kept
    assert sw.keys == ["task.alpha", "task.model_size", "time.t_max", "seed"]


def test_ranges():
    v = axis_values("x", {"log": [1e2, 1e5], "num": 4})
    assert v[0] == 1e2 and v[-1] == 1e5
    # geometric: equal ratios (1e-12 relative: float rounding of 10**(k/3))
    assert all(math.isclose(v[i + 1] / v[i], 10.0, rel_tol=1e-12) for i in range(3))
    assert axis_values("x", {"lin": [0, 1], "num": 5}) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert axis_values("x", {"log": [100, 100000], "num": 7, "integer": True}) == [
        100,
        316,
        1000,
        3162,
        10000,
        31623,
        100000,
    ]
    with pytest.raises(SweepError, match="repeated values"):
        axis_values("x", {"lin": [1, 2], "num": 5, "integer": True})


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("[grid]\ntask.alpha = []", "grid.task.alpha: must be a non-empty list"),
        (
            "[grid]\ntask.alpha = {log = [0, 1], num = 3}",
            "grid.task.alpha.log: both ends must be > 0",
        ),
        ("[grid]\ntask.alpha = {lin = [1, 2]}", "grid.task.alpha.num: must be an integer"),
        (
            "[grid]\ntask.alpha = {lin = [1, 2], num = 2, step = 1}",
            "grid.task.alpha.step: unknown range key",
        ),
        (
            "[[zip]]\ntask.alpha = [1, 2]\ntask.gamma = [0]",
            "zip[0]: axes advanced together need the same number of values",
        ),
        (
            "[grid]\ntask.alpha = [1, 2]\n[[zip]]\ntask.alpha = [1, 2]",
            "zip[0].task.alpha: task.alpha is swept twice",
        ),
        ("[grid]\nseed = [1, 2]", "sweep seeds with sweep.seeds"),
        ("[sweep]\nseeds = [1, 1]", "sweep.seeds: must not repeat"),
        ("[sweep]\nbogus = 1", "sweep.bogus: unknown key"),
        ("[grids]\na = 1", "grids: unknown sweep table"),
        (
            "[grid]\ntask.alpha = [1.5, -1]",
            "point p0001 (task.alpha = -1): task.alpha: must be a finite number > 0",
        ),
        ("[grid]\ntask.bogus = [1, 2]", "point p0000 (task.bogus = 1): task.bogus: unknown key"),
        ("[resources]\ncores = 0", "resources.cores: must be an integer ≥ 1"),
        (
            "[sweep]\nbase = 'no/such/config.toml'",
            "sweep.base: config file 'no/such/config.toml': not found",
        ),
    ],
)
def test_errors_name_the_field(tmp_path, text, msg):
    with pytest.raises(
        SweepError,
        match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        parse(BASE + "\n" + text if not text.startswith("[base]") else text).points()
    # the CLI prints that one line and exits 2, without a traceback
    p = tmp_path / "bad.toml"
    p.write_text(BASE + "\n" + text)
    r = CliRunner().invoke(main, ["sweep", str(p), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in r.output


def test_base_path_relative_to_sweep_file(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "b.toml").write_text('model = "msfr"\n[task]\nn_tasks = 777\n')
    (tmp_path / "s.toml").write_text(
        '[sweep]\nbase = "cfg/b.toml"\nsets = ["task.alpha=1.25"]\n[base]\ntask.psi0 = 5\n'
    )
    from fastdyn.sweep import load

    (pt,) = load(tmp_path / "s.toml").points()
    cfg = tomllib.loads(pt.config_toml)
    assert (cfg["task"]["n_tasks"], cfg["task"]["alpha"], cfg["task"]["psi0"]) == (777, 1.25, 5.0)


def test_shard_parsing():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "-1/4", "1", "a/b", "0/0"):
        with pytest.raises(SweepError, match="--shard"):
            parse_shard(bad)
    assert shard_from_env({}) is None
    assert shard_from_env({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}) == (3, 4)
    # arrays numbered from 1 (--array=1-4): offset by SLURM_ARRAY_TASK_MIN
    assert shard_from_env(
        {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}
    ) == (3, 4)
    with pytest.raises(SweepError, match="SLURM_ARRAY_TASK_ID: 4 is outside"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4"})


def test_builtin_scans_parse():
    """data/sweeps/: the scans used by the analysis issue expand to valid configs."""
    from pathlib import Path

    from fastdyn.sweep import load

    root = Path(__file__).resolve().parents[2] / "data" / "sweeps"
    d = load(root / "d_scan.toml").points()
    assert [p.params["task.model_size"] for p in d] == [100, 316, 1000, 3162, 10000, 31623, 100000]
    cfg = tomllib.loads(d[0].config_toml)
    assert (cfg["task"]["alpha"], cfg["task"]["beta"], cfg["task"]["gamma"]) == (2.0, 0.3, 0.25)
    assert cfg["solver"]["integrator"] == "none"  # closed form
    n = load(root / "n_scan.toml").points()
    assert len(n) == 27 and n[-1].params == {"task.n_samples": 10_000_000, "seed": 2}
    c = load(root / "compute_scan.toml").points()
    assert len(c) == 10 and tomllib.loads(c[0].config_toml)["time"]["n_times"] == 160
    sp = load(root / "split_example.toml")
    assert sp.split == {"parts": 16} and not sp.axes
