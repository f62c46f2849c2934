"""A run killed inside its close, tearing a rewrite of the root group (a file no reader opens
without its undo journal): readers show it as of its last flush and never write it, on a
read-only place and two at a time too; a damaged, emptied, missing or bogus ``.NAME.undo``
costs nothing (the copy inside the file takes the close back); ``repair`` and ``--resume`` put
it back on the disk. The torn file is made once, by a real run (every later case copies it)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fastdyn
from fastdyn.h5 import undo

from .test_every_model import _args

ROOT = Path(__file__).resolve().parents[2]
RO_SHIM = Path(__file__).with_name("faultfs") / "read_only.c"
#: the run dies (as kill -9) in the middle of the 3rd in-place rewrite of its close's first
#: journaled flush, half of it written: without its journal the root attributes do not read
#: ("incorrect metadata checksum"; the 1st rewrite alone leaves a file that reads)
_DIE_IN_CLOSE = """
import os, sys
import fastdyn.h5.failstop as fs
from fastdyn.cli import main
orig, seen = fs.FailStopFile._put, [0]
def _put(self, at, data):
    if self.journal is not None and at < self._base:
        seen[0] += 1
        if seen[0] == 3:
            os.pwrite(self.fd, bytes(data)[: len(data) // 2], at)
            os._exit(9)
    return orig(self, at, data)
fs.FailStopFile._put = _put
main(sys.argv[1:])
"""
READERS = ("load", "inspect", "fit", "plot")


def _env(**kw: str) -> dict[str, str]:
    return dict(os.environ, NUMBA_NUM_THREADS="1", **kw)


def _run(args: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fastdyn", *args],
        capture_output=True, text=True, env=_env(**env), timeout=timeout, cwd=ROOT,
    )  # fmt: skip


def _reader(cmd: str, p: Path, **env: str) -> subprocess.CompletedProcess:
    if cmd == "load":
        code = "import sys, fastdyn; r = fastdyn.load(sys.argv[1]); print(r.status, len(r.time))"
        return subprocess.run(
            [sys.executable, "-c", code, str(p)],
            capture_output=True, text=True, env=_env(**env), timeout=120, cwd=ROOT,
        )  # fmt: skip
    args = {
        "inspect": ["inspect", str(p)],
        "fit": ["fit", "--allow-running", "--window", "all", "--bootstrap", "0", str(p)],
        "plot": [
            "plot",
            "--allow-running",
            str(p),
            "-o",
            f"/tmp/fastdyn-journal-{os.getpid()}.png",
        ],
    }[cmd]
    return _run(args, **env)


def _state(p: Path) -> tuple[str, int]:
    return hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns


@pytest.fixture(scope="module")
def torn(tmp_path_factory):
    """(the torn file with both journal copies, its uninterrupted reference)."""
    d = tmp_path_factory.mktemp("torn")
    args = ["-q", "simulate", *_args("msfr")]
    ref = d / "ref.h5"
    assert _run([*args, "-o", str(ref)], 600).returncode == 0
    p = d / "run.h5"
    proc = subprocess.run(
        [sys.executable, "-c", _DIE_IN_CLOSE, *args, "-o", str(p)],
        capture_output=True, text=True, env=_env(), timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 9, proc.stderr
    assert undo.journal_path(p).exists()
    return p, fastdyn.load(ref)


def _copy(torn, d: Path, journal: bool = True) -> Path:
    d.mkdir()
    src, _ = torn
    shutil.copy2(src, d / "run.h5")
    if journal:
        shutil.copy2(undo.journal_path(src), undo.journal_path(d / "run.h5"))
    return d / "run.h5"


def _as_of_last_flush(r: fastdyn.h5.Run, ref: fastdyn.h5.Run) -> None:
    assert r.status == "running"
    assert len(r.time) == len(ref.time)  # every row was flushed before the close
    for k in r.series:
        assert np.array_equal(r[k], ref[k][: len(r[k])], equal_nan=True), k


def test_without_its_journal_the_torn_file_does_not_read(torn, tmp_path):
    """What the journal is for (the case below is not one a plain read gets through)."""
    p = _copy(torn, tmp_path / "bare", journal=False)
    fd = os.open(p, os.O_RDONLY)
    at = undo.find(fd, p).inside_at
    os.close(fd)
    os.truncate(p, at)  # the copy inside the file cut off too
    res = _reader("inspect", p)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"expected at {undo.journal_path(p)}" in res.stderr and "missing" in res.stderr


@pytest.mark.parametrize("cmd", READERS)
def test_readers_show_the_last_flush_and_leave_the_file_alone(torn, tmp_path, cmd):
    p = _copy(torn, tmp_path / "d")
    before, jbefore = _state(p), _state(undo.journal_path(p))
    res = _reader(cmd, p)
    assert res.returncode == 0, res.stderr
    assert _state(p) == before and _state(undo.journal_path(p)) == jbefore
    assert sorted(os.listdir(p.parent)) == [".run.h5.undo", "run.h5"]  # no lock file either
    if cmd == "load":
        _as_of_last_flush(fastdyn.load(p), torn[1])
        assert _state(p) == before


@pytest.fixture(scope="module")
def ro_shim(tmp_path_factory) -> Path:
    """``faultfs/read_only.c`` compiled: a read-only mount as libc shows it (the tests run as
    root, for whom permission bits stop no write, and a read-only bind mount needs privileges
    CI lacks)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "the read-only tests need a C compiler (cc) to build faultfs/read_only.c"
    out = tmp_path_factory.mktemp("rofs") / "read_only.so"
    subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(RO_SHIM), "-ldl"], check=True
    )
    return out


