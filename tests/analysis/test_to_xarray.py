"""xarray and pandas in one call: ``fastdyn.load(path).to_xarray()`` (a Dataset, or a DataTree
for a file with several groups), ``load_many(...).to_xarray()`` / ``.to_pandas(series)`` (a sweep
as one table); without the ``fastdyn[xarray]`` extra, one line naming it."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import fastdyn
from tests.analysis.test_load import make_run, msfr_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sweep(tmp_path):
    """Three runs of α = 1.5, 2, 3 with L = t^-α (the third on a shorter grid)."""
    t = np.geomspace(1, 100, 5)
    for i, a in enumerate((1.5, 2.0, 3.0)):
        tt = t if i < 2 else t[:3]
        series = {"loss/test": tt**-a, "theory/loss/test": 2 * tt**-a}
        make_run(tmp_path / f"r{i}.h5", tt, series, config=msfr_config(alpha=a))
    return tmp_path, t


def test_a_file_with_several_groups_is_a_datatree(sweep):
    folder, t = sweep
    run = fastdyn.load(folder / "r1.h5")
    tree = run.to_xarray()
    assert isinstance(tree, xr.DataTree)
    np.testing.assert_array_equal(tree["loss"]["test"].values, t**-2.0)
    np.testing.assert_array_equal(tree["theory/loss"]["test"].values, 2 * t**-2.0)
    np.testing.assert_array_equal(tree["loss"]["time"].values, t)
    assert tree.attrs["model"] == "msfr" and tree.attrs["status"] == "complete"


def test_a_file_with_one_group_is_a_dataset(tmp_path):
    t = np.geomspace(1, 10, 4)
    run = fastdyn.load(make_run(tmp_path / "a.h5", t, {"loss/test": 1 / t}))
    ds = run.to_xarray()
    assert isinstance(ds, xr.Dataset) and list(ds.data_vars) == ["test"]
    assert ds["test"].dims == ("time",) and ds.attrs["model"] == "msfr"
    np.testing.assert_array_equal(ds["test"].values, 1 / t)
    np.testing.assert_array_equal(ds["time"].values, t)


def test_a_sweep_is_one_dataset_with_a_run_dimension(sweep):
    folder, t = sweep
    ds = fastdyn.load_many(str(folder / "r*.h5")).to_xarray()
    assert ds["test"].dims == ("run", "time") and ds.sizes == {"run": 3, "time": 5}
    assert list(ds["task.alpha"].values) == [1.5, 2.0, 3.0]
    for i, a in enumerate((1.5, 2.0, 3.0)):
        want = t**-a if i < 2 else np.r_[t[:3] ** -a, np.nan, np.nan]  # a shorter run: NaN after
        np.testing.assert_array_equal(ds["test"].isel(run=i).values, want)
    two = ds.where(ds["task.alpha"] == 2.0, drop=True)
    np.testing.assert_array_equal(two["test"].values[0], t**-2.0)


def test_a_sweep_is_one_long_pandas_table(sweep):
    folder, t = sweep
    df = fastdyn.load_many(str(folder / "r*.h5")).to_pandas("loss/test")
    assert len(df) == 5 + 5 + 3 and {"task.alpha", "time", "loss/test", "path"} <= set(df.columns)
    row = df[(df["task.alpha"] == 3.0) & (df["time"] == 10.0)]
    assert row["loss/test"].tolist() == [10.0**-3]
    assert fastdyn.load_many(str(folder / "r*.h5")).to_pandas().shape[0] == 3  # one row per run


@pytest.mark.parametrize(
    ("missing", "call"),
    [
        ("xarray", lambda f: fastdyn.load(f / "r0.h5").to_xarray()),
        ("xarray", lambda f: fastdyn.load_many(str(f / "r*.h5")).to_xarray()),
        ("pandas", lambda f: fastdyn.load_many(str(f / "r*.h5")).to_pandas()),
    ],
)
def test_without_the_extra_the_error_is_one_line_naming_it(sweep, monkeypatch, missing, call):
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    with pytest.raises(ModuleNotFoundError) as e:
        call(sweep[0])
    msg = str(e.value)
    assert msg.endswith(f"needs {missing}, which is not installed: pip install 'fastdyn[xarray]'")
    assert len(msg.splitlines()) == 1


def test_the_extra_installs_what_the_readme_snippets_import():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("[")[0] for d in meta["optional-dependencies"]["xarray"]}
    assert names == {"xarray", "h5netcdf", "pandas"}
    readme = (ROOT / "README.md").read_text()
    assert "pip install 'fastdyn[xarray]'" in readme or 'pip install "fastdyn[xarray]"' in readme
    for block in readme.split("```python")[1:]:
        code = block.split("```")[0]
        if "import xarray" in code or "to_pandas" in code or "to_xarray" in code:
            assert "fastdyn[xarray]" in code, code
