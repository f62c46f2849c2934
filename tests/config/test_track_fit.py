"""A preset shrinks with one override: ``--set task.n_tasks=1000`` on a preset that tracks
s = 10^4, 10^5 drops those two indices with a one-line note, instead of failing on
``output.track`` until a second ``--set`` is given. An ``output.track`` given explicitly is still
refused when out of range, and so is a config file that is inconsistent on its own."""

from __future__ import annotations

import warnings

import h5py
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.config import ConfigError, load_config
from fastdyn.config.presets import resolve

QUICK = resolve("quickstart")


def test_the_preset_track_is_cut_to_the_tasks_with_one_note():
    notes: list[str] = []
    cfg = load_config(QUICK, ["task.n_tasks=1000"], note=notes.append)
    assert cfg.task.n_tasks == 1000
    assert cfg.output.track == (1, 10, 100, 1000)
    assert notes == [
        "note: output.track: dropped 10000, 100000 (> task.n_tasks = 1000); tracking 1, 10, 100, 1000"
    ]


def test_all_indices_beyond_the_tasks_leave_the_default(tmp_path):
    own = tmp_path / "own.toml"  # a user's file, consistent on its own: cut the same way
    own.write_text('model = "msfr"\n[task]\nn_tasks = 100\n[output]\ntrack = [5, 50]\n')
    notes: list[str] = []
    cfg = load_config(own, ["task.n_tasks=3"], note=notes.append)
    assert cfg.output.track == ()
    assert notes == ["note: output.track: dropped 5, 50 (> task.n_tasks = 3); tracking the default"]


def test_the_python_api_warns_once():
    with pytest.warns(UserWarning, match=r"dropped 10000, 100000 \(> task.n_tasks = 1000\)"):
        load_config(QUICK, ["task.n_tasks=1000"])


def test_nothing_is_said_when_the_track_fits():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(QUICK, ["task.n_tasks=100000"]).output.track[-1] == 100000


def test_an_explicit_track_out_of_range_is_still_refused():
    with pytest.raises(
        ConfigError, match=r"^output.track: task indices must be ≤ task.n_tasks \(1000\), got 5000"
    ):
        load_config(QUICK, ["task.n_tasks=1000", "output.track=[1, 5000]"])


def test_a_file_inconsistent_on_its_own_is_still_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "msfr"\n[task]\nn_tasks = 10\n[output]\ntrack = [1, 11]\n')
    with pytest.raises(ConfigError, match=r"got 11"):
        load_config(bad, ["seed=3"])


CLOSED = ["--set", "solver.integrator=none", "--set", "time.n_times=8"]


def test_the_cli_runs_the_preset_with_one_override(tmp_path):
    out = tmp_path / "q.h5"
    res = CliRunner().invoke(
        main,
        [
            "simulate",
            "quickstart",
            "--set",
            "task.n_tasks=1000",
            *CLOSED,
            "--quiet",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    notes = [ln for ln in res.output.splitlines() if "note:" in ln]
    assert notes == [
        "fastdyn: note: output.track: dropped 10000, 100000 (> task.n_tasks = 1000); tracking 1, 10, 100, 1000"
    ]
    with h5py.File(out, "r") as f:
        assert f.attrs["status"] == "complete"
        assert list(f["tasks/index"][()]) == [1, 10, 100, 1000]


def test_the_cli_says_nothing_under_q():
    res = CliRunner().invoke(
        main, ["-q", "simulate", "quickstart", "--set", "task.n_tasks=1000", "--check"]
    )
    assert res.exit_code == 0 and "note" not in res.output


def test_the_cli_refuses_an_explicit_track_in_one_line():
    res = CliRunner().invoke(
        main,
        [
            "simulate",
            "quickstart",
            "--set",
            "task.n_tasks=1000",
            "--set",
            "output.track=[1,5000]",
            "--check",
        ],
    )
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "fastdyn: error: output.track: task indices must be ≤ task.n_tasks (1000), got 5000; keep the smaller ones (--set output.track=[1]) or use [] for the default"
    ]
