"""Theory-only runs (``solver.integrator = "none"``) and the shipped scans built on them: ``fit``
and ``plot`` default to the closed form ``theory/loss/test`` and say so (they exited 2, "none of
the default series", until ``--y theory/loss/test`` was given)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastdyn.cli import main

ROOT = Path(__file__).resolve().parents[2]
NOTE = "no simulated loss (theory only): using the closed form theory/loss/test"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def theory_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("th") / "th.h5"
    res = cli("simulate", "quickstart", "--set", "task.n_tasks=10000", "--set",
              "output.track=[1,10]", "--set", 'solver.integrator="none"', "-o", out)  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def d_scan(tmp_path_factory):
    """The shipped d_scan (its base, the closed form only) at 3 small model sizes."""
    d = tmp_path_factory.mktemp("scan")
    shutil.copy(ROOT / "data/sweeps/_scaling_base.toml", d)
    (d / "s.toml").write_text(
        '[sweep]\nbase = "_scaling_base.toml"\nsets = ["task.n_tasks=20000", "time.n_times=16"]\n'
        "[grid]\ntask.model_size = [100, 300, 1000]\n"
    )
    res = cli("sweep", d / "s.toml", "-o", d / "out")
    assert res.exit_code == 0, res.output
    return d / "out"


def test_fit_of_a_theory_only_file_defaults_to_the_closed_form(theory_run):
    res = cli("fit", theory_run, "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("th.h5: theory/loss/test vs time")
    assert NOTE in res.stderr
    d = json.loads(cli("fit", theory_run, "--bootstrap", 0, "--json").stdout)
    assert d["y"] == "theory/loss/test"
    # α = 2, γ = 0: p = η/κ_t = 1/2; the fit of the closed form is on it (measured 0.503)
    assert d["theory"] == pytest.approx(0.5, abs=1e-12) and abs(d["exponent"] - 0.5) < 0.01


def test_plot_of_a_theory_only_file_defaults_to_the_closed_form(theory_run, tmp_path):
    for kind in ("loss", "scaling"):
        res = cli("plot", theory_run, "--kind", kind, "--bootstrap", 0, "-o", tmp_path / "p.png")
        assert res.exit_code == 0, res.output
        assert NOTE in res.stderr and (tmp_path / "p.png").stat().st_size > 0


def test_a_theory_only_scan_fits_without_y(d_scan, tmp_path):
    res = cli("fit", d_scan, "--x", "model_size", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    assert "theory/loss/test (final) vs model_size, 3 runs" in res.stdout
    assert "3 files (p0000.h5, …): " + NOTE in res.stderr
    assert "p = 1.50000" in res.stdout  # η = α + 2γ − 1 = 1.5
    res = cli("plot", d_scan, "--kind", "scaling", "--x", "model_size", "--bootstrap", 0,
              "-o", tmp_path / "s.png")  # fmt: skip
    assert res.exit_code == 0, res.output


def test_a_file_with_neither_series_is_still_one_line(tmp_path):
    from tests.analysis.test_load import make_run

    make_run(tmp_path / "x.h5", [1.0, 2.0], {"other/thing": [1.0, 2.0]})
    res = cli("fit", tmp_path / "x.h5")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "nor their theory/…" in res.output


def test_a_closed_form_that_falls_to_1e_241_keeps_a_readable_axis(theory_run, tmp_path):
    """The closed form falls to ~1e-241 once every task is learned: the axis is clipped at
    1e-13 of the largest value and, since that clip, padded by 5 % of the clipped range at the
    top (autoscaling had padded it by 5 % of 241 decades, to 1e11)."""
    import numpy as np

    from fastdyn.analysis import plot
    from fastdyn.h5.reader import load

    run = load(theory_run)
    top = float(np.nanmax(run["theory/loss/test"]))
    fig = plot.plot_loss([run], tmp_path / "l.png")
    lo, hi = fig.axes[0].get_ylim()
    assert lo == pytest.approx(1e-13 * top) and top < hi < 10 * top
