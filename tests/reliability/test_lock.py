"""One writer per file (issue 22, acceptance 2): a second ``--resume`` (or ``--overwrite``) of a file
that a live process writes exits 2 at once naming the holder; the first finishes bit-identically;
the stale lock a kill -9 leaves does not block a later resume."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.lock import WriterBusy, WriterLock, lock_path

from .conftest import MSFR, assert_same_series

#: the reliability config, with more output segments so the first writer is still running
LONG = [*MSFR, "--set", "time.n_times=200"]

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
        if calls["n"] == 3:
            os._exit(9)
    w.RunWriter.append = append
    CliRunner().invoke(main, ["-q", "simulate", *sys.argv[2:], "-o", sys.argv[1]])
    """
)


#: a writer held after each appended segment while the file named by FASTDYN_TEST_HOLD exists
#: (at most 60 s), so it is certainly still running when the second writer tries, and finishes
#: at once when the test releases it (:func:`_finish`)
_SLOW = textwrap.dedent(
    """
    import os, sys, time
    import fastdyn.h5.writer as w
    from fastdyn.cli import main
    orig = w.RunWriter.append
    hold, t0 = os.environ["FASTDYN_TEST_HOLD"], time.monotonic()
    def append(self, *a, **k):
        orig(self, *a, **k)
        while os.path.exists(hold) and time.monotonic() - t0 < 60.0:
            time.sleep(0.01)
    w.RunWriter.append = append
    main(["-q", "simulate", *sys.argv[1:]], standalone_mode=True)
    """
)


