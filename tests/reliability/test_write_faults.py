"""Write failures never cost a flushed row: a write that fails at a random moment (EDQUOT, EIO,
ENOSPC, EFBIG, sometimes after a short write) while ``statvfs`` still reports free space, a
file-size limit (``ulimit -f``), and a disk that another process fills mid-run.

The failures come from ``faultfs/fault_write.c``, an LD_PRELOAD library built here with the
system C compiler: it fails the n-th ``write``/``pwrite`` to the run's files (and every one after
it; on odd trials a write that extends the file first writes half its bytes) and leaves
``statvfs`` and ``fallocate`` alone, as a network file system over its quota does. For every model, at random points drawn over the whole run (creation, appends,
checkpoints, the final close and the compaction): the run exits 0 with a complete file (a
failure in the compaction keeps the complete original) or 1 with one line and no traceback;
the file then holds a bit-identical prefix of the uninterrupted run, opens in plain h5py after
``fastdyn repair`` where the line says so, and ``--resume`` completes it bit-identically.

The file-size limit and the disk filled by another process are also met mid-run, for every model
(and msfr rk4 with wide rows): longer runs whose rows outgrow their first chunks, so the file
grows again after rows were flushed; the run exits 1 with one line, keeping some rows but not all.
"""

from __future__ import annotations

import errno
import os
import random
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5 import undo
from fastdyn.h5.writer import RunWriter

from .conftest import assert_same_series
from .test_every_model import CASES, _args

