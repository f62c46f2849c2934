"""A full disk loses nothing (issue 22, acceptance 1): the run stops before HDF5 runs out of space
inside a flush (which leaves a file that no longer opens), exits 1 with one line naming the path
and the space needed, leaves no temporary file, keeps every flushed row readable, and ``--resume``
finishes it bit-identically once space is freed. With a real tmpfs where the test may mount one,
and for every registered model (a writer that raises what h5py raises on ENOSPC, or free space
running out, alternating over the models)."""

from __future__ import annotations

import subprocess

import h5py
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5 import writer as W

from .conftest import assert_same_series
from .test_every_model import CASES, _args

#: an rk4 run whose rows (50 tracked tasks, 5000 output times) outgrow a 6 MiB file system
BIG = ["--set", "task.n_tasks=4096", "--set", "solver.integrator=rk4", "--set", "time.n_times=5000",
       "--set", f"output.track=[{','.join(str(i) for i in range(1, 51))}]", "--set", "output.times_per_segment=50",
       "--set", "theory.level=leading", "--set", "output.checkpoint_every=0"]  # fmt: skip


def _one_line_exit_1(res, path) -> str:
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert f"cannot write {path}: No space left on device" in lines[0], lines[0]
    assert f"fastdyn simulate --resume {path}" in lines[0]
    return lines[0]


def _no_temp_files(folder) -> None:
    left = [p.name for p in folder.iterdir() if ".tmp-" in p.name or p.name.endswith(".lock")]
    assert not left, left


@pytest.fixture
def small_fs(tmp_path):
    """A 6 MiB tmpfs (root only; skipped where it cannot be mounted)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    ok = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True
        ).returncode
        == 0
    )
    if not ok:
        pytest.skip("cannot mount a tmpfs here (needs root); the fake-ENOSPC tests below still run")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_real_full_file_system(small_fs, tmp_path):
    ref = tmp_path / "ref.h5"
    assert CliRunner().invoke(main, ["-q", "simulate", *BIG, "-o", str(ref)]).exit_code == 0
    p = small_fs / "run.h5"
    _one_line_exit_1(CliRunner().invoke(main, ["-q", "simulate", *BIG, "-o", str(p)]), p)
    _no_temp_files(small_fs)
    with h5py.File(p, "r", libver="latest", swmr=True) as f:  # readable up to its last flush
        n = f["time"].shape[0]
        assert 0 < n < 5000 and f.attrs["status"] == "running"
    r = fastdyn.load(p)
    assert len(r.time) == n
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)  # free space
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    assert res.exit_code == 0, res.output
    assert_same_series(fastdyn.load(ref), fastdyn.load(p))
    _no_temp_files(small_fs)


#: what h5py raises when a flush hits ENOSPC (RuntimeError, not OSError)
_H5_ENOSPC = RuntimeError(
    "Can't decrement id ref count (file write failed: time = Thu Dec  3 21:39:47 2026, filename = 'run.h5', file descriptor = 5, errno = 28, error message = 'No space left on device', buf = 0x1, total write size = 8192, bytes this sub-write = 8192, bytes actually written = 18446744073709551615, offset = 2179072)"
)


#: every model once, the two ways of running out alternating over them
WAYS = [(m, ("h5py raises", "free space runs out")[i % 2]) for i, m in enumerate(sorted(CASES))]


@pytest.mark.parametrize("model,how", WAYS)
def test_every_model_stops_cleanly_and_resumes(model, how, model_reference, tmp_path, monkeypatch):
    ref = model_reference(model, _args(model))
    run = tmp_path / "run"
    run.mkdir()
    p = run / "x.h5"
    calls = {"n": 0}
    if how == "h5py raises":
        orig = W.RunWriter._write_rows

        def write_rows(self, *a, **k):
            calls["n"] += 1
            if calls["n"] == 4:
                raise _H5_ENOSPC
            return orig(self, *a, **k)

        monkeypatch.setattr(W.RunWriter, "_write_rows", write_rows)
    else:  # on a file system without fallocate (some NFS): statvfs is all the writer has
        from fastdyn.h5 import failstop

        orig_free = W._free_bytes

        def free(path):
            calls["n"] += 1
            return 1 << 20 if calls["n"] > 5 else orig_free(path)  # 1 MiB < the 4 MiB reserve

        monkeypatch.setattr(W, "_free_bytes", free)
        monkeypatch.setattr(failstop, "_fallocate", lambda: None)
        monkeypatch.setattr(failstop.FailStopFile, "reserved", lambda self: 0)
    _one_line_exit_1(CliRunner().invoke(main, ["-q", "simulate", *_args(model), "-o", str(p)]), p)
    monkeypatch.undo()
    _no_temp_files(run)
    r = fastdyn.load(p)
    assert r.status == "running" and 0 < len(r.time) < len(fastdyn.load(ref).time)
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    assert res.exit_code == 0, res.output
    assert_same_series(fastdyn.load(ref), fastdyn.load(p))
