"""A sweep answers SIGINT/SIGTERM (issue 22, item 5): the point being run stops inside its only
(so also last) segment as ``interrupted``, no further point starts, the sweep exits 130/143 as
the signal says, and ``--resume`` takes the sweep up again; a second signal ends it at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

import fastdyn
from fastdyn.sweep import read
from tests._child_events import CHILD, ChildEvents

from .conftest import FASTDYN, sub_env, write_sweep

#: three points of a stiff dopri5 run (Λ = 10^6, rtol 1e-12) in one segment: each spends ~40 s
#: in its first kernel call (tests/reliability/test_signals_in_kernels.py), so a signal lands
#: inside a point's only, hence last, segment
STIFF3 = """
[base]
model = "msfr"
task.n_tasks = 1_000_000
task.alpha = 2.0
time.grid = "log"
time.t_min = 1e-3
time.t_max = 1e10
time.n_times = 128
solver.integrator = "dopri5"
solver.rtol = 1e-12
theory.level = "none"
output.track = [1, 10]
task.strength0 = 1e6
output.times_per_segment = 1000

[grid]
task.psi0 = [100, 101, 102]
"""


#: ``fastdyn ARGS`` whose dopri5 kernel calls report event ``k`` once the main thread is inside
#: the compiled call (tests/_child_events.py); the local scheduler runs the points in this process
_KERNEL = (
    CHILD
    + """
import sys
import fastdyn.models.msfr.integrate as integ
from fastdyn.cli import main
orig = integ.dopri5_kernel
def dopri5_kernel(*a):
    return inside(b"k", orig, *a)
integ.dopri5_kernel = dopri5_kernel
main(sys.argv[1:])
"""
)


def _start(tmp_path):
    path = write_sweep(tmp_path, STIFF3)
    out = tmp_path / "out"
    env = dict(sub_env(), NUMBA_NUM_THREADS="2")
    with ChildEvents() as ev:
        proc = ev.popen([sys.executable, "-c", _KERNEL, "sweep", str(path), "-o", str(out)], env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        ev.wait(b"k")  # the first point's run is inside its kernel
    return path, out, proc


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_inside_the_last_segment_stops_the_sweep(tmp_path, sig, code):
    _path, out, proc = _start(tmp_path)
    assert proc.poll() is None
    t0 = time.monotonic()
    proc.send_signal(sig)
    _o, err = proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 10.0, err  # the acceptance's latency (≤ 10 s); measured < 1 s
    assert proc.returncode == code, err
    assert "--resume" in err.strip().splitlines()[-1]
    st = read(out / "index.h5")["status"]
    assert st[0].startswith(f"interrupted: {sig.name}") and st[1:] == ["pending", "pending"], st
    files = sorted((out / "points").glob("*.h5"))
    assert len(files) == 1  # no further point started
    assert fastdyn.load(files[0]).status.startswith(
        f"interrupted: {sig.name} during output times 1…129"
    )


def test_a_second_signal_ends_the_sweep_at_once(tmp_path):
    _path, out, proc = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 2.0  # the acceptance's latency (≤ 2 s)
    assert proc.returncode == 143
    assert len(list((out / "points").glob("*.h5"))) == 1


#: four points of a few seconds each, for two Dask worker processes
FOUR = """
[base]
model = "msfr"
task.n_tasks = 200_000
time.n_times = 400
solver.integrator = "rk4"
output.times_per_segment = 4
theory.level = "leading"

[grid]
task.psi0 = [100, 101, 102, 103]
"""


def test_after_a_signal_the_index_agrees_with_the_point_files(tmp_path):
    """With ``--scheduler processes``, SIGTERM to the sweep alone (its workers run on): once the
    executor has shut down, the index says for every point what its file says (a point a worker
    finished after the signal used to stay ``running`` in the index)."""
    path = write_sweep(tmp_path, FOUR)
    out = tmp_path / "out"
    env = dict(sub_env(), NUMBA_NUM_THREADS="2")
    proc = subprocess.Popen(
        [*FASTDYN, "sweep", str(path), "-o", str(out), "--scheduler", "processes", "--workers", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while len(list((out / "points").glob("*.h5"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _o, err = proc.communicate(timeout=180)
    assert proc.returncode == 143, err
    assert "CancelledError" not in err, err
    idx = read(out / "index.h5")
    for rel, status in zip(idx["path"], idx["status"], strict=True):
        f = out / rel
        if f.exists():
            assert status == fastdyn.load(f).status, (rel, status, fastdyn.load(f).status)
        else:
            assert status == "pending", (rel, status)


def _rows(path) -> int:
    """Rows of a point file being written (an SWMR read; 0 while unreadable)."""
    import h5py

    try:
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            return int(f["time"].shape[0])
    except (OSError, KeyError):
        return 0


def test_ctrl_c_on_a_dask_sweep_stops_its_points_cleanly(tmp_path):
    """Ctrl-C on ``--scheduler processes``: the terminal signals the whole process group, the
    Dask workers too. It printed tracebacks (or CancelledError) from the workers, which died
    mid-write, and left their points ``running`` in the index. Now the workers ignore the
    terminal's SIGINT, the sweep asks each to stop its point at the next chunk boundary: exit
    130, no traceback, and every row of the index is complete, pending or interrupted, as its
    point file says (pending: no file)."""
    import os

    path = write_sweep(tmp_path, FOUR)
    out = tmp_path / "out"
    env = dict(sub_env(), NUMBA_NUM_THREADS="2")
    proc = subprocess.Popen(
        [*FASTDYN, "sweep", str(path), "-o", str(out), "--scheduler", "processes", "--workers", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300  # the workers compile the kernels first (a loaded machine)
    while sum(_rows(f) > 0 for f in (out / "points").glob("*.h5")) < 2:  # both points past it
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground group
    _o, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    for word in ("Traceback", "CancelledError", "KeyboardInterrupt"):
        assert word not in err, err
    assert err.strip().splitlines()[-1].startswith("interrupted; continue with"), err
    idx = read(out / "index.h5")
    stopped = 0
    for rel, status in zip(idx["path"], idx["status"], strict=True):
        f = out / rel
        if not f.exists():
            assert status == "pending", (rel, status)
            continue
        have = fastdyn.load(f).status
        if status == "complete":
            assert have == "complete", (rel, have)
        else:
            assert status.startswith("interrupted: SIGINT"), (rel, status)
            # a point still compiling when the workers ended keeps the file a kill leaves
            assert have == status or (have == "running" and "worker ended" in status), (rel, have)
            stopped += have == status
    assert stopped >= 1, idx["status"]  # the two running points stopped at a chunk boundary