ROOT = Path(__file__).resolve().parents[2]
SHIM = Path(__file__).with_name("faultfs") / "fault_write.c"
_MAIN = "import sys; from fastdyn.cli import main; main(sys.argv[1:])"
SEED = os.environ.get("FASTDYN_FAULT_SEED", "20261205")
#: fault points per model (7 models: 21 in all), and the errors they cycle through
POINTS = 3
ERRORS = (errno.EDQUOT, errno.EIO, errno.ENOSPC, errno.EFBIG)


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    """The fault library, compiled once (the CI machine has ``cc``, as every Linux build host)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "the write-fault tests need a C compiler (cc) to build faultfs/fault_write.c"
    out = tmp_path_factory.mktemp("faultfs") / "fault_write.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(SHIM), "-ldl"], check=True)
    return out


def _env(shim: Path | None = None, **fault: str) -> dict[str, str]:
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    if shim is not None:
        env |= {"LD_PRELOAD": str(shim), "FAULT_MATCH": "run.h5", **fault}
    return env


def _popen(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _MAIN, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.fixture(scope="module")
def counted(shim, tmp_path_factory):
    """``get(model)``: (the uninterrupted run's file, the writes it made to its files)."""
    made: dict[str, tuple[Path, int]] = {}

    def get(model: str) -> tuple[Path, int]:
        if model not in made:
            d = tmp_path_factory.mktemp(f"ref-{model}")
            count = d / "writes"
            p = _popen(
                ["-q", "simulate", *_args(model), "-o", str(d / "run.h5")],
                _env(shim, FAULT_AT="0", FAULT_COUNT_FILE=str(count)),
            )
            _out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            made[model] = (d / "run.h5", int(count.read_text()))
        return made[model]

    return get


#: a run that dies (os._exit, as a kill -9) right after its 5th appended row set
_DIE = (
    "import os, sys, fastdyn.h5.writer as w; from fastdyn.cli import main\n"
    "orig = w.RunWriter.append\nn = [0]\n"
    "def append(self, *a, **k):\n    orig(self, *a, **k); n[0] += 1\n"
    "    if n[0] == 5: os._exit(9)\n"
    "w.RunWriter.append = append\nmain(sys.argv[1:])"
)


def _killed_after_5_appends(args: list[str], path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", _DIE, "-q", "simulate", *args, "-o", str(path)],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 9, r.stderr


def _temp_left(folder: Path) -> list[str]:
    return [
        p.name
        for p in folder.iterdir()
        if any(k in p.name for k in (".tmp-", ".resume-", ".compact-")) or p.name.endswith(".lock")
    ]


def _check_after_failure(rc: int, err: str, p: Path, ref: fastdyn.h5.Run) -> str:
    """The exit, the one line and the file after a failed run; returns what happened."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc == 0:  # a failure inside the compaction keeps the complete original
        assert not lines, err
        assert_same_series(ref, fastdyn.load(p))
        return "complete"
    assert rc == 1, (rc, err[-3000:])
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert f"cannot write {p}:" in lines[0], lines[0]
    assert not _temp_left(p.parent), _temp_left(p.parent)
    if not p.exists():
        assert "nothing was written" in lines[0], lines[0]
        return "nothing written"
    assert f"fastdyn simulate --resume {p}" in lines[0], lines[0]
    got = fastdyn.load(p)  # fastdyn reads it as it is
    n = len(got.time)
    for k in got.series:  # a bit-identical prefix of the uninterrupted run
        if k in ref.series and got[k].shape[:1] == (n,) and ref[k].shape[:1] == ref.time.shape:
            assert np.array_equal(got[k], ref[k][:n], equal_nan=True), k
    if "fastdyn repair" in lines[0]:  # then plain h5py opens it, every row kept
        res = CliRunner().invoke(main, ["repair", str(p)])
        assert res.exit_code == 0 or "nothing to repair" in res.output, res.output
        with h5py.File(p, "r") as f:  # (a series may hold a row more than the rows all hold)
            assert f["time"].shape[0] >= n
        assert len(fastdyn.load(p).time) == n
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    if res.exit_code == 2 and "the run is complete" in res.output:  # failed in the last close
        assert_same_series(ref, fastdyn.load(p))
        return "complete, close failed"
    assert res.exit_code == 0, res.output
    assert_same_series(ref, fastdyn.load(p))
    assert not _temp_left(p.parent), _temp_left(p.parent)
    return f"{n} rows kept, resumed"


@pytest.mark.parametrize("model", sorted(CASES))
def test_writes_failing_at_random_points(model, shim, counted, tmp_path):
    ref_path, writes = counted(model)
    ref = fastdyn.load(ref_path)
    rng = random.Random(f"{model}:{SEED}")
    trials = []
    for i in range(POINTS):  # the points run side by side: two cores, mostly start-up time
        d = tmp_path / f"t{i}"
        d.mkdir()
        at, code = rng.randint(1, writes), ERRORS[(i + len(model)) % len(ERRORS)]
        fault = {"FAULT_AT": str(at), "FAULT_ERRNO": str(code), "FAULT_SHORT": str(i % 2)}
        args = ["-q", "simulate", *_args(model), "-o", str(d / "run.h5")]
        trials.append((d / "run.h5", fault, _popen(args, _env(shim, **fault))))
    for p, fault, proc in trials:
        _out, err = proc.communicate(timeout=300)
        what = _check_after_failure(proc.returncode, err, p, ref)
        print(
            model,
            f"write {fault['FAULT_AT']} of {writes}",
            errno.errorcode[int(fault["FAULT_ERRNO"])],
            what,
        )


def test_every_write_of_the_close_may_fail(shim, counted, tmp_path):
    """The close rewrites the root group (status, timings) in several places; a write failing
    between two of them once left a root group no reader opened (logistic, writes 435–438 of
    500: "incorrect metadata checksum"). With the resume state kept (no compaction after the
    close; msfr: the close is the same for every model), every one of the last 16 writes fails in turn, with every write after it (an I/O
    error: not even the old bytes go back): the undo journal (fastdyn.h5.undo) puts the file
    back as of its last flush before fastdyn reads it, and the checks of every other fault hold."""
    args = ["-q", "simulate", *_args("msfr"), "--set", "output.keep_checkpoint=true"]
    (tmp_path / "ref").mkdir()
    ref_path, count = tmp_path / "ref" / "run.h5", tmp_path / "writes"  # the shim counts run.h5
    proc = _popen(
        [*args, "-o", str(ref_path)], _env(shim, FAULT_AT="0", FAULT_COUNT_FILE=str(count))
    )
    assert proc.communicate(timeout=300) and proc.returncode == 0
    ref, writes = fastdyn.load(ref_path), int(count.read_text())
    assert writes > 100, writes  # creation, 15 appends with checkpoints, the close
    for at in range(writes - 15, writes + 1, 2):  # two at a time
        trials = []
        for k in (at, at + 1):
            d = tmp_path / f"w{k}"
            d.mkdir()
            fault = {"FAULT_AT": str(k), "FAULT_ERRNO": str(errno.EIO), "FAULT_SHORT": str(k % 2)}
            trials.append(
                (d / "run.h5", k, _popen([*args, "-o", str(d / "run.h5")], _env(shim, **fault)))
            )
        for p, k, proc in trials:
            _out, err = proc.communicate(timeout=300)
            print(f"write {k} of {writes}:", _check_after_failure(proc.returncode, err, p, ref))
            assert not (p.parent / f".{p.name}.undo").exists()


@pytest.mark.parametrize("model", sorted(CASES))
def test_a_file_size_limit(model, counted, tmp_path):
    """``ulimit -f`` at the 4 MiB reserve plus half the finished file, for every model: the
    writer sees the limit before a write would cross it (SIGXFSZ is ignored besides) and stops
    with exit 1 and one line, and --resume finishes once it is lifted. (These small runs
    allocate their chunks at the first append, so they stop there or at creation; a limit
    crossed after rows were flushed is ``test_a_file_size_limit_mid_run``.)"""
    from fastdyn.h5.writer import RESERVE

    ref, _writes = counted(model)
    limit = RESERVE + ref.stat().st_size // 2
    p = tmp_path / "run.h5"

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = _popen(["-q", "simulate", *_args(model), "-o", str(p)], _env(), preexec_fn=cap)
    _out, err = proc.communicate(timeout=300)
    assert "File too large" in err or proc.returncode == 0, err
    what = _check_after_failure(proc.returncode, err, p, fastdyn.load(ref))
    print(model, "ulimit -f", limit, what)
    assert proc.returncode == 1, what


#: runs whose rows outgrow the first chunk of every series (1024 rows), so that the file grows
#: again long after its first rows were flushed and a size limit or a full disk is met mid-run
#: (the small configs above hold at most 40 rows: every chunk is allocated at the first append,
#: and nothing grows after it). Every model's small config with 1150-1300 output times or save
#: steps and a checkpoint every few hundred steps, plus msfr rk4 with rows of 50 tracked tasks
#: (``test_disk_full.BIG``: chunks of 400 KiB, every 1024 of its 5000 rows)
_LONGER: dict[str, list[str]] = {
    "msfr": ["time.grid=linear", "time.t_max=16", "time.n_times=1300", "output.times_per_segment=100", "output.checkpoint_every=400 steps"],
    "msfr-attn": ["schedule.epochs=3000", "schedule.n_saves=3000", "output.checkpoint_every=1000 steps"],
    "attn-m": ["schedule.epochs=1300", "schedule.save_every=1", "output.checkpoint_every=400 steps"],
    "attn-s": ["schedule.epochs=1300", "schedule.save_every=1", "output.checkpoint_every=400 steps"],
    "mlp-cubic": ["schedule.epochs=1300", "schedule.save_every=1", "output.checkpoint_every=400 steps"],
    "msfr-h": ["time.n_times=1300", "output.times_per_segment=100", "output.checkpoint_every=400 steps"],
    "logistic": ["task.n_tasks=256", "time.n_times=1300", "output.times_per_segment=100", "output.checkpoint_every=400 steps"],
    "deep-linear": ["task.n_tasks=256", "time.n_times=1300", "output.times_per_segment=100", "output.checkpoint_every=400 steps"],
}  # fmt: skip
LONG_CASES = [*sorted(CASES), "msfr-rk4-wide"]


def _long_args(case: str) -> list[str]:
    if case == "msfr-rk4-wide":
        from .test_disk_full import BIG

        return BIG
    return _args(case) + [a for kv in _LONGER[case] for a in ("--set", kv)]


#: the run, printing the rows written after each appended row set, then "paused" after the
#: first append that reaches PAUSE rows (its first argument), where it waits for a line on stdin
#: (the rows are unchanged: the file is as without it)
_PAUSING = (
    "import sys, fastdyn.h5.writer as w; from fastdyn.cli import main\n"
    "pause = [int(sys.argv.pop(1))]\norig = w.RunWriter.append\n"
    "def append(self, *a, **k):\n"
    "    orig(self, *a, **k); print(self.n_rows, flush=True)\n"
    "    if 0 < pause[0] <= self.n_rows:\n"
    "        pause[0] = 0; print('paused', flush=True); sys.stdin.readline()\n"
    "w.RunWriter.append = append\nmain(sys.argv[1:])"
)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """``get(case)``: (the uninterrupted run's file, [(rows, file size) after each append]),
    made in this process (which also compiles the kernels that the resumes here use)."""
    made: dict[str, tuple[Path, list[tuple[int, int]]]] = {}

    def get(case: str) -> tuple[Path, list[tuple[int, int]]]:
        if case not in made:
            p = tmp_path_factory.mktemp(f"long-{case}") / "ref.h5"
            sizes: list[tuple[int, int]] = []
            orig = RunWriter.append

            def append(self, *a, **k):
                orig(self, *a, **k)
                sizes.append((self.n_rows, os.fstat(self._io.fd).st_size))

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(RunWriter, "append", append)
                res = CliRunner().invoke(main, ["-q", "simulate", *_long_args(case), "-o", str(p)])
            assert res.exit_code == 0, res.output
            (_, first), (rows, last) = sizes[0], sizes[-1]
            assert rows == len(fastdyn.load(p).time) > 1024 and last > first, sizes  # it grows
            made[case] = (p, sizes)
        return made[case]

    return get


def _kept(what: str, total: int) -> int:
    """The rows a failed run kept (``_check_after_failure``'s "N rows kept, resumed"): some,
    not all."""
    assert what.endswith(" rows kept, resumed"), what
    n = int(what.split()[0])
    assert 0 < n < total, what
    return n


@pytest.mark.parametrize("case", LONG_CASES)
def test_a_file_size_limit_mid_run(case, long_run, tmp_path):
    """``ulimit -f`` set before the run, crossed after rows were flushed, for every model: the
    limit is the writer's reserve plus the file's size halfway between its first append and its
    last, so the run meets it where a row set needs new chunks. Exit 1 and one line ("File too
    large"), the flushed rows kept, --resume bit-identical."""
    from fastdyn.h5.writer import RESERVE

    ref, sizes = long_run(case)
    limit = RESERVE + (sizes[0][1] + sizes[-1][1]) // 2
    p = tmp_path / "run.h5"

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = _popen(["-q", "simulate", *_long_args(case), "-o", str(p)], _env(), preexec_fn=cap)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "File too large" in err, (proc.returncode, err[-3000:])
    assert "raise the file-size limit (ulimit -f)" in err or "fastdyn repair" in err, err
    assert not out, out
    what = _check_after_failure(proc.returncode, err, p, fastdyn.load(ref))
    total = sizes[-1][0]
    print(f"{case}: ulimit -f {limit}: exit 1, {_kept(what, total)} of {total} rows kept")


@pytest.fixture
def small_fs(tmp_path):
    """A 16 MiB tmpfs (root only; skipped where it cannot be mounted)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the injected faults above still run")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(folder: Path) -> None:
    """Take every free byte of ``folder``'s file system, as another job would (whole pages down
    to the last one; a write that fits only in part is cut short, the next one fails)."""
    with open(folder / "filler", "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 16, 1 << 12):
            try:
                while True:
                    fh.write(bytes(size))
            except OSError:
                pass
    assert shutil.disk_usage(folder).free < 1 << 12


@pytest.mark.parametrize("case", LONG_CASES)
def test_a_disk_filled_by_another_process(case, long_run, small_fs, tmp_path):
    """Another process takes every free byte after a fifth of the rows were flushed (the run
    waits for it there), for every model: the run goes on inside the room it reserved
    (``fallocate``), then exits 1 with one line, the flushed rows kept, and --resume is
    bit-identical once that file is gone."""
    ref, sizes = long_run(case)
    total = sizes[-1][0]
    p = small_fs / "run.h5"
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSING, str(total // 5), "-q", "simulate", *_long_args(case), "-o", str(p)],
        cwd=ROOT, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = []
    for line in proc.stdout:  # the row sets it flushed, until it waits
        if line.strip() == "paused":
            break
        seen.append(int(line))
    else:
        raise AssertionError(f"the run never paused: rc={proc.wait()} {proc.stderr.read()[-3000:]}")
    try:
        _fill(small_fs)
    finally:  # (the run goes on even where the filling failed)
        out, err = proc.communicate("go\n", timeout=300)
    (small_fs / "filler").unlink()
    assert all(ln.isdigit() for ln in out.split()), out  # (only the rows it printed)
    assert proc.returncode == 1 and "No space left on device" in err, (proc.returncode, err[-3000:])
    what = _check_after_failure(proc.returncode, err, p, fastdyn.load(ref))
    kept = _kept(what, total)
    assert kept >= seen[-1], (kept, seen[-1])  # every row flushed before the disk filled
    print(f"{case}: disk filled after {seen[-1]} rows: exit 1, {kept} of {total} rows kept")


def test_resume_on_a_nearly_full_disk_leaves_the_file_untouched(small_fs, tmp_path):
    """``--resume`` on a file system with too little room for its copy refuses before touching
    the file (exit 1, one line), and finishes bit-identically once there is room."""
    args = _args("attn-m")
    ref = tmp_path / "ref.h5"
    assert CliRunner().invoke(main, ["-q", "simulate", *args, "-o", str(ref)]).exit_code == 0
    p = small_fs / "run.h5"
    _killed_after_5_appends(args, p)
    before = p.read_bytes()
    with open(small_fs / "filler", "wb") as fh:  # leave 64 KiB: room for the lock file only
        free = shutil.disk_usage(small_fs).free
        fh.write(b"\0" * max(0, free - (64 << 10)))
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"cannot write {p}: No space left on device" in lines[0], lines
    assert p.read_bytes() == before  # not a byte changed
    assert not _temp_left(small_fs), _temp_left(small_fs)
    (small_fs / "filler").unlink()
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    assert res.exit_code == 0, res.output
    assert_same_series(fastdyn.load(ref), fastdyn.load(p))


def test_a_close_cut_off_by_a_size_limit_leaves_the_rows(tmp_path, monkeypatch):
    """A close whose writes a file-size limit cuts off (the limit check before writing is
    bypassed here, as on a file system whose limit the writer cannot see): HDF5 rewrote headers
    and heaps in place before writing the new block they point to, which left a file that no
    reader opened; rewrites in place now wait for the flush's end, so it still loads."""
    from fastdyn.h5 import failstop
    from fastdyn.h5.writer import WriteFailed

    p = tmp_path / "run.h5"
    w = RunWriter(p, model="m", config_toml="", seed=0, series={"a": (3,), "b": ()})
    for i in range(40):
        w.append(np.array([float(i)]), {"a": np.full((1, 3), float(i)), "b": np.array([2.0 * i])})
    monkeypatch.setattr(failstop.FailStopFile, "reserve", lambda self, n: None)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    failstop.ignore_sigxfsz()
    resource.setrlimit(resource.RLIMIT_FSIZE, (p.stat().st_size + 1024, hard))
    try:
        with pytest.raises(WriteFailed, match="File too large"):
            w.close("complete")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    r = fastdyn.load(p)
    assert r.status == "running" and len(r.time) == 40 and r["b"][-1] == 78.0
    assert CliRunner().invoke(main, ["repair", str(p)]).exit_code == 0
    with h5py.File(p, "r") as f:  # then a plain reader
        assert f["time"].shape == (40,)


def test_resume_through_a_symlink_keeps_the_link_and_the_mode(tmp_path):
    """``--resume`` copies and renames the file the link points to, with its permission bits."""
    args = _args("attn-m")
    real = tmp_path / "data" / "run.h5"
    real.parent.mkdir()
    _killed_after_5_appends(args, real)
    real.chmod(0o600)
    link = tmp_path / "link.h5"
    link.symlink_to(real)
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(link)])
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and fastdyn.load(real).status == "complete"
    assert real.stat().st_mode & 0o777 == 0o600


#: ``fastdyn ARGS`` that stops before the close of a finished run until a line arrives on stdin
_PAUSE_BEFORE_CLOSE = (
    "import sys, fastdyn.h5.writer as w; from fastdyn.cli import main\n"
    "orig = w.RunWriter.close\n"
    "def close(self, status, *a, **k):\n"
    "    if status.startswith('complete') and self._f is not None:\n"
    "        print('paused', flush=True); sys.stdin.readline()\n"
    "    return orig(self, status, *a, **k)\n"
    "w.RunWriter.close = close\nmain(sys.argv[1:])"
)


@pytest.mark.parametrize("model", ["msfr", "attn-m", "logistic"])
def test_a_disk_filled_before_the_close_still_closes(model, small_fs, tmp_path):
    """Another process takes every free byte after the last row was flushed: the close's undo
    journal goes inside the room the run reserved (the copy beside the file, refused by the full
    disk, is not needed), so the run ends complete, exit 0, with every row (it once exited 1,
    status running: the journal needed room outside the reservation)."""
    p = small_fs / "run.h5"
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSE_BEFORE_CLOSE, "-q", "simulate", *_args(model), "-o", str(p)],
        cwd=ROOT, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline()
    assert line.strip() == "paused", (
        line,
        proc.poll(),
        proc.stderr.read()[-3000:] if proc.poll() is not None else "",
    )
    try:
        _fill(small_fs)
    finally:
        out, err = proc.communicate("go\n", timeout=300)
    (small_fs / "filler").unlink()
    assert proc.returncode == 0 and not err.strip(), (proc.returncode, err[-3000:])
    ref = tmp_path / "ref.h5"
    assert (
        CliRunner().invoke(main, ["-q", "simulate", *_args(model), "-o", str(ref)]).exit_code == 0
    )
    got = fastdyn.load(p)
    assert got.status == "complete" and not undo.pending(p)
    assert_same_series(fastdyn.load(ref), got)
