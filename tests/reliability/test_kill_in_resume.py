"""A kill -9 inside ``--resume`` loses nothing: the resume copies the file, changes the copy and
renames it into place only once it is an SWMR file (``RunWriter.reopen``), so a kill at any
moment leaves the original as it was, and a further ``--resume`` completes bit-identically.

Each trial starts ``--resume`` of a killed file in a subprocess that says when it enters
``RunWriter.reopen`` (the first write-open), and kills it 0–50 ms later: 35 trials over every
registered model, two at a time.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main

from .conftest import assert_same_series
from .test_every_model import _DIE, CASES, _args

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 5  # per model: 35 in all
SEED = os.environ.get("FASTDYN_KILL_SEED", "20261205")

_RESUME = textwrap.dedent(
    """
    import sys
    import fastdyn.h5.writer as w
    from fastdyn.cli import main
    orig = w.RunWriter.reopen.__func__
    def reopen(cls, *a, **k):
        sys.stdout.write("reopen\\n")
        sys.stdout.flush()
        return orig(cls, *a, **k)
    w.RunWriter.reopen = classmethod(reopen)
    main(["-q", "simulate", "--resume", sys.argv[1]])
    """
)


def _env() -> dict[str, str]:
    return dict(os.environ, NUMBA_NUM_THREADS="1")


def _killed_file(model: str, folder: Path) -> Path:
    p = folder / "killed.h5"
    proc = subprocess.run(
        [sys.executable, "-c", _DIE, str(p), "4", *_args(model)],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 9, proc.stderr
    return p


def _kill_inside_resume(path: Path, delay: float) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-c", _RESUME, str(path)], cwd=ROOT, env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline()
    if line.strip() != "reopen":  # it ended before reopening: say how
        _out, err = proc.communicate(timeout=300)
        raise AssertionError(f"rc={proc.returncode}: {err[-2000:]}")
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    return "killed" if proc.returncode == -signal.SIGKILL else f"finished rc={proc.returncode}"


@pytest.mark.parametrize("model", sorted(CASES))
def test_kill_inside_resume_then_resume_again(model, model_reference, tmp_path):
    ref = fastdyn.load(model_reference(model, _args(model)))
    template = _killed_file(model, tmp_path)
    rng = random.Random(f"{model}:{SEED}")
    delays = [rng.uniform(0.0, 0.05) for _ in range(TRIALS)]
    paths = []
    for i in range(TRIALS):
        d = tmp_path / f"t{i}"
        d.mkdir()
        shutil.copyfile(template, d / "run.h5")
        paths.append(d / "run.h5")
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(_kill_inside_resume, paths, delays))
    for p, delay, what in zip(paths, delays, outcomes, strict=True):
        res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
        if what != "killed" and res.exit_code == 2 and "the run is complete" in res.output:
            pass  # the resume finished before the kill landed
        else:
            assert res.exit_code == 0, (what, delay, res.output)
        assert_same_series(ref, fastdyn.load(p))
        left = [q.name for q in p.parent.iterdir() if q.name != "run.h5"]
        assert not left, left  # the killed resume's copy and lock are gone
        print(model, f"kill {delay * 1e3:.1f} ms after reopen:", what)
