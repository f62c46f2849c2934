"""Progress for batch jobs (issue 17, acceptance 3): with stderr in a file, ``simulate`` writes a
progress line every ``--progress-every`` seconds, ``-q`` none, and a first SIGINT is acknowledged
at once, even while the main thread is inside a compiled kernel.

The runs are slowed down by a fixed pause after each appended row (or a compiled busy loop before
each chunk), so their length does not depend on how loaded the machine is; the rows are unchanged."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import fastdyn

#: small MSFR run: 171 rows (t = 0 and 170 log-spaced times), one row per segment
SMALL = ["--set", "task.n_tasks=4096", "--set", "time.t_max=1e9", "--set", "time.n_times=170",
         "--set", "output.times_per_segment=1", "--set", "theory.level=leading"]  # fmt: skip
ROWS = 171

#: ``fastdyn ARGS`` with a pause of PAUSE seconds after every appended row
_PAUSED = """
import sys, time
import fastdyn.h5.writer as w
from fastdyn.cli import main
pause = float(sys.argv[1])
orig = w.RunWriter.append
def append(self, *a, **k):
    orig(self, *a, **k)
    time.sleep(pause)
w.RunWriter.append = append
main(sys.argv[2:])
"""

#: ``fastdyn ARGS`` with a compiled (nogil) busy loop of SECONDS before every chunk: no Python
#: signal handler runs in the main thread meanwhile, as inside a long kernel
_SPIN = """
import sys, time
import numba
import fastdyn.drive.integrate as integ
from fastdyn.cli import main

@numba.njit(nogil=True, cache=False)
def spin(n):
    x = 1.0
    for i in range(n):
        x = x * 1.0000001 + 1e-12
    return x

spin(10)
t0 = time.perf_counter(); spin(10**7); per = (time.perf_counter() - t0) / 10**7
n = int(float(sys.argv[1]) / per)
orig = integ.advance_chunk
def advance_chunk(*a, **k):
    spin(n)
    return orig(*a, **k)
integ.advance_chunk = advance_chunk
main(sys.argv[2:])
"""

LINE = re.compile(
    r"^fastdyn: simulate: (\d+)/(\d+) rows written \(([0-9.]+)%\)(?:, t = (\S+))?, (\S+) rows/s,"
    r" elapsed [^,]+, ETA .+$"
)


def _start(script: str, arg: float, args: list[str], err: Path) -> subprocess.Popen:
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    with err.open("w") as fh:  # stderr is a file, as in a batch job
        return subprocess.Popen(
            [sys.executable, "-c", script, str(arg), *args],
            stdout=subprocess.DEVNULL, stderr=fh, env=env,
        )  # fmt: skip


def _wait_for(path: Path, proc: subprocess.Popen, limit: float = 600.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert proc.poll() is None and time.monotonic() - t0 < limit, f"{path} never appeared"
        time.sleep(0.01)


def test_a_batch_run_of_10_s_writes_progress_lines_that_match_the_file(tmp_path):
    out, err = tmp_path / "run.h5", tmp_path / "stderr.txt"
    t0 = time.monotonic()
    proc = _start(_PAUSED, 0.06, ["simulate", *SMALL, "-o", str(out), "--progress-every", "2"], err)
    assert proc.wait(timeout=900) == 0, err.read_text()
    took = time.monotonic() - t0
    assert took >= 10.0  # the run the acceptance asks for: ≥ 171 pauses of 60 ms, so always true
    lines = err.read_text().splitlines()
    assert lines[-1] == f"{out}: complete"  # the final status line stays last
    progress = [LINE.match(ln) for ln in lines[:-1]]
    assert all(progress), lines  # nothing else on stderr
    assert len(progress) >= 2, lines
    run = fastdyn.load(out)
    assert len(run.time) == ROWS
    rows = [int(m.group(1)) for m in progress]
    assert rows == sorted(rows) and rows[-1] > rows[0] and all(0 <= r <= ROWS for r in rows)
    for m in progress:
        n, total, pct, t = int(m.group(1)), int(m.group(2)), float(m.group(3)), m.group(4)
        assert total == ROWS
        assert abs(pct - 100 * n / ROWS) <= 0.051
        if n:  # the model time shown is the last written row's
            assert np.isclose(float(t), run.time[n - 1], rtol=1e-5, atol=0), (
                m.group(0),
                run.time[n - 1],
            )


def test_quiet_prints_nothing_not_even_for_a_signal(tmp_path):
    out, err = tmp_path / "q.h5", tmp_path / "stderr.txt"
    args = ["-q", "simulate", *SMALL, "-o", str(out), "--progress-every", "0.2"]
    proc = _start(_PAUSED, 0.03, args, err)
    _wait_for(out, proc)
    time.sleep(1.5)  # ≥ 7 intervals of 0.2 s, ≤ 50 of the 171 pauses of 30 ms
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    assert err.read_text() == ""
    assert fastdyn.load(out).status.startswith("interrupted: SIGINT")


def test_the_first_sigint_is_acknowledged_at_once_inside_a_kernel(tmp_path):
    out, err = tmp_path / "k.h5", tmp_path / "stderr.txt"
    proc = _start(_SPIN, 60.0, ["simulate", *SMALL, "-o", str(out)], err)  # 60 s in the first chunk
    _wait_for(out, proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    want = "fastdyn: SIGINT received: stopping at the next chunk boundary"
    while want not in err.read_text():
        # a latency the acceptance asks for ("at once"): the watcher thread writes it as the
        # signal arrives (measured ~1 ms); the main thread stays in the 60 s loop meanwhile
        assert time.monotonic() - t0 < 5.0, err.read_text()
        time.sleep(0.01)
    assert proc.poll() is None  # acknowledged while the kernel runs on
    proc.send_signal(signal.SIGINT)  # the second one ends it at once
    assert proc.wait(timeout=60) == 130
    assert err.read_text().splitlines() == [want + " (a second SIGINT/SIGTERM ends at once)"]
