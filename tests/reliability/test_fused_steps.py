"""A stop request while a trained run takes fused steps between saves (per-sample ATTN_M: full-batch
GD, and minibatch SGD with momentum): the run stops after the block it is in, checkpoints at that
step (between two saves, with the optimiser's state) and resumes bit-identically."""

from __future__ import annotations

import os
import signal

import h5py
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.writer import read_checkpoint
from fastdyn.models.icl.attn_m import AttnM

from .conftest import assert_same_series

#: saves 100 steps apart: every step between them is taken in fused blocks
ARGS = [
    "--set", "model=attn-m", "--set", "data.P=200", "--set", "schedule.epochs=400",
    "--set", "schedule.save_every=100", "--set", "optim.name=gd", "--set", "optim.lr=0.01",
    "--set", "output.checkpoint_every=0",
]  # fmt: skip
#: the same with minibatch SGD and momentum (a state to checkpoint): the minibatch fused steps
MINIBATCH = [*ARGS, "--set", "optim.name=sgd", "--set", "optim.batch_size=50", "--set", "optim.momentum=0.5"]  # fmt: skip


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize(
    ("hook", "args"), [("gd_steps", ARGS), ("optimizer_steps", MINIBATCH)], ids=["gd", "minibatch"]
)
def test_sigterm_during_fused_steps_stops_between_saves_and_resumes(
    tmp_path, monkeypatch, hook, args
):
    ref = tmp_path / "ref.h5"
    assert _invoke("-q", "simulate", *args, "-o", str(ref)).exit_code == 0
    orig = getattr(AttnM, hook)
    seen = {"blocks": 0, "steps": 0}

    def steps(self, prep):
        advance = orig(self, prep)

        def signal_in_first_block(*a):
            done = advance(*a)
            seen["blocks"] += 1
            seen["steps"] += done
            if seen["blocks"] == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return done

        return signal_in_first_block

    monkeypatch.setattr(AttnM, hook, steps)
    p = tmp_path / "int.h5"
    res = _invoke("-q", "simulate", *args, "-o", str(p))
    monkeypatch.undo()
    assert res.exit_code == 143, res.output
    r = fastdyn.load(p)
    assert r.status.startswith("interrupted: SIGTERM"), r.status
    with h5py.File(p, "r") as f:
        arrays, rows, _seq = read_checkpoint(f)
    step = int(arrays["position"][0])
    assert seen["blocks"] == 1, seen  # it stopped after the block the signal came in
    assert step == 1 + seen["steps"] and step % 100 != 0, (step, seen)
    assert rows == len(r.time) == 1
    assert _invoke("-q", "simulate", "--resume", str(p)).exit_code == 0
    assert_same_series(fastdyn.load(ref), fastdyn.load(p))