def test_on_a_read_only_place_every_reader_reads_and_repair_says_why(torn, tmp_path, ro_shim):
    p = _copy(torn, tmp_path / "ro")
    before = _state(p)
    ro = {"LD_PRELOAD": str(ro_shim), "RO_DIR": str(p.parent)}
    probe = subprocess.run(
        [sys.executable, "-c", f"open({str(p)!r}, 'r+b')"], capture_output=True, text=True,
        env=_env(**ro),
    )  # fmt: skip
    assert "Read-only file system" in probe.stderr  # the place is read-only to these processes
    for cmd in READERS:
        res = _reader(cmd, p, **ro)
        assert res.returncode == 0, (cmd, res.stderr)
    res = _run(["repair", str(p)], **ro)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "cannot repair here (Read-only file system)" in res.stderr
    assert _state(p) == before


_READ_MANY = """
import sys, fastdyn
for _ in range(int(sys.argv[2])):
    r = fastdyn.load(sys.argv[1])
    assert r.status == "running", r.status
print("ok")
"""


def test_two_readers_at_once(torn, tmp_path):
    """Two processes loading the file 25 times each, at once: never a "damaged file"."""
    p = _copy(torn, tmp_path / "two")
    before = _state(p)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _READ_MANY, str(p), "25"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=ROOT,
        )  # fmt: skip
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "ok", err
    assert _state(p) == before


def _damage(j: Path, how: str) -> None:
    blob = j.read_bytes()
    j.unlink()
    if how == "empty":
        j.write_bytes(b"")
    elif how == "truncated":
        j.write_bytes(blob[: len(blob) // 3])
    elif how == "bit-flipped":
        j.write_bytes(blob[:100] + bytes([blob[100] ^ 0x10]) + blob[101:])
    elif how == "fifo":
        os.mkfifo(j)
    elif how == "dev-zero":
        j.symlink_to("/dev/zero")
    elif how == "huge":
        with open(j, "wb") as fh:
            fh.truncate(1 << 40)
    # "missing": a file copied without it


DAMAGE = ("missing", "empty", "truncated", "bit-flipped", "fifo", "dev-zero", "huge")


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_journal_does_not_cost_the_file(torn, tmp_path, how):
    """inspect reads it as of its last flush (within seconds: a FIFO is never opened), repair
    puts that on the disk, and plain HDF5 then reads every row."""
    import h5py

    p = _copy(torn, tmp_path / how)
    _damage(undo.journal_path(p), how)
    res = _reader("inspect", p)
    assert res.returncode == 0 and re.search(r"status:\s+running\n", res.stdout), res.stderr
    res = _run(["repair", str(p)], timeout=60)
    assert res.returncode == 0, res.stderr
    assert not os.path.lexists(undo.journal_path(p)) and not undo.pending(p)
    with h5py.File(p, "r") as f:
        assert f["time"].shape[0] == len(torn[1].time)
    r = fastdyn.load(p)
    assert r.status.startswith("interrupted: the writing process was killed"), r.status
    assert len(r.time) == len(torn[1].time)
    for k in r.series:
        assert np.array_equal(r[k], torn[1][k][: len(r[k])], equal_nan=True), k


def test_resume_after_a_damaged_journal_completes_bit_identically(torn, tmp_path):
    p = _copy(torn, tmp_path / "resume")
    _damage(undo.journal_path(p), "bit-flipped")
    res = _run(["-q", "simulate", "--resume", str(p)], timeout=600)
    assert res.returncode == 0, res.stderr
    got, ref = fastdyn.load(p), torn[1]
    assert got.status == "complete" and sorted(got.series) == sorted(ref.series)
    for k in ref.series:
        assert np.array_equal(got[k], ref[k], equal_nan=True), k
    assert not os.path.lexists(undo.journal_path(p))
