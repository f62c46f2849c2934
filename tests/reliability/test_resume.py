"""--resume: refusals (complete file, different config, unsupported model, missing file), a crash
in the middle of a checkpoint, and SIGTERM + resume of an ICL training run (issue 6, items 1-3)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import h5py
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5 import RunWriter
from fastdyn.h5.writer import read_checkpoint

from .conftest import MSFR, assert_same_series

ICL = [
    "--set",
    "model=attn-m",
    "--set",
    "data.P=200",
    "--set",
    "schedule.epochs=300",
    "--set",
    "schedule.save_every=10",
    "--set",
    "optim.name=adam",
    "--set",
    "optim.lr=0.01",
    "--set",
    "output.checkpoint_every=0",
]


def _invoke(*args):
    return CliRunner().invoke(main, list(args))


def _one_line_error(res, code: int, needle: str) -> None:
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in res.output, res.output


def test_resume_refuses_a_complete_file(msfr_reference):
    _one_line_error(
        _invoke("simulate", "--resume", str(msfr_reference[0])), 2, "the run is complete"
    )


def test_resume_refuses_a_missing_file(tmp_path):
    _one_line_error(_invoke("simulate", "--resume", str(tmp_path / "nope.h5")), 2, "no such file")


def _interrupted_copy(src, dst, rows: int) -> None:
    """A copy of a finished file set back to an interrupted state (status only: --resume then
    continues from its last checkpoint, which the reference's last segment left)."""
    dst.write_bytes(src.read_bytes())
    with h5py.File(dst, "r+") as f:
        f.attrs["status"] = "interrupted: test"


def test_resume_refuses_a_different_config_and_needs_force_for_a_neutral_one(
    msfr_reference, tmp_path
):
    p = tmp_path / "x.h5"
    _interrupted_copy(msfr_reference[0], p, 0)
    _one_line_error(
        _invoke("simulate", "--resume", str(p), *MSFR, "--set", "solver.rtol=1e-9"),
        2,
        "solver.rtol (file 1e-08, given 1e-09)",
    )
    _one_line_error(
        _invoke("simulate", "--resume", str(p), *MSFR, "--set", "solver.rtol=1e-9", "--force"),
        2,
        "cannot be resumed",
    )
    _one_line_error(
        _invoke("simulate", "--resume", str(p), "--set", "output.times_per_segment=5"),
        2,
        "pass --force",
    )
    # every differing key is named, those that change results first (issue 17)
    res = _invoke(
        "simulate",
        "--resume",
        str(p),
        "--set",
        "output.checkpoint_every=5",
        "--set",
        "task.alpha=1.5",
    )
    _one_line_error(
        res,
        2,
        "differs from the file's in 2 keys: task.alpha (file 2.0, given 1.5); output.checkpoint_every (file 0.0, given 5.0, does not change results); 1 of them change the results",
    )
    res = _invoke(
        "-q", "simulate", "--resume", str(p), "--set", "output.times_per_segment=5", "--force"
    )
    assert res.exit_code == 0, res.output
    assert_same_series(fastdyn.load(msfr_reference[0]), fastdyn.load(p))  # segmentation-neutral


def test_resume_refuses_a_file_of_an_unknown_model(tmp_path):
    p = tmp_path / "a.h5"
    w = RunWriter(
        p,
        model="no-such-model",
        config_toml='model = "no-such-model"\n',
        seed=0,
        series={"loss/test": ()},
    )
    w.close("interrupted")
    _one_line_error(_invoke("simulate", "--resume", str(p)), 2, "unknown model")


_CRASH = textwrap.dedent(
    """
    import os, sys
    import fastdyn.h5.writer as w
    from click.testing import CliRunner
    from fastdyn.cli import main
    orig = w.RunWriter.checkpoint
    calls = {"n": 0}
    def checkpoint(self, arrays):
        calls["n"] += 1
        if calls["n"] == 5:  # die half-way: the new slot written, `current` not yet moved
            g = self._f["checkpoint"]
            s = g[f"slot{1 - self._ckpt_slot}"]
            s["y"][...] = 12345.0
            s["meta"][...] = [99, 1, 0]
            self._f.flush()
            os._exit(9)
        orig(self, arrays)
    w.RunWriter.checkpoint = checkpoint
    CliRunner().invoke(main, ["-q", "simulate", *sys.argv[2:], "-o", sys.argv[1]])
    """
)


def test_a_crash_during_a_checkpoint_leaves_the_previous_one_valid(msfr_reference, tmp_path):
    p = tmp_path / "c.h5"
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH, str(p), *MSFR], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 9, proc.stderr
    with h5py.File(p, "r", libver="latest", swmr=True) as f:
        arrays, rows, seq = read_checkpoint(f)
    assert seq == 4 and rows == 3 * 2  # checkpoints after rows 0, 2, 4, 6; the 5th never completed
    res = _invoke("-q", "simulate", "--resume", str(p))
    assert res.exit_code == 0, res.output
    assert_same_series(fastdyn.load(msfr_reference[0]), fastdyn.load(p))


