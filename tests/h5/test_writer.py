"""Streaming writer: readable while written (SWMR), dimension scales for xarray, status at close."""

import subprocess
import sys

import h5py
import numpy as np
import pytest

from fastdyn.h5 import FileFormatError, RunWriter, load


def _writer(path):
    return RunWriter(
        path,
        model="msfr",
        config_toml='model = "msfr"\n',
        seed=3,
        series={"loss/test": (), "theory/loss/test": (), "tasks/f": (2,)},
        static={"tasks/index": np.array([1, 5])},
        scales={"tasks/index": ("task", 1)},
    )


def test_append_is_visible_to_a_reader_before_close(tmp_path):
    p = tmp_path / "run.h5"
    w = _writer(p)
    w.append(
        np.array([0.0, 1.0]),
        {
            "loss/test": np.array([1.0, 0.5]),
            "theory/loss/test": np.array([1.0, 0.4]),
            "tasks/f": np.zeros((2, 2)),
        },
    )
    # a separate process reads the file while the writer holds it open
    code = (
        f"import fastdyn.h5 as h; r = h.load({str(p)!r}); print(r.status, r['loss/test'].tolist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split()[0] == "running" and "[1.0, 0.5]" in out
    w.append(
        np.array([2.0]),
        {
            "loss/test": np.array([0.25]),
            "theory/loss/test": np.array([0.2]),
            "tasks/f": np.ones((1, 2)),
        },
    )
    w.close("complete", {"compute": 1.5})
    r = load(p)
    assert r.status == "complete" and r.attrs["timings"]["compute"] == 1.5
    np.testing.assert_array_equal(r.time, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(r["loss/test"], [1.0, 0.5, 0.25])
    assert r["tasks/f"].shape == (3, 2)
    assert (
        r.attrs["format"] == "fastdyn" and r.attrs["format_version"] == 1 and r.attrs["seed"] == 3
    )


def test_exception_in_context_marks_failed(tmp_path):
    p = tmp_path / "run.h5"
    with pytest.raises(RuntimeError), _writer(p):
        raise RuntimeError("boom")
    assert load(p).status.startswith("failed: boom")


def test_xarray_reads_time_as_coordinate(tmp_path):
    xr = pytest.importorskip("xarray")  # test extra; installed by .ci/run
    p = tmp_path / "run.h5"
    w = _writer(p)
    w.append(
        np.array([0.5, 1.0]),
        {
            "loss/test": np.array([1.0, 0.5]),
            "theory/loss/test": np.array([1.0, 0.4]),
            "tasks/f": np.zeros((2, 2)),
        },
    )
    w.close("complete")
    ds = xr.open_dataset(p, engine="h5netcdf", group="loss")
    np.testing.assert_array_equal(ds["test"].coords["time"].values, [0.5, 1.0])
    ds2 = xr.open_dataset(p, engine="h5netcdf", group="tasks")
    assert ds2["f"].dims == ("time", "index")
    np.testing.assert_array_equal(ds2["index"].values, [1, 5])


def test_reader_rejects_non_fastdyn_files(tmp_path):
    with pytest.raises(FileFormatError, match="no such file"):
        load(tmp_path / "nope.h5")
    txt = tmp_path / "x.h5"
    txt.write_text("not hdf5")
    with pytest.raises(FileFormatError, match="not a readable HDF5"):
        load(txt)
    other = tmp_path / "o.h5"
    with h5py.File(other, "w") as f:
        f["a"] = 1
    with pytest.raises(FileFormatError, match="not a fastdyn file"):
        load(other)


def test_row_by_row_appends_do_not_grow_the_file_beyond_its_data(tmp_path):
    """SWMR-write mode never reuses freed space: a series whose chunks were rewritten on every
    append (compressed chunks change size) left a copy behind each time, 226 MB for these 1000
    rows. Uncompressed chunks are overwritten in place, so the file stays near its raw size."""
    p = tmp_path / "wide.h5"
    w = RunWriter(p, model="icl", config_toml="", seed=0, series={"params/Gamma": (8, 8)})
    rng = np.random.default_rng(0)
    for i in range(1000):
        w.append(np.array([float(i)]), {"params/Gamma": rng.standard_normal((1, 8, 8)).cumsum(1)})
    w.close("complete")
    raw = 1000 * (64 + 1) * 8 + 1024 * 65 * 8  # the rows, plus the last chunk's unused part
    assert p.stat().st_size < raw + 200_000  # + metadata, attributes (config, versions)
    with h5py.File(p, "r") as f:
        assert f["params/Gamma"].shape == (1000, 8, 8)


def test_named_axes_share_one_scale_per_name(tmp_path):
    """``dims``: every dataset on a name gets the one scale of that name (hard-linked into its
    group), at creation and at close (also after a reopen); a wrong length is refused."""
    xr = pytest.importorskip("xarray")
    p = tmp_path / "run.h5"
    dims = {"a/w": ("unit",), "b/s": ("unit", None), "c/final": ("unit", "pair"), "b/n": ("unit",)}
    axes = {"unit": "a unit", "pair": "a pair"}
    w = RunWriter(
        p,
        model="m",
        config_toml='model = "m"\n',
        seed=0,
        series={"a/w": (3,), "loss/test": ()},
        static={"b/s": np.ones((3, 2)), "b/n": np.arange(3.0)},
        dims=dims,
        axes=axes,
        checkpoint={"theta": ((1,), "f8")},
    )
    w.append(np.array([0.0]), {"a/w": np.zeros((1, 3)), "loss/test": np.array([1.0])})
    w.checkpoint({"theta": np.zeros(1)})
    w.close("interrupted")
    w, _ = RunWriter.reopen(p)
    w.close("complete", datasets={"c/final": np.zeros((3, 2))}, dims=dims, axes=axes)
    with h5py.File(p, "r") as f:
        assert f["a/unit"] == f["b/unit"] == f["c/unit"]  # one object, three links
        assert f["a/unit"].attrs["long_name"] == "a unit" and list(f["a/unit"][:]) == [0, 1, 2]
        assert "b/s_dim1" in f and "unit_dim0" not in str(list(f["b"]))
    tree = xr.open_datatree(p, engine="h5netcdf")
    assert tree["a"].to_dataset()["w"].dims == ("time", "unit")
    assert tree["b"].to_dataset()["s"].dims == ("unit", "s_dim1")
    assert tree["c"].to_dataset()["final"].dims == ("unit", "pair")
    bad = tmp_path / "bad.h5"
    with pytest.raises(ValueError, match=r"\(unit, length 3\) does not fit"):
        RunWriter(
            bad,
            model="m",
            config_toml='model = "m"\n',
            seed=0,
            series={"a/w": (3,)},
            static={"b/n": np.arange(2.0)},
            dims=dims,
        )
