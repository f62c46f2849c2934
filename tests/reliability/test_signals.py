"""kill -9 at random moments, SIGTERM and SIGINT (twice): the file stays readable and resumes to a
result bit-identical to an uninterrupted run (issue 6, acceptance 1 and 2)."""

from __future__ import annotations

import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.torn import read_rows
from fastdyn.h5.writer import read_checkpoint
from tests._child_events import CHILD, ChildEvents

from .conftest import MSFR, assert_same_series, popen, popen_slow, wait_for, wait_rows

#: rows per append of the MSFR runs (output.times_per_segment = 2 in conftest.MSFR)
APPEND_ROWS = 2


def _resume(path) -> None:
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(path)])
    assert res.exit_code == 0, res.output


def _kill(p, dt: float, ref) -> int:
    """Start a run into ``p``, kill -9 it ``dt`` s after its file appears; check the rows so far
    (an SWMR read, as a follower would; the kill may have torn the last chunk, whose flushed rows
    fastdyn's reader verifies: test_torn_chunk.py); return how many rows were flushed."""
    proc = popen("-q", "simulate", *MSFR, "-o", str(p))
    wait_for(p, proc)
    time.sleep(dt)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    with h5py.File(p, "r", libver="latest", swmr=True) as f:
        t = read_rows(f["time"])
        loss = read_rows(f["loss/test"])
    # an append writes every series, then flushes once; a kill inside that flush can leave some
    # series' new extent on disk and not others' (one CI run: time 78 rows, loss/test 76), so
    # they may differ by one append (APPEND_ROWS). Whatever is readable must be the reference's
    # rows; --resume cuts every series back to the checkpoint's rows
    assert abs(len(t) - len(loss)) <= APPEND_ROWS, (len(t), len(loss))
    np.testing.assert_array_equal(t, ref.time[: len(t)])
    np.testing.assert_array_equal(loss, ref["loss/test"][: len(loss)])
    return min(len(t), len(loss))


def _kill_and_resume(msfr_reference, tmp_path, n: int, seed: int) -> None:
    ref_path, duration = msfr_reference
    ref = fastdyn.load(ref_path)
    rng = np.random.default_rng(seed)
    moments = rng.uniform(0.0, 0.9 * duration, size=n)  # seconds after the file appears
    paths = [tmp_path / f"k{i}.h5" for i in range(n)]
    with ThreadPoolExecutor(2) as pool:  # two killed runs at a time (each runs 1 numba thread)
        rows = list(pool.map(lambda a: _kill(a[0], a[1], ref), zip(paths, moments, strict=True)))
    killed_mid_run = 0
    for p, n_rows in zip(paths, rows, strict=True):
        r = fastdyn.load(p)
        if r.status == "running":
            # a kill after the last row is flushed but before the status says complete is
            # legitimate (n == len): such a file must resume to complete like any other
            assert n_rows <= len(ref.time)
            killed_mid_run += n_rows < len(ref.time)
            _resume(p)
        r = fastdyn.load(p)
        assert r.status == "complete"
        assert_same_series(ref, r)
    assert (
        killed_mid_run >= 1
    )  # at least some kills landed mid-run (most do; timing is not asserted)


def test_sigkill_at_20_random_moments_leaves_a_readable_file_that_resumes_identically(
    msfr_reference, tmp_path
):
    """Acceptance 1: 20 random moments (each kill costs a process start, about 1.5 s)."""
    _kill_and_resume(msfr_reference, tmp_path, 20, 20261202)


def test_running_file_with_every_row_flushed_resumes_to_complete(msfr_reference, tmp_path):
    """The window the random kills above hit only by chance, made deterministic: every row is
    flushed but the status still says ``running`` (the kill landed before the final close)."""
    ref_path, _ = msfr_reference
    p = tmp_path / "late.h5"
    p.write_bytes(ref_path.read_bytes())
    with h5py.File(p, "r+") as f:
        assert f["time"].shape[0] == len(fastdyn.load(ref_path).time)
        f.attrs["status"] = "running"
    _resume(p)
    r = fastdyn.load(p)
    assert r.status == "complete"
    assert_same_series(fastdyn.load(ref_path), r)


def test_sigterm_interrupts_with_a_checkpoint_and_resumes_identically(msfr_reference, tmp_path):
    ref_path, _duration = msfr_reference
    p = tmp_path / "t.h5"
    proc = popen_slow("simulate", *MSFR, "-o", str(p))  # ≥ 3 s of 50 ms pauses: mid-run for sure
    wait_rows(p, proc, 20)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    r = fastdyn.load(p)
    assert proc.returncode == 143, err
    assert r.status.startswith("interrupted: SIGTERM"), r.status
    assert f"--resume {p}" in err
    with h5py.File(p, "r") as f:
        ck = read_checkpoint(f)
    assert ck is not None
    arrays, rows, seq = ck
    assert (
        rows == len(r.time) and 0 < rows < 121 and seq >= 2
    )  # checkpoint of the last chunk written
    _resume(p)
    assert_same_series(fastdyn.load(ref_path), fastdyn.load(p))


