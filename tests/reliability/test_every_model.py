"""Every registered model streams, survives a sudden death and SIGTERM, and resumes bit-identically
(issue 16, acceptance 2). Parametrised over the registry: a new model must add a small config
here, or ``test_every_registered_model_has_a_case`` fails.

The sudden death is ``os._exit(9)`` right after the n-th appended row set, inside a subprocess:
nothing is closed or flushed beyond what the writer already flushed, exactly as a kill -9 at that
moment leaves the file, but at a deterministic moment.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import textwrap

import h5py
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.writer import read_checkpoint
from fastdyn.models.registry import model_names

from .conftest import assert_same_series

#: one small run per registered model, with a checkpoint at every save / segment
CASES: dict[str, list[str]] = {
    "msfr": ["task.n_tasks=2048", "solver.integrator=gd", "solver.lr=0.004", "time.t_max=4", "time.n_times=30", "output.times_per_segment=3", "output.checkpoint_every=0"],
    "msfr-attn": ["task.n_tasks=40", "task.n_samples=400", "schedule.epochs=200", "schedule.n_saves=24", "optim.name=adam", "optim.lr=0.01", "optim.batch_size=64", "output.checkpoint_every=0"],
    "attn-m": ["data.P=200", "schedule.epochs=300", "schedule.save_every=10", "optim.name=adam", "optim.lr=0.01", "output.checkpoint_every=0"],
    "attn-s": ["data.P=200", "schedule.epochs=300", "schedule.save_every=10", "optim.name=sgd", "optim.batch_size=50", "optim.lr=0.01", "output.checkpoint_every=0"],
    "mlp-cubic": ["data.P=200", "schedule.epochs=300", "schedule.save_every=10", "optim.lr=0.01", "output.checkpoint_every=0"],
    "msfr-h": ["task.n_tasks=6", "task.psi0=4", "h.dim=3", "h.spectrum=[1, 1, 0]", "h.eigenvectors=random", "time.t_max=20", "time.n_times=30", "output.times_per_segment=3", "output.checkpoint_every=0"],
    "logistic": ["task.n_tasks=3000", "time.n_times=40", "output.times_per_segment=2", "output.checkpoint_every=0"],
    "deep-linear": ["task.n_tasks=1500", "time.t_max=50", "time.n_times=40", "output.times_per_segment=2", "output.checkpoint_every=0"],
}  # fmt: skip
#: rows per append where it is not one (msfr: output.times_per_segment)
ROWS_PER_APPEND = {"msfr": 3, "msfr-h": 3, "logistic": 2, "deep-linear": 2}


def _args(model: str) -> list[str]:
    out = ["--set", f"model={model}"]
    for kv in CASES[model]:
        out += ["--set", kv]
    return out


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _reference(model: str, model_reference) -> fastdyn.h5.Run:
    r = fastdyn.load(model_reference(model, _args(model)))
    assert r.status == "complete" and len(r.time) >= 10
    return r


def test_every_registered_model_has_a_case():
    assert sorted(CASES) == model_names()


_DIE = textwrap.dedent(
    """
    import os, sys
    import fastdyn.h5.writer as w
    from click.testing import CliRunner
    from fastdyn.cli import main
    orig = w.RunWriter.append
    calls = {"n": 0}
    def append(self, *a, **k):
        orig(self, *a, **k)
        calls["n"] += 1
        if calls["n"] == int(sys.argv[2]):
            os._exit(9)
    w.RunWriter.append = append
    CliRunner().invoke(main, ["-q", "simulate", *sys.argv[3:], "-o", sys.argv[1]])
    """
)


@pytest.mark.parametrize("model", sorted(CASES))
def test_sudden_death_leaves_streamed_rows_and_resumes_bit_identically(
    model, model_reference, tmp_path
):
    ref = _reference(model, model_reference)
    p = tmp_path / "killed.h5"
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    die_after = random.Random(f"{model}:{os.environ.get('FASTDYN_KILL_SEED', '20261204')}").randint(
        2, 8
    )  # a random moment, reproducible
    proc = subprocess.run(
        [sys.executable, "-c", _DIE, str(p), str(die_after), *_args(model)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 9, proc.stderr
    with h5py.File(
        p, "r", libver="latest", swmr=True
    ) as f:  # streamed: the rows so far are on disk
        n = f["time"].shape[0]
        assert n == die_after * ROWS_PER_APPEND.get(model, 1)  # every appended row, none more
        assert f.attrs["status"] == "running"
        streamed = []
        f.visititems(
            lambda k, o: (
                streamed.append(k)
                if isinstance(o, h5py.Dataset)
                and o.maxshape
                and o.maxshape[0] is None
                and not k.startswith("checkpoint")
                else None
            )
        )
        assert len(streamed) >= 3
        for k in streamed:
            assert f[k].shape[0] == n, k
        assert (f["time"][:n] == ref.time[:n]).all()
    assert fastdyn.load(p).status == "running"
    import xarray as xr  # the engine for killed and running files: every flushed row, no NaN row

    assert xr.open_dataset(p, engine="fastdyn").sizes["time"] == n
    repaired = tmp_path / "repaired.h5"
    shutil.copyfile(p, repaired)
    res = _invoke("-q", "simulate", "--resume", str(p))
    assert res.exit_code == 0, res.output
    got = fastdyn.load(p)
    assert got.status == "complete"
    assert_same_series(ref, got)
    # issue 17, acceptance 2: `fastdyn repair` makes the killed file a plain one (every flushed
    # row kept, status interrupted) that plain h5py and xarray open, and --resume still finishes it
    res = _invoke("repair", str(repaired))
    assert res.exit_code == 0, res.output
    assert f"{n} rows kept" in res.output
    with h5py.File(repaired, "r") as f:  # no SWMR: a plain reader
        assert f["time"].shape[0] == n and f.attrs["status"].startswith("interrupted: ")
    _open_everywhere(repaired, phony=True)
    res = _invoke("-q", "simulate", "--resume", str(repaired))
    assert res.exit_code == 0, res.output
    assert_same_series(ref, fastdyn.load(repaired))


#: opens every group of a file with plain h5py and xarray's datatree, where fastdyn cannot be
#: imported (a user's own environment)
_OPEN = textwrap.dedent(
    """
    import sys, warnings
    class NoFastdyn:
        def find_spec(self, name, path=None, target=None):
            if name == "fastdyn" or name.startswith("fastdyn."):
                raise ImportError("fastdyn is not importable here")
    sys.meta_path.insert(0, NoFastdyn())
    warnings.simplefilter("error")  # no phony-dimension or other warnings either
    import h5py, xarray as xr
    kw = {"phony_dims": "sort"} if "phony" in sys.argv[2:] else {}
    for path in [a for a in sys.argv[1:] if a != "phony"]:
        with h5py.File(path, "r") as f:
            names = []
            f.visit(names.append)
        tree = xr.open_datatree(path, engine="h5netcdf", **kw)
        for node in tree.subtree:
            node.to_dataset().load()
        print(path, len(list(tree.subtree)), len(names))
    """
)


def _open_everywhere(*paths, phony: bool = False) -> None:
    """``phony``: the file keeps its /checkpoint (a repaired one), whose arrays have no
    dimension scales: xarray is told to name them (``phony_dims="sort"``) instead of warning."""
    args = [sys.executable, "-c", _OPEN, *map(str, paths)] + (["phony"] if phony else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


def test_complete_files_are_compact_and_open_in_plain_h5py_and_xarray(model_reference):
    """Issue 17, acceptance 1: a complete file of every registered model has no /checkpoint
    (rewritten without it), and every group opens with plain h5py and xarray's datatree without
    fastdyn (one subprocess for all of them)."""
    paths = [model_reference(model, _args(model)) for model in sorted(CASES)]
    for p in paths:
        with h5py.File(p, "r") as f:
            assert f.attrs["status"] == "complete" and "checkpoint" not in f, p
    _open_everywhere(*paths)


def test_the_fastdyn_xarray_engine_reads_what_h5netcdf_reads(model_reference):
    """``xr.open_datatree(path, engine="fastdyn")`` (the engine for running files) gives a
    complete file of every model exactly as xarray's h5netcdf engine does: the same groups,
    variables, dimension names, coordinates, values and attributes."""
    xr = pytest.importorskip("xarray")
    for model in sorted(CASES):
        p = model_reference(model, _args(model))
        ours, theirs = (xr.open_datatree(p, engine=e) for e in ("fastdyn", "h5netcdf"))
        assert [n.path for n in ours.subtree] == [n.path for n in theirs.subtree], model
        for a, b in zip(ours.subtree, theirs.subtree, strict=True):
            assert a.to_dataset().identical(b.to_dataset().load()), (model, a.path)


@pytest.mark.parametrize("model", sorted(CASES))
def test_sigterm_checkpoints_and_resumes_bit_identically(
    model, model_reference, tmp_path, sigterm_after, monkeypatch
):
    ref = _reference(model, model_reference)
    p = tmp_path / "int.h5"
    sigterm_after(4)
    res = _invoke("-q", "simulate", *_args(model), "-o", str(p))
    monkeypatch.undo()
    assert res.exit_code == 143, res.output
    r = fastdyn.load(p)
    assert r.status.startswith("interrupted: SIGTERM"), r.status
    assert f"--resume {p}" in r.status
    with h5py.File(p, "r") as f:
        _arrays, rows, _seq = read_checkpoint(f)
    assert rows == len(r.time) and 0 < rows < len(ref.time)  # checkpoint of the last row written
    assert _invoke("-q", "simulate", "--resume", str(p)).exit_code == 0
    assert_same_series(ref, fastdyn.load(p))