def _slow(hold: Path, *args: str) -> subprocess.Popen:
    """A writer of ``args`` held at its appends until ``hold`` (created here) is removed."""
    hold.touch()
    env = dict(os.environ, NUMBA_NUM_THREADS="1", FASTDYN_TEST_HOLD=str(hold))
    return subprocess.Popen(
        [sys.executable, "-c", _SLOW, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(proc: subprocess.Popen, hold: Path) -> tuple[str, str]:
    """Release the held writer and wait for it."""
    hold.unlink()
    return proc.communicate(timeout=300)


def _wait_for_lock(p, proc) -> None:
    t0 = time.monotonic()
    while not (lock_path(p).exists() and lock_path(p).read_text().split()[:1] == [str(proc.pid)]):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < 120, "the first writer never took the lock"
        time.sleep(0.01)


def _wait_for_inode_lock(p, proc) -> None:
    """Until the file now at ``p`` carries the writer's name (``user.fastdyn.writer``, set right
    after its inode lock is taken): the resume has renamed its copy into place and locked it."""
    t0 = time.monotonic()
    while True:
        try:
            if str(proc.pid) in os.getxattr(p, "user.fastdyn.writer").decode():
                return
        except OSError as e:
            if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):  # no user xattrs here: a fixed wait
                time.sleep(1.0)
                return
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < 120, "the first writer never locked the file"
        time.sleep(0.01)


def _killed(path) -> None:
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", _DIE, str(path), *LONG],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 9, proc.stderr


def test_lock_names_the_holder_and_a_killed_holder_leaves_a_stale_lock(tmp_path):
    p = tmp_path / "x.h5"
    hold = "import sys, time; from fastdyn.h5.lock import WriterLock; WriterLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(p)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lock_path(p).read_text().split() == [str(holder.pid), socket.gethostname()]
        t0 = time.monotonic()
        with pytest.raises(
            WriterBusy, match=rf"being written by pid {holder.pid} on {socket.gethostname()}"
        ):
            WriterLock(p).acquire()
        assert time.monotonic() - t0 < 2.0  # the acceptance asks for ≤ 2 s; measured 1–3 ms
    finally:
        holder.kill()  # SIGKILL: the lock file stays, its flock goes with the process
        holder.wait()
    assert lock_path(p).exists()
    lock = WriterLock(p).acquire()  # the stale lock is taken over
    assert lock_path(p).read_text().split()[0] == str(os.getpid())
    again = WriterLock(p).acquire()  # re-entrant within one process
    again.release()
    assert lock_path(p).exists()
    lock.release()
    assert not lock_path(p).exists()


def test_second_resume_exits_2_at_once_and_the_first_finishes_identically(tmp_path):
    ref = tmp_path / "ref.h5"
    assert CliRunner().invoke(main, ["-q", "simulate", *LONG, "-o", str(ref)]).exit_code == 0
    p = tmp_path / "k.h5"
    _killed(p)
    assert lock_path(p).exists()  # stale: its holder died with os._exit, like a kill -9
    hold = tmp_path / "hold"
    first = _slow(hold, "--resume", str(p))
    _wait_for_lock(p, first)
    t1 = time.monotonic()
    second = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    elapsed = time.monotonic() - t1
    assert first.poll() is None, first.communicate()  # still writing (held until released)
    assert second.exit_code == 2, second.output
    lines = [ln for ln in second.output.splitlines() if ln.strip()]
    assert (
        len(lines) == 1
        and f"being written by pid {first.pid} on {socket.gethostname()}" in lines[0]
    ), second.output
    assert elapsed < 2.0, elapsed  # a latency the acceptance asks for (≤ 2 s); measured 1–3 ms
    _out, err = _finish(first, hold)
    assert first.returncode == 0, err
    assert_same_series(fastdyn.load(ref), fastdyn.load(p))
    assert not lock_path(p).exists()


def test_overwrite_of_a_file_being_written_exits_2(tmp_path):
    p = tmp_path / "w.h5"
    hold = tmp_path / "hold"
    first = _slow(hold, *LONG, "-o", str(p))
    _wait_for_lock(p, first)
    res = CliRunner().invoke(main, ["-q", "simulate", *LONG, "-o", str(p), "--overwrite"])
    assert first.poll() is None
    assert res.exit_code == 2 and f"being written by pid {first.pid}" in res.output, res.output
    _out, err = _finish(first, hold)
    assert first.returncode == 0, err
    assert fastdyn.load(p).status == "complete"


@pytest.mark.parametrize("way", ["symlink", "hard link", "deleted lock file"])
def test_a_second_writer_by_another_name_exits_2_naming_the_holder(way, tmp_path):
    """The lock follows the file: a second ``--resume`` through a symlink or a hard link to a
    running file, or after its lock file was deleted, exits 2 within 2 s naming the holder."""
    p = tmp_path / "k.h5"
    _killed(p)
    hold = tmp_path / "hold"
    first = _slow(hold, "--resume", str(p))
    _wait_for_lock(p, first)
    other = tmp_path / "other.h5"
    if way == "symlink":
        other.symlink_to(p)
    elif way == "hard link":
        _wait_for_inode_lock(p, first)  # the resume renamed its copy into place: link that one
        os.link(p, other)
    else:
        _wait_for_inode_lock(p, first)  # past the name lock: the file's own lock is held
        lock_path(p).unlink()
        other = p
    t1 = time.monotonic()
    second = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(other)])
    elapsed = time.monotonic() - t1
    assert first.poll() is None, first.communicate()
    assert second.exit_code == 2, second.output
    lines = [ln for ln in second.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"being written by pid {first.pid}" in lines[0], second.output
    assert elapsed < 2.0, elapsed  # a latency the acceptance asks for (≤ 2 s)
    _out, err = _finish(first, hold)
    assert first.returncode == 0, err
    assert fastdyn.load(p).status == "complete"


def _killed_in_compaction(p) -> None:
    """A run into ``p`` killed (os._exit) once its compaction copy is written, before the rename."""
    die = textwrap.dedent(
        """
        import os, sys
        import fastdyn.h5.compact as c
        from fastdyn.cli import main
        orig = c._copy
        def copy(src, dst, drop):
            orig(src, dst, drop)
            dst.flush()
            os._exit(9)  # the copy is written, not yet renamed over the original
        c._copy = copy
        main(["-q", "simulate", *sys.argv[1:]])
        """
    )
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-c", die, *MSFR, "--set", "output.keep_checkpoint=false", "-o", str(p)],
        capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 9, r.stderr


def test_a_kill_during_the_final_compaction_leaves_nothing_behind(tmp_path):
    """A writer killed while it rewrites the complete file without /checkpoint leaves its
    ``.NAME.compact-PID`` copy and its lock file; the file itself is the complete original, and
    the next command that takes its lock (here ``fastdyn repair``, which finds nothing to
    repair) removes both; ``inspect``, a reader, leaves them."""
    p = tmp_path / "c.h5"
    _killed_in_compaction(p)
    left = sorted(q.name for q in tmp_path.iterdir() if q.name != "c.h5")
    assert left == [f".c.h5.compact-{_pid_of(left)}", ".c.h5.lock"], left
    assert CliRunner().invoke(main, ["inspect", str(p)]).exit_code == 0
    assert len(list(tmp_path.iterdir())) == 3  # a reader takes no lock and removes nothing
    res = CliRunner().invoke(main, ["repair", str(p)])
    assert res.exit_code == 0 and "nothing to repair" in res.output, res.output
    assert sorted(q.name for q in tmp_path.iterdir()) == ["c.h5"]
    assert fastdyn.load(p).status == "complete"


def test_the_next_run_in_the_directory_removes_a_dead_writers_copies_only(tmp_path):
    """The copy a kill inside the compaction left stayed until the next command on that very
    file. The next writer into the same directory (here a new run of another file) removes the
    temporary copies whose maker is dead (its PID no live process, their file held by no
    writer), and never one whose maker lives."""
    p = tmp_path / "c.h5"
    _killed_in_compaction(p)
    dead = _pid_of([q.name for q in tmp_path.iterdir()])
    (tmp_path / f".gone.h5.tmp-{dead}").write_bytes(b"a new file never renamed into place")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        live_copy = tmp_path / f".other.h5.compact-{alive.pid}"
        live_copy.write_bytes(b"a compaction still running")
        res = CliRunner().invoke(main, ["-q", "simulate", *MSFR, "-o", str(tmp_path / "d.h5")])
        assert res.exit_code == 0, res.output
        left = sorted(q.name for q in tmp_path.iterdir() if q.name.startswith("."))
        assert left == [".c.h5.lock", live_copy.name], left
    finally:
        alive.kill()
        alive.wait()
    assert fastdyn.load(p).status == "complete"


def _pid_of(names: list[str]) -> str:
    return next((n.rsplit("-", 1)[-1] for n in names if ".compact-" in n), "?")