def test_icl_sigterm_checkpoints_and_resumes_bit_identically(tmp_path, sigterm_after, monkeypatch):
    ref, p = tmp_path / "ref.h5", tmp_path / "int.h5"
    assert _invoke("-q", "simulate", *ICL, "-o", str(ref)).exit_code == 0
    sigterm_after(7)
    res = _invoke("-q", "simulate", *ICL, "-o", str(p))
    assert res.exit_code == 143, res.output
    monkeypatch.undo()
    r = fastdyn.load(p)
    assert r.status.startswith("interrupted: SIGTERM after step 60 of 300"), r.status
    with h5py.File(p, "r") as f:
        arrays, rows, seq = read_checkpoint(f)
    assert (
        rows == 7
        and int(arrays["position"][0]) == 60
        and {"optim_m", "optim_v", "optim_step"} <= set(arrays)
    )
    assert _invoke("-q", "simulate", "--resume", str(p)).exit_code == 0
    assert_same_series(fastdyn.load(ref), fastdyn.load(p))


def test_msfr_gd_sigterm_in_process_resumes_bit_identically(tmp_path, sigterm_after, monkeypatch):
    gd = [
        "--set",
        "task.n_tasks=2048",
        "--set",
        "solver.integrator=gd",
        "--set",
        "solver.lr=0.004",
        "--set",
        "time.t_max=4",
        "--set",
        "time.n_times=30",
        "--set",
        "output.times_per_segment=3",
        "--set",
        "output.checkpoint_every=2 steps",
    ]
    ref, p = tmp_path / "ref.h5", tmp_path / "int.h5"
    assert _invoke("-q", "simulate", *gd, "-o", str(ref)).exit_code == 0
    sigterm_after(4)
    assert _invoke("-q", "simulate", *gd, "-o", str(p)).exit_code == 143
    monkeypatch.undo()
    assert fastdyn.load(p).status.startswith("interrupted: SIGTERM")
    assert _invoke("-q", "simulate", "--resume", str(p)).exit_code == 0
    assert_same_series(fastdyn.load(ref), fastdyn.load(p))


def test_resume_of_a_file_rewritten_without_its_checkpoint_is_one_line(tmp_path):
    """A complete file is rewritten without /checkpoint (issue 17); set back to interrupted by
    hand, it has nothing to continue from: one line naming the key that keeps it, exit 2."""
    p = tmp_path / "c.h5"
    res = _invoke("-q", "simulate", *MSFR, "--set", "output.keep_checkpoint=false", "-o", str(p))
    assert res.exit_code == 0, res.output
    with h5py.File(p, "r+") as f:
        assert "checkpoint" not in f
        f.attrs["status"] = "interrupted: test"
    _one_line_error(_invoke("simulate", "--resume", str(p)), 2, "no /checkpoint to continue from")
