"""Click's own usage errors (a value outside a choice, an unknown option, a missing argument)
read as every other mistake: one line naming the option and what is allowed, exit 2, no usage
block. ``fastdyn simulate --device gpu`` printed click's four lines."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fastdyn.cli import main


def _lines(res) -> list[str]:
    return [ln for ln in res.output.splitlines() if ln.strip()]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["simulate", "--device", "gpu"], "fastdyn: error: --device: 'gpu' is not one of 'cpu', 'cuda' (see `fastdyn simulate --help`)"),
        (["plot", "x.h5", "-o", "x.png", "--kind", "nope"], "fastdyn: error: --kind: 'nope' is not one of 'loss', 'scaling', 'frontier', 'tasks', 'weights' (see `fastdyn plot --help`)"),
        (["simulate", "--threads", "x"], "fastdyn: error: --threads: 'x' is not a valid integer (see `fastdyn simulate --help`)"),
        (["simulate", "--bogus"], "fastdyn: error: No such option '--bogus' (see `fastdyn simulate --help`)"),
        (["fit"], "fastdyn: error: Missing argument 'FILE|INDEX...' (see `fastdyn fit --help`)"),
        (["nosuchcommand"], "fastdyn: error: No such command 'nosuchcommand' (see `fastdyn --help`)"),
        (["theory", "exponents", "--bogus"], "fastdyn: error: No such option '--bogus' (see `fastdyn theory exponents --help`)"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line_exit_2(args, line):
    res = CliRunner().invoke(main, args, prog_name="fastdyn")
    assert res.exit_code == 2
    assert _lines(res) == [line]


@pytest.mark.parametrize("args", [[], ["theory"], ["simulate", "--help"]])
def test_help_is_still_shown_in_full(args):
    res = CliRunner().invoke(main, args, prog_name="fastdyn")
    assert res.output.startswith("Usage: fastdyn") and len(_lines(res)) > 5
    assert "error" not in res.output.splitlines()[0]


def test_help_says_missing_directories_are_created(tmp_path):
    text = " ".join(CliRunner().invoke(main, ["simulate", "--help"]).output.split())
    assert "missing parent directories are created" in text
    out = tmp_path / "new" / "deeper" / "x.h5"
    sets = ["task.n_tasks=10", "output.track=[1,2]", 'solver.integrator="none"', "time.n_times=8"]
    res = CliRunner().invoke(main, ["-q", "simulate", *[a for s in sets for a in ("--set", s)], "-o", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert out.is_file()
