"""A closed-form-only MSFR run (``solver.integrator=none``) stopped by SIGTERM leaves a checkpoint
that validates, and ``--resume`` continues from it, bit-identically.

The closed form has no state to save, but the checkpoint slots still hold the model's state
arrays (of width 0); a checkpoint that left them out failed its crc32 (which covers every array
of the slot), so ``fastdyn inspect`` called the file damaged and ``--resume`` started over.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.drive.ode_run import slot_arrays
from fastdyn.h5 import RunWriter
from fastdyn.h5.writer import checkpoint_damage, read_checkpoint

from .conftest import assert_same_series

#: the closed form only, 61 output times (t = 0 included) in appends of 3; the default checkpoint_every (60 s) means
#: the checkpoint is the one the stop itself takes
ARGS = [
    "--set", "solver.integrator=none", "--set", "task.n_tasks=4096", "--set", "time.n_times=60",
    "--set", "output.times_per_segment=3",
]  # fmt: skip
ROWS_PER_APPEND = 3


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def closed_form_reference(tmp_path_factory) -> fastdyn.h5.Run:
    p = tmp_path_factory.mktemp("closed_form") / "ref.h5"
    res = _invoke("-q", "simulate", *ARGS, "-o", str(p))
    assert res.exit_code == 0, res.output
    r = fastdyn.load(p)
    assert r.status == "complete" and len(r.time) == 61
    assert "theory/loss/test" in r.series and "loss/test" not in r.series
    return r


@pytest.mark.parametrize(
    "after, extra",
    [
        (1, []),
        (7, []),
        (13, ["--set", "output.checkpoint_every=0"]),  # a checkpoint after every segment too
    ],
)
def test_sigterm_in_closed_form_run_checkpoints_and_resumes_bit_identically(
    after, extra, closed_form_reference, tmp_path, sigterm_after, monkeypatch
):
    ref = closed_form_reference
    p = tmp_path / "int.h5"
    sigterm_after(after)
    res = _invoke("-q", "simulate", *ARGS, *extra, "-o", str(p))
    monkeypatch.undo()
    assert res.exit_code == 143, res.output
    r = fastdyn.load(p)
    assert r.status.startswith("interrupted: SIGTERM"), r.status
    n = after * ROWS_PER_APPEND
    assert len(r.time) == n

    with h5py.File(p, "r") as f:
        assert checkpoint_damage(f) is None
        got = read_checkpoint(f)
    assert got is not None, "the checkpoint fails its crc32"
    arrays, rows, _seq = got
    assert rows == n and int(arrays["position"][0]) == n

    res = _invoke("inspect", str(p))
    assert res.exit_code == 0, res.output
    assert "damaged" not in res.output

    first: list[int] = []
    orig = RunWriter.append

    def append(self, *a, **k):
        first.append(self.n_rows)
        orig(self, *a, **k)

    monkeypatch.setattr(RunWriter, "append", append)
    res = _invoke("-q", "simulate", "--resume", str(p))
    monkeypatch.undo()
    assert res.exit_code == 0, res.output
    assert first[0] == n  # continued from the checkpoint: the rows written are not redone
    got_run = fastdyn.load(p)
    assert got_run.status == "complete"
    assert_same_series(ref, got_run)


def test_slot_arrays_covers_every_declared_array():
    spec = {"y": ((4, 0), "f8"), "status": ((0,), "i1"), "position": ((2,), "i8")}
    out = slot_arrays({"position": np.array([5, 0])}, spec, simulate=False)
    assert sorted(out) == sorted(spec)
    assert out["y"].shape == (4, 0) and out["status"].dtype == np.int8
    with pytest.raises(ValueError, match="'h'"):
        slot_arrays({"position": np.array([5, 0])}, {"h": ((3,), "f8")}, simulate=True)
