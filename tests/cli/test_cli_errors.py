"""User errors: exit code 2, one line naming the field and what is allowed, no traceback, no file."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from fastdyn.cli import main


def _run(args, tmp_path):
    out = tmp_path / "out.h5"
    res = CliRunner().invoke(main, ["simulate", *args, "-o", str(out)], catch_exceptions=False)
    return res, out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "task.bogus=1"], "task.bogus: unknown key; allowed in [task]: n_tasks"),
        (["--set", "task.n_task=5"], "task.n_task: unknown key (did you mean task.n_tasks?)"),
        (["--set", "solver.integrater=rk4"], "unknown key (did you mean solver.integrator?)"),
        (
            ["--set", "attention.H=5"],
            "attention: unknown key for model 'msfr' ([attention] belongs to model attn-m, "
            "attn-s, mlp-cubic, msfr-attn: set model to one of them)",
        ),
        (["quickstrat"], "config 'quickstrat': no such file or preset (did you mean quickstart?)"),
        (["--set", "task.n_tasks=0"], "task.n_tasks: must be an integer ≥ 1"),
        (["--set", "task.n_tasks=-3"], "task.n_tasks"),
        (["--set", "task.alpha=nan"], "task.alpha: must be a finite number"),
        (["--set", "init.scale=1e400"], "init.scale"),
        (["--set", "task.psi0=0.2"], "task.psi0: must be a finite number ≥ 1"),
        (
            ["--set", "solver.integrator=euler"],
            "solver.integrator: must be one of 'dopri5', 'rk4', 'gd', 'none'",
        ),
        (
            ["--set", "time.grid=explicit", "--set", "time.times=[3.0, 2.0]"],
            "time.times: must be strictly increasing",
        ),
        (["--set", "time.t_min=10", "--set", "time.t_max=1"], "time.t_min: must be < time.t_max"),
        (["--set", "nokey"], "--set nokey: must be key=value"),
        (["--threads", "0"], "--threads: must be between 1"),
        (["--progress-every", "0"], "--progress-every: must be a number of seconds > 0"),
        (["no_such_preset"], "no such file or preset"),
        (
            ["--set", "task.x_dist=gaussian"],
            "task.x_dist: 'gaussian' is not modelled by model = 'msfr'",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_file(args, needle, tmp_path):
    res, out = _run(args, tmp_path)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output
    assert "Traceback" not in res.output
    assert not out.exists()


def test_malformed_toml(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[task\nn_tasks = 3\n")
    res, out = _run([str(cfg)], tmp_path)
    assert res.exit_code == 2 and "malformed TOML" in res.output and not out.exists()


def test_unwritable_output_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = CliRunner().invoke(
        main, ["simulate", "--set", "task.n_tasks=10", "-o", str(blocker / "x.h5")]
    )
    assert res.exit_code == 2 and "--output" in res.output


def test_existing_output_is_not_overwritten_without_flag(tmp_path):
    out = tmp_path / "o.h5"
    out.write_bytes(b"keep me")
    res = CliRunner().invoke(main, ["simulate", "--set", "task.n_tasks=10", "-o", str(out)])
    assert res.exit_code == 2 and "--overwrite" in res.output
    assert out.read_bytes() == b"keep me"


def test_real_entry_point_prints_no_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastdyn",
            "simulate",
            "--set",
            "task.n_tasks=0",
            "-o",
            str(tmp_path / "x.h5"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "task.n_tasks" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.skipif(
    not __import__("os").path.isdir("/sys/kernel"),
    reason="needs sysfs, where even root cannot create files",
)
def test_an_output_where_files_cannot_be_created_is_one_line():
    """Permission bits say root may write /sys; the file system says no (issue 17)."""
    res = CliRunner().invoke(main, ["simulate", "quickstart", "--set", "task.n_tasks=1000", "--set", "output.track=[1]", "-o", "/sys/x.h5"])  # fmt: skip
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--output /sys/x.h5: cannot create files in /sys" in lines[0], (
        res.output
    )


def test_run_repr_is_a_short_summary(tmp_path):
    import fastdyn

    out = tmp_path / "r.h5"
    res = CliRunner().invoke(main, ["-q", "simulate", "quickstart", "--set", "task.n_tasks=1024", "--set", "output.track=[1]", "--set", "solver.integrator=none", "--set", "theory.level=leading", "-o", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    text = repr(fastdyn.load(out))
    assert text.startswith(f"Run({str(out)!r}, model='msfr', status='complete', series: ")
    assert "theory/loss/test (129,)" in text and len(text) < 400 and "\n" not in text


def test_ctrl_c_before_the_run_starts_is_one_line_exit_130(monkeypatch, tmp_path):
    """A SIGINT during start-up (before the run installs its handlers) printed click's "Aborted!"
    with exit 1 (issue 22, item 7)."""
    import fastdyn.config

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fastdyn.config, "load_config", interrupted)
    res = CliRunner().invoke(main, ["simulate", "quickstart", "-o", str(tmp_path / "x.h5")])
    assert res.exit_code == 130, res.output
    assert res.output.strip() == "fastdyn: interrupted (SIGINT)"
    assert not (tmp_path / "x.h5").exists()


def test_closed_stdout_is_not_an_error():
    """`fastdyn warmup --list | head -0`: the reader has gone before fastdyn writes, so the write
    fails with EPIPE; fastdyn exits 141 (128 + SIGPIPE, what a shell reports) and says nothing
    (it said `fastdyn: failed: [Errno 32] Broken pipe`). The read end is closed before the child
    has imported anything, so its first write always meets a closed pipe."""
    p = subprocess.Popen(
        [sys.executable, "-m", "fastdyn", "warmup", "--list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141, err
    assert err == b""
