"""Every dataset of a small file of every model says what it holds (a ``long_name`` that is not
its path) and its units; ``/time`` says how each integrator reached it; a time-valued dataset
carries ``/time``'s units."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.h5 import layout
from fastdyn.models.msfr_attn import kernels as K
from fastdyn.models.msfr_attn import weights as W
from tests.golden._runs import repo_root

CONFIGS = repo_root() / "data" / "configs"

#: (model, config, --set overrides): small files reaching every optional dataset a model writes
#: (ICL: test sets, data, diagnostics, snapshots, other context lengths, Eq. 21; msfr-attn:
#: adaptation, data, the closed form and the gd map)
RUNS = [
    ("msfr", "quickstart.toml", ("task.n_tasks=2000", "output.track=[1, 10]", "time.n_times=6", "time.t_max=1e4")),
    ("msfr-h", "msfr_h.toml", ("time.n_times=6", "task.n_tasks=4", "time.t_max=50", "output.track=[1, 4]")),
    ("msfr-attn", "msfr_attention.toml", ("task.n_tasks=50", "output.track=[1, 10]", "schedule.epochs=20", "adapt.factors=[0.5, 2.0]", "data.save=true")),
    ("msfr-attn", "msfr_noise.toml", ("schedule.epochs=10", "schedule.n_saves=3", "task.n_samples=100", "data.n_test=50", 'attention.kq="separate"')),
    ("attn-m", "icl_fig1.toml", ("data.P=30", "schedule.epochs=21", "data.n_test=10", "schedule.save_every=10", "data.save=true", "output.diagnostics=true", "output.snapshots=true", "test.context_lengths=[10, 40]")),
    ("attn-s", "icl_fig3.toml", ("data.population=true", "attention.reduced=true", "data.n_test=0", "schedule.epochs=21", "schedule.save_every=10", "output.diagnostics=true")),
    ("mlp-cubic", "icl_fig1.toml", ('model="mlp-cubic"', "data.P=30", "schedule.epochs=21", "data.n_test=10", "schedule.save_every=10")),
    ("logistic", None, ("model=\"logistic\"", "time.n_times=6", "task.n_tasks=2000")),
]  # fmt: skip

#: what a long_name says of a time: its dataset must carry /time's units
_TIME_WORDS = re.compile(r"\btime\b|\bduration\b")


def _simulate(path, config, sets) -> None:
    args = ["simulate", *([str(CONFIGS / config)] if config else []), "-o", str(path), "--quiet"]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output


def _datasets(f: h5py.File) -> dict[str, h5py.Dataset]:
    out: dict[str, h5py.Dataset] = {}
    f.visititems(lambda n, o: out.setdefault(n, o) if isinstance(o, h5py.Dataset) else None)
    return out


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@pytest.mark.parametrize("model, config, sets", RUNS, ids=[f"{m}:{c}" for m, c, _ in RUNS])
def test_every_dataset_says_what_it_holds_and_its_units(tmp_path, model, config, sets) -> None:
    path = tmp_path / "run.h5"
    _simulate(path, config, sets)
    with h5py.File(path, "r") as f:
        assert _text(f.attrs["model"]) == model
        time_units = _text(f["time"].attrs["units"])
        assert time_units in ("gradient-flow time", "tau")
        bad = []
        for name, ds in _datasets(f).items():
            if name.startswith("checkpoint/"):
                continue
            units = _text(ds.attrs.get("units", ""))
            ln = _text(ds.attrs.get("long_name", "")).strip()
            base = name.rsplit("/", 1)[-1]
            if not units or not ln:
                bad.append(f"{name}: units {units!r}, long_name {ln!r}")
            elif ln.strip("/") in (name, base) or ln.startswith((name, "/" + name)):
                bad.append(f"{name}: long_name is its path ({ln!r})")
            elif _TIME_WORDS.search(ln) and units != time_units:
                bad.append(f"{name}: a time ({ln!r}) in units {units!r}, not {time_units!r}")
            elif ln.startswith("index along axis") and not ds.attrs.get("CLASS"):
                bad.append(f"{name}: an index's long_name on a dataset that is not an axis")
        assert not bad, "\n".join(bad)
        if model == "msfr":
            assert _text(f["tasks/emergence"].attrs["units"]) == time_units
        if model == "attn-s":  # the Eq. 21 times are in the run's own time units
            for k in ("drop_time", "plateau_duration"):
                assert _text(f[f"theory/eq21/{k}"].attrs["units"]) == "tau"


#: (integrator, config, --set overrides, the words /time's long_name must hold)
CLOCKS = [
    ("dopri5", "quickstart.toml", (), "Dormand-Prince"),
    ("rk4", "quickstart.toml", ('solver.integrator="rk4"', "solver.steps_per_timescale=8"), "RK4"),
    ("gd", "quickstart.toml", ('solver.integrator="gd"', "solver.lr=0.01", "time.t_max=1"), "learning_rate * step"),
    ("none", "quickstart.toml", ('solver.integrator="none"',), "closed form"),
    ("rk4 (plug-in)", None, ('model="logistic"', 'solver.integrator="rk4"'), "RK4"),
    ("dopri5 (plug-in)", None, ('model="logistic"', 'solver.integrator="dopri5"'), "Dormand-Prince"),
]  # fmt: skip


@pytest.mark.parametrize("what, config, sets, words", CLOCKS, ids=[c[0] for c in CLOCKS])
def test_the_time_axis_says_how_each_integrator_reached_it(tmp_path, what, config, sets, words):
    path = tmp_path / "run.h5"
    small = ("task.n_tasks=2000", "output.track=[1, 10]", "time.n_times=4", "time.t_max=100")
    _simulate(path, config, (*small, *sets))
    with h5py.File(path, "r") as f:
        ln, units = _text(f["time"].attrs["long_name"]), _text(f["time"].attrs["units"])
        assert units == "gradient-flow time" and words in ln, ln
        # a flow's time is no optimiser step count: only gd (which stores /step) says so
        assert ("step" in ln.replace("fixed step", "")) == ("step" in f), ln
        assert ln == layout.TIME_LONG_NAMES[what.split()[0]]


def test_msfr_attn_weights_are_named_arrays_that_partition_theta() -> None:
    """Every layout: the named arrays, raveled in order, are θ itself (no entry lost or
    repeated), and each one is the matrix entry its name says, read from the dense matrices of
    :func:`kernels.dense_weights` (the layout the reference tests use)."""
    rng = np.random.default_rng(0)
    d, r = 5, 2
    for dense in (False, True):
        for emb in ("block", "shared"):
            for kq in ("merged", "separate"):
                lay = K.Layout(d, emb, kq, r, False, dense)
                th = rng.normal(size=lay.n_params)
                named = W.named(th, lay)
                flat = np.concatenate([a.ravel() for a, _ in named.values()])
                assert np.array_equal(flat, th), (emb, kq, dense)
                for name, (a, dims) in named.items():
                    assert a.ndim == len(dims) and name in W.LONG_NAMES
                    assert all(n in W.AXES for n in dims)
                full = K.dense_weights(th, lay)
                xs = np.arange(d) if emb == "shared" else 2 * np.arange(d)
                lab = np.full(d, d) if emb == "shared" else 2 * np.arange(d) + 1
                if dense:
                    assert np.array_equal(named["W_V"][0], full["v"])
                    if kq == "merged":
                        assert np.array_equal(named["W_KQ"][0], full["W"][:, xs])
                    else:
                        assert np.array_equal(named["W_K"][0], full["WK"])
                        assert np.array_equal(named["W_Q"][0], full["WQ"][:, xs])
                    continue
                assert np.array_equal(named["W_V_x"][0], full["v"][xs])
                assert np.array_equal(named["W_V_y"][0], full["v"][lab[: len(named["W_V_y"][0])]])
                if kq == "merged":
                    assert np.array_equal(named["W_KQ_x"][0], full["W"][xs, xs])
                    assert np.array_equal(named["W_KQ_y"][0], full["W"][lab, xs])
                else:
                    assert np.array_equal(named["W_K_x"][0], full["WK"][:, xs].T)
                    assert np.array_equal(named["W_Q_x"][0], full["WQ"][:, xs].T)
                    ky = named["W_K_y"][0]
                    assert np.array_equal(ky, full["WK"][:, lab[: len(ky)]].T)


def test_final_weights_written_after_a_resume_keep_their_descriptions(tmp_path) -> None:
    """A resumed writer has no declared layout of its own: the final datasets' units, long names
    and axes come with ``close`` (the trained driver passes its model's)."""
    from fastdyn.h5.writer import RunWriter

    path = tmp_path / "w.h5"
    w = RunWriter(
        path, model="msfr-attn", config_toml="", seed=0, series={"loss/test": ()},
        checkpoint={"theta": ((3,), "f8")},
    )  # fmt: skip
    w.append(np.array([0.0]), {"loss/test": np.array([1.0])})
    w.checkpoint({"theta": np.zeros(3)})
    w.close("interrupted")
    w, ck = RunWriter.reopen(path)
    assert ck is not None
    name = "params/weights/W_V_x"
    w.close(
        "complete", datasets={name: np.arange(3.0)}, dims={name: ("model_task",)}, axes=W.AXES,
        descriptions={name: ("1", W.LONG_NAMES["W_V_x"])},
    )  # fmt: skip
    with h5py.File(path, "r") as f:
        assert f[name].attrs["long_name"] == W.LONG_NAMES["W_V_x"]
        assert f["params/weights/model_task"].attrs["long_name"] == W.AXES["model_task"]
