"""Shared pieces of the reliability tests: one small MSFR config, its uninterrupted reference file
(made once per session, in a subprocess, which also fills the numba cache for the later ones) and
helpers to run the CLI and compare files series by series."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fastdyn

#: small, but long enough (≈ 1 s of kernels, 60 segments of 2 output times, a checkpoint after
#: each) that a signal sent after the file appears usually lands mid-run
MSFR = [
    "--set", "task.n_tasks=8192", "--set", "time.t_max=1e9", "--set", "time.n_times=120",
    "--set", "output.times_per_segment=2", "--set", "output.checkpoint_every=0",
    "--set", "output.keep_checkpoint=true",  # copies of the finished file are set back to running
    "--set", "theory.level=leading",
]  # fmt: skip

FASTDYN = [sys.executable, "-m", "fastdyn"]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    """Run ``fastdyn ARGS`` in a subprocess (numba threads: 1, for a quiet shared machine)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    return subprocess.run([*FASTDYN, *args], capture_output=True, text=True, env=env, **kw)


def popen(*args: str) -> subprocess.Popen:
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    return subprocess.Popen(
        [*FASTDYN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


#: ``fastdyn ARGS`` with every appended row set followed by a 50 ms pause, so that a signal sent
#: after the first rows lands mid-run however loaded the machine is (the rows are unchanged)
_SLOW = """
import sys, time
import fastdyn.h5.writer as w
from fastdyn.cli import main
orig = w.RunWriter.append
def append(self, *a, **k):
    orig(self, *a, **k)
    time.sleep(0.05)
w.RunWriter.append = append
main(sys.argv[1:])
"""


def popen_slow(*args: str) -> subprocess.Popen:
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-c", _SLOW, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_rows(path: Path, proc: subprocess.Popen, rows: int, limit: float = 120.0) -> None:
    """Until the running file ``path`` holds at least ``rows`` rows (read as an SWMR follower)."""
    import h5py

    wait_for(path, proc, limit)
    t0 = time.monotonic()
    while True:
        try:
            with h5py.File(path, "r", libver="latest", swmr=True) as f:
                if f["time"].shape[0] >= rows:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() - t0 > limit:
            raise AssertionError(f"{path}: fewer than {rows} rows: rc={proc.poll()}")
        time.sleep(0.01)


def wait_for(path: Path, proc: subprocess.Popen, limit: float = 60.0) -> None:
    """Until ``path`` exists (the writer renames it into place once it is an SWMR file)."""
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None or time.monotonic() - t0 > limit:
            raise AssertionError(
                f"{path} never appeared: rc={proc.poll()} {proc.stderr.read() if proc.stderr else ''}"
            )
        time.sleep(0.005)


def assert_same_series(ref: fastdyn.h5.Run, got: fastdyn.h5.Run) -> None:
    """Every series of ``ref`` is bit-identical in ``got`` (NaN = NaN), and none is missing."""
    assert sorted(ref.series) == sorted(got.series)
    for k in ref.series:
        a, b = ref[k], got[k]
        assert a.shape == b.shape, (k, a.shape, b.shape)
        assert np.array_equal(a, b, equal_nan=True), k


@pytest.fixture(scope="session")
def msfr_reference(tmp_path_factory) -> tuple[Path, float]:
    """(reference file, seconds from the file appearing to the process ending)."""
    p = tmp_path_factory.mktemp("ref") / "ref.h5"
    cli("-q", "simulate", *MSFR, "-o", str(p.with_name("warm.h5")))  # fills the numba cache
    proc = popen("-q", "simulate", *MSFR, "-o", str(p))
    wait_for(p, proc)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    r = fastdyn.load(p)
    assert r.status == "complete"
    return p, time.monotonic() - t0


@pytest.fixture(scope="session")
def model_reference(tmp_path_factory):
    """``get(model, args)``: the uninterrupted run of a small config, made once per session."""
    from click.testing import CliRunner

    from fastdyn.cli import main

    made: dict[str, Path] = {}

    def get(model: str, args: list[str]) -> Path:
        if model not in made:
            p = tmp_path_factory.mktemp("model_ref") / f"{model}.h5"
            res = CliRunner().invoke(main, ["-q", "simulate", *args, "-o", str(p)])
            assert res.exit_code == 0, res.output
            made[model] = p
        return made[model]

    return get
