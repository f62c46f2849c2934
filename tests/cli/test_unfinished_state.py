"""``fastdyn fit``/``plot`` and ``fastdyn inspect`` agree on an unfinished file: one function
(:func:`fastdyn.h5.repair.run_state`) decides between a live writer ("still running") and a
killed run (status still ``running``, no live writer). ``fit`` used to call a killed file
"still running" while ``inspect`` said killed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from tests.analysis.test_compare import plateau_power
from tests.analysis.test_load import make_run

ROOT = Path(__file__).resolve().parents[2]
KILLED = "killed (status still 'running', no live writer)"

#: a writer killed after its rows reached the disk: open flags set, status running, no lock
_DIE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from tests.analysis.test_compare import plateau_power
    from tests.analysis.test_load import make_run
    import fastdyn.h5.writer as w
    w.RunWriter.close = lambda self, *a, **k: os._exit(9)
    t = np.geomspace(1e-2, 1e6, 200)
    make_run(sys.argv[1], t, {"loss/test": plateau_power(t, 0.5)}, status="complete", rows_per_append=50)
    """
)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("killed") / "k.h5"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _DIE, str(p)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 9, r.stderr
    return p


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _error_line(res) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


def _state_line(path) -> str:
    res = _cli("inspect", path)
    assert res.exit_code == 0, res.output
    return next(ln for ln in res.output.splitlines() if ln.startswith("state:"))


def test_a_killed_file_is_killed_for_inspect_fit_and_plot(killed, tmp_path):
    assert KILLED in _state_line(killed) and "SWMR readers only" in _state_line(killed)
    for res in (
        _cli("fit", killed),
        _cli("plot", killed, "--kind", "scaling", "-o", tmp_path / "s.png"),
    ):
        line = _error_line(res)
        assert KILLED in line and "still running" not in line
        assert "--allow-running" in line and f"fastdyn simulate --resume {killed}" in line
    assert _cli("fit", killed, "--allow-running", "--bootstrap", 0).exit_code == 0
    from fastdyn.h5.repair import run_state

    assert run_state(killed, "running") == ("killed", None)


def test_a_live_writer_is_running_for_both(tmp_path):
    t = np.geomspace(1e-2, 1e6, 100)
    f = make_run(tmp_path / "r.h5", t, {"loss/test": plateau_power(t, 0.5)}, status="running")
    from fastdyn.h5.repair import run_state

    kind, who = run_state(f, "running")  # this process still holds the writer's lock
    assert kind == "running" and f"pid {os.getpid()}" in who
    assert f"being written by {who}" in _state_line(f)
    line = _error_line(_cli("fit", f))
    assert f"still running (being written by {who})" in line and "killed" not in line
