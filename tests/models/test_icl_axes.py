"""The named axes of the ICL files: every axis of every dataset is a dimension scale with a name
that says what it is (head, row, col, rank, x_row, eig, plateau, …), one scale per name shared
by every dataset on it, so xarray's datatree opens every group with those dimension names."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.models.icl.setup import AXES

TINY = ("data.D=3", "data.N=5", "data.P=40", "data.n_test=20", "init.scale=0.3", "optim.lr=0.01", "schedule.epochs=20", "schedule.save_every=10")  # fmt: skip
ALL = ("output.diagnostics=true", "output.snapshots=true", "data.save=true", "test.context_lengths=[3, 5]")  # fmt: skip


def _run(path, *sets) -> h5py.File:
    args = ["-q", "simulate"]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, [*args, "-o", str(path)])
    assert res.exit_code == 0, res.output
    return h5py.File(path, "r")


def _dims(f: h5py.File) -> dict[str, tuple[str, ...]]:
    """Every non-scale dataset → the base names of its axes' scales."""
    out: dict[str, tuple[str, ...]] = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and not obj.is_scale:
            out[name] = tuple(d[0].name.rsplit("/", 1)[-1] for d in obj.dims)

    f.visititems(visit)
    return out


@pytest.mark.parametrize(
    "model, weights",
    [
        (
            "attn-s",
            {
                "W_V": ("head", "row", "col"),
                "W_K": ("head", "rank", "col"),
                "W_Q": ("head", "rank", "col"),
            },
        ),  # fmt: skip
        ("attn-m", {"W_V": ("head", "row", "col"), "W_KQ": ("head", "row", "col")}),
        ("mlp-cubic", {"W1": ("head", "feature"), "w2": ("head",)}),
    ],
)
def test_every_axis_is_named_and_xarray_opens_every_group(tmp_path, model, weights):
    xr = pytest.importorskip("xarray")
    p = tmp_path / "r.h5"
    f = _run(p, f"model={model}", "attention.H=3", *TINY, *ALL)
    dims = _dims(f)
    assert not [k for k, v in dims.items() if any("_dim" in d for d in v)], dims
    expect = {
        "params/value_weights": ("time", "head"),
        "params/Gamma": ("time", "x_row", "x_col"),
        "params/Gamma_eig": ("time", "eig"),
        "theory/Gamma_star": ("x_row", "x_col"),
        "theory/eigvals": ("eig",),
        "theory/plateaus": ("plateau",),
        "theory/pcr_loss": ("plateau",),
        "theory/test_context/L_star": ("context_length",),
        "loss/test_context": ("time", "context_length"),
        "diagnostics/head_cosine": ("time", "head", "other_head"),
        "data/tokens": ("sequence", "position", "coordinate"),
        "data/labels": ("sequence", "position"),
        "data/test_ic/tokens": ("test_sequence", "position", "coordinate"),
        "data/test_iw/labels": ("test_sequence", "position"),
    }
    expect |= {f"params/final/{k}": v for k, v in weights.items()}
    expect |= {f"params/snapshots/{k}": ("time", *v) for k, v in weights.items()}
    assert {k: dims[k] for k in expect} == expect
    # one scale per name: every link of a name is the same object, and it is described
    scales: dict[str, set] = {}
    f.visititems(lambda n, o: scales.setdefault(n.rsplit("/", 1)[-1], set()).add(o.id) if isinstance(o, h5py.Dataset) and o.is_scale else None)  # fmt: skip
    assert all(len(v) == 1 for v in scales.values()), scales
    assert f["params/head"] == f["params/final/head"] == f["diagnostics/head"]
    for name in {d for v in expect.values() for d in v} & set(AXES):
        scale = f[next(k for k, v in dims.items() if name in v)].dims
        scale = next(d[0] for d in scale if d[0].name.endswith("/" + name))
        assert scale.attrs["long_name"] == AXES[name] and scale.attrs["units"] == "1", name
    np.testing.assert_array_equal(f["theory/plateau"][:], np.arange(4))  # m = 0..D
    f.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = xr.open_datatree(p, engine="h5netcdf")
        for node in tree.subtree:
            node.to_dataset().load()
    assert tree["params/final"].to_dataset()[next(iter(weights))].dims == next(iter(weights.values()))  # fmt: skip
    # the fastdyn engine (whole rows of running files) names the same axes, and inspect shows them
    ours = xr.open_datatree(p, engine="fastdyn")
    assert ours["params"].to_dataset()["Gamma"].dims == ("time", "x_row", "x_col")
    res = CliRunner().invoke(main, ["inspect", str(p)])
    assert res.exit_code == 0, res.output
    assert any(
        line.split()[0] == "/params/Gamma" and line.endswith("(time, x_row, x_col)")
        for line in res.output.splitlines()
    ), res.output
