"""Acceptance 2 (kill + --resume runs only the missing points) and 3 (a failing point is recorded
as failed with its message, the others finish; --resume retries it once)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import h5py
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.sweep import SweepError, load, read, run_sweep
from fastdyn.sweep import index as sweep_index

from .conftest import FASTDYN, SWEEP12, assert_same_point_files, sub_env, write_sweep


def test_kill_then_resume_runs_only_missing(tmp_path, local12):
    path = write_sweep(tmp_path, SWEEP12)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*FASTDYN, "-q", "sweep", str(path), "-o", str(out)],
        env=sub_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "index.h5").exists():
                try:
                    st = read(out / "index.h5")["status"]
                except (OSError, ValueError, KeyError):
                    st = []
                if st.count("complete") >= 3:
                    break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, "the sweep finished before it could be killed"
    # the index left by the kill is a consistent, readable index (written atomically)
    st = read(out / "index.h5")["status"]
    assert len(st) == 12 and set(st) <= {"complete", "running", "pending"}
    sw = load(path)
    pts = sw.points()
    rows = sweep_index.scan(out, pts)
    done = {p.name for p in pts if rows[p.id].complete}
    assert 3 <= len(done) < 12
    before = {n: (out / "points" / f"{n}.h5").stat() for n in done}
    with pytest.raises(SweepError, match="already holds a sweep; pass --resume"):
        run_sweep(sw, out)
    res = run_sweep(sw, out, resume=True)
    assert sorted(res.ran) == sorted({p.name for p in pts} - done)
    assert res.counts() == {"complete": 12}
    for n, s in before.items():  # complete files are left alone
        s2 = (out / "points" / f"{n}.h5").stat()
        assert (s2.st_ino, s2.st_mtime_ns) == (s.st_ino, s.st_mtime_ns)
    _, out_local, _ = local12
    for p in pts:
        assert_same_point_files(out_local / p.relpath, out / p.relpath)
    # a second resume has nothing left to run
    assert run_sweep(sw, out, resume=True).ran == []


#: a sweep that dies (as kill -9) inside its first point's close, right after the flush that
#: wrote status "complete" and before HDF5 cleared the file's open flags
_DIE_IN_CLOSE = (
    "import os, sys, fastdyn.h5.failstop as fs; from fastdyn.cli import main\n"
    "orig = fs.FailStopFile.flush\n"
    "def flush(self):\n    orig(self)\n    if self.journal is not None: os._exit(9)\n"
    "fs.FailStopFile.flush = flush\nmain(sys.argv[1:])"
)


def test_a_point_killed_inside_its_close_is_closed_by_the_next_scan(tmp_path):
    """Such a point says "complete" but plain h5py refuses it ("already open for write"); a
    sweep leaves complete points alone, so its scan finishes the close (flags cleared, resume
    state dropped) and --resume runs only the other points."""
    path = write_sweep(tmp_path, SWEEP12)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", _DIE_IN_CLOSE, "-q", "sweep", str(path), "-o", str(out)],
        env=sub_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 9, proc.stderr
    p0 = out / "points" / "p0000.h5"
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(p0, "r")
    pts = load(path).points()
    assert sweep_index.scan(out, pts)[pts[0].id].complete
    with h5py.File(p0, "r") as f:  # a plain file now, without its resume state
        assert f.attrs["status"] == "complete" and "checkpoint" not in f
    res = run_sweep(load(path), out, resume=True)
    assert sorted(res.ran) == sorted(p.name for p in pts[1:]) and res.counts() == {"complete": 12}


FAILING = """
[base]
model = "msfr"
task.n_tasks = 1024
task.psi0 = 10
time.t_min = 0.1
time.t_max = 100
time.n_times = 6
solver.integrator = "gd"
theory.level = "none"

[grid]
solver.lr = [0.01, 1.0, 0.02, 0.015]
"""


def test_failing_points_recorded_and_retried_once(tmp_path):
    path = write_sweep(tmp_path, FAILING)
    out = tmp_path / "out"
    # p0001: gd far above its stability bound (2/λ_max ≈ 0.08 for ψ = 10, Λ = 1) diverges;
    # p0003: a directory in the way of its file makes the HDF5 writer raise
    (out / "points" / "p0003.h5").mkdir(parents=True)
    r = CliRunner().invoke(main, ["sweep", str(path), "-o", str(out), "--shard", "0/1"])
    assert r.exit_code == 1, r.output
    t = read(out / "index.h5")
    assert t["status"][0] == t["status"][2] == "complete"
    assert t["status"][1].startswith("failed: diverged at t = ")
    assert t["error"][1] == t["status"][1][len("failed: ") :] and "solver.lr = 1" in t["error"][1]
    assert (
        t["status"][3].startswith("failed: NotRegularFile")
        and "is a directory, not a regular file" in t["error"][3]
    )
    assert "p0001: failed: diverged" in r.output and "p0003: failed: NotRegularFile" in r.output
    # resume: complete points skipped; each failed point retried once (p0001 fails again, p0003 now runs)
    (out / "points" / "p0003.h5").rmdir()
    res = run_sweep(load(path), out, resume=True)
    assert sorted(res.ran) == ["p0001", "p0003"]
    t = read(out / "index.h5")
    assert t["status"][3] == "complete" and t["status"][1].startswith("failed: diverged")