def test_a_group_sigint_under_timeout_is_one_clean_stop(msfr_reference, tmp_path):
    """Ctrl-C on a job run as ``timeout 600 fastdyn simulate …``: the whole process group gets
    SIGINT and ``timeout`` forwards it again (to the child and to the group). fastdyn stops once
    and cleanly: exit 130, the acknowledgement on stderr, a closed file with status
    ``interrupted`` that plain h5py opens; --resume then completes it bit-identically."""
    import os
    import shutil
    import subprocess
    import sys

    from .conftest import _SLOW

    timeout = shutil.which("timeout")
    assert timeout, "coreutils timeout is part of every Linux job environment"
    ref_path, _duration = msfr_reference
    p = tmp_path / "t.h5"
    proc = subprocess.Popen(
        [timeout, "600", sys.executable, "-c", _SLOW, "simulate", *MSFR, "-o", str(p)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, NUMBA_NUM_THREADS="1"),
    )  # fmt: skip
    wait_rows(p, proc, 10)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground group
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "SIGINT received" in err and "second" not in err, err
    with h5py.File(p, "r") as f:  # closed: no SWMR writer holds it
        assert str(f.attrs["status"]).startswith("interrupted: SIGINT"), f.attrs["status"]
    _resume(p)
    assert_same_series(fastdyn.load(ref_path), fastdyn.load(p))


def test_two_sigints_at_once_are_one_request(msfr_reference, tmp_path):
    """A group SIGINT and its forward (timeout, srun) arrive together: one clean stop, closed
    ``interrupted`` (plain h5py opens it), exit 130."""
    ref_path, _duration = msfr_reference
    p = tmp_path / "i.h5"
    proc = popen_slow("simulate", *MSFR, "-o", str(p))
    wait_rows(p, proc, 10)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)  # within SAME_REQUEST_S: the same request
    proc.communicate(timeout=60)
    assert proc.returncode == 130, proc.returncode
    with h5py.File(p, "r") as f:  # closed: no SWMR writer holds it
        assert str(f.attrs["status"]).startswith("interrupted: SIGINT"), f.attrs["status"]
    _resume(p)
    assert_same_series(fastdyn.load(ref_path), fastdyn.load(p))


#: ``fastdyn ARGS`` (:data:`.conftest._SLOW`'s 50 ms pause after each row set, event ``r``) with
#: a slow end after its command: event ``x`` then a 5 s pause, either in an atexit hook the
#: command registered (``atexit``: Python's own hooks, Dask's, h5py's run there) or in the
#: interpreter's teardown of the modules (``teardown``: numba's and llvmlite's take 50-200 ms,
#: after Python has put the default signal handlers back)
_SLOW_END = (
    CHILD
    + """
import atexit, sys, time, types
import fastdyn.h5.writer as w
from fastdyn.cli import main
WHERE = sys.argv[1]

class _SlowEnd:
    def __del__(self, write=_os.write, fd=_EVENT_FD, sleep=time.sleep):
        write(fd, b"x")
        sleep(5)

def slow_end(write=_os.write, fd=_EVENT_FD, sleep=time.sleep):
    write(fd, b"x")
    sleep(5)

orig = w.RunWriter.append
def append(self, *a, **k):
    orig(self, *a, **k)
    if WHERE == "atexit" and not hasattr(w, "_hooked"):
        w._hooked = atexit.register(slow_end)  # registered by the command, as modules do
    event(b"r")
    time.sleep(0.05)
w.RunWriter.append = append
if WHERE == "teardown":  # a module whose dict the teardown clears
    mod = types.ModuleType("_slow_end")
    mod.obj = _SlowEnd()
    sys.modules["_slow_end"] = mod
    del mod
main(sys.argv[2:])
"""
)


@pytest.mark.parametrize("where", ["atexit", "teardown"])
def test_a_second_sigint_while_the_process_ends_exits_130_in_one_line(
    msfr_reference, tmp_path, where
):
    """Ctrl-C twice: the first stops the run (closed ``interrupted``), the second lands after
    the command has finished, while the interpreter ends. It exited −2 (a death by SIGINT:
    Python had put the default handler back) or with a KeyboardInterrupt traceback; it ends with
    130, no traceback, and the file stays resumable."""
    import os
    import sys

    ref_path, _duration = msfr_reference
    p = tmp_path / "i.h5"
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    with ChildEvents() as ev:
        proc = ev.popen(
            [sys.executable, "-c", _SLOW_END, where, "simulate", *MSFR, "-o", str(p)], env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        ev.wait(b"r", 10)
        proc.send_signal(signal.SIGINT)
        ev.wait(b"x")  # the command has returned: the process is ending
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert [ln for ln in err.splitlines() if "SIGINT" in ln and "received" not in ln][-1:] in (
        [f"{p}: {fastdyn.load(p).status}"],
        ["fastdyn: SIGINT while exiting: ending now (the command had finished)"],
    ), err
    assert fastdyn.load(p).status.startswith("interrupted: SIGINT"), fastdyn.load(p).status
    _resume(p)
    assert_same_series(fastdyn.load(ref_path), fastdyn.load(p))
