"""load_many: a table of runs (flattened config columns) from paths, globs; synthetic-file helper."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest

from fastdyn.analysis.load import RunTable, config_value, flatten_config, load_many
from fastdyn.h5 import FileFormatError, RunWriter

MSFR_TASK = {"alpha": 2.0, "beta": 0.3, "gamma": 0.25, "n_tasks": 1_000_000, "psi0": 100.0}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(q) for q in v) + "]"
    return repr(v)


def to_toml(config: dict) -> str:
    """Minimal TOML for a config dict of scalars and one level of sections."""
    top = [f"{k} = {_toml_value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for k, v in config.items():
        if isinstance(v, dict):
            top += ["", f"[{k}]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(top) + "\n"


def msfr_config(**task) -> dict:
    return {"model": "msfr", "seed": 0, "task": {**MSFR_TASK, **task}, "init": {"scale": 1e-3}}


def make_run(path, t, series: dict, *, model="msfr", config=None, status="complete",
             static=None, attrs=None, rows_per_append=None):  # fmt: skip
    """Write a synthetic fastdyn file with RunWriter: ``series`` maps dataset → (T, ...) array."""
    t = np.asarray(t, float)
    cfg = msfr_config() if config is None and model == "msfr" else (config or {"model": model})
    scales = {"tasks/index": ("task", 1)} if static and "tasks/index" in static else None
    w = RunWriter(path, model=model, config_toml=to_toml(cfg), seed=0,
                  series={k: np.shape(v)[1:] for k, v in series.items()}, static=static,
                  scales=scales, extra_attrs=attrs)  # fmt: skip
    step = rows_per_append or max(t.size, 1)  # no rows: a run stopped before its first
    for a in range(0, t.size, step):
        w.append(t[a : a + step], {k: np.asarray(v)[a : a + step] for k, v in series.items()})
    if status == "running":
        w._f.close()  # leave the file as a live/killed writer would: status stays "running"
        w._f = None
    else:
        w.close(status)
    return path


def test_flatten_config_dotted_keys():
    flat = flatten_config({"model": "msfr", "task": {"alpha": 2.0, "sub": {"x": [1, 2]}}})
    assert flat == {"model": "msfr", "task.alpha": 2.0, "task.sub.x": [1, 2]}


def test_load_many_list_glob_and_columns(tmp_path):
    t = np.geomspace(1, 100, 5)
    for i, a in enumerate((1.5, 2.0, 3.0)):
        make_run(tmp_path / f"r{i}.h5", t, {"loss/test": t**-a}, config=msfr_config(alpha=a))
    tab = load_many(sorted(tmp_path.glob("*.h5")))
    assert isinstance(tab, RunTable) and len(tab) == 3
    assert tab.column("task.alpha") == [1.5, 2.0, 3.0]
    assert tab.column("status") == ["complete"] * 3 and tab.column("model") == ["msfr"] * 3
    assert {"path", "seed", "task.gamma", "init.scale"} <= set(tab.columns)
    np.testing.assert_allclose(tab.runs[2]["loss/test"], t**-3.0)
    # a glob string gives the same runs, sorted by name; a single path gives one run
    g = load_many(str(tmp_path / "r*.h5"))
    assert [r.path.name for r in g] == ["r0.h5", "r1.h5", "r2.h5"]
    assert len(load_many(tmp_path / "r1.h5")) == 1
    sub = tab.where(task__alpha=2.0)
    assert len(sub) == 1 and sub.runs[0].path.name == "r1.h5"
    assert tab.table["task.alpha"] == [1.5, 2.0, 3.0]
    assert config_value(tab.runs[0], "task.alpha") == 1.5
    assert config_value(tab.runs[0], "task.nope", "d") == "d"
    with pytest.raises(KeyError, match="no column 'task.bogus'"):
        tab.column("task.bogus")


def test_runs_with_different_keys_have_none_holes(tmp_path):
    t = np.geomspace(1, 10, 3)
    make_run(
        tmp_path / "a.h5", t, {"loss/test": t}, config={"model": "x", "data": {"D": 4}}, model="x"
    )
    make_run(tmp_path / "b.h5", t, {"loss/test": t}, config=msfr_config())
    tab = load_many([tmp_path / "a.h5", tmp_path / "b.h5"])
    assert tab.table["data.D"] == [4, None] and tab.table["task.alpha"] == [None, 2.0]


def test_errors_name_the_file(tmp_path):
    with pytest.raises(FileFormatError, match="nothing-here.*no files match"):
        load_many(str(tmp_path / "nothing-here*.h5"))
    with pytest.raises(FileFormatError, match="missing.h5: no such file"):
        load_many([tmp_path / "missing.h5"])
    idx = tmp_path / "index.h5"  # a sweep index (docs/sweeps.md) none of whose points has run
    with h5py.File(idx, "w") as f:
        f.attrs["format"] = "fastdyn-sweep"
        f["points/name"] = np.array([b"p0", b"p1"])
        f["points/path"] = np.array([b"points/p0.h5", b"points/p1.h5"])
        f["points/status"] = np.array([b"pending", b"failed: diverged"])
    with pytest.warns(UserWarning, match="2 of 2 sweep points are not complete"):
        with pytest.raises(FileFormatError, match="index.h5: no complete sweep points"):
            load_many(tmp_path)  # the sweep folder names its index


def test_to_pandas(tmp_path):
    t = np.geomspace(1, 10, 3)
    make_run(tmp_path / "a.h5", t, {"loss/test": t})
    df = load_many(tmp_path / "a.h5").to_pandas()
    assert math.isclose(df["task.alpha"].iloc[0], 2.0)
