"""``fastdyn validate SWEEP``: the law column against docs/theory.md typed in by hand
(tests/reference/msfr_law_reference.py), the fit column against ``fastdyn fit``, the CSV and the
figure, and the user errors (one line, exit 2).

Tiny closed-form sweeps (``solver.integrator = "none"``, 10^5 tasks, 96 times): a second each.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from tests.reference.msfr_law_reference import local_law, regime_law

BASE = """
[base]
model = "msfr"
task.n_tasks = 100000
task.psi0 = 100
init.scale = 1e-3
time.t_min = 1e-2
time.t_max = 1e12
time.n_times = 96
solver.integrator = "none"
theory.level = "first_order"
output.track = []
"""
#: α × γ across both regimes: γ = -0.25 puts the fitted tasks at Λ_s ≫ 1, γ = 0.25 at Λ_s ≪ 1
GRID = BASE + "[grid]\ntask.alpha = [2.5, 3.0]\ntask.gamma = [-0.25, 0.25]\n"
#: exponential strengths Λ_s = e^-(s−1)/s0: a named family, compared with its local law
FAMILY = (
    BASE.replace('output.track = []', 'output.track = []\ntask.alpha = 2.0\n'
                 'task.strength_law = "exponential"')
    + "[grid]\ntask.strength_decay = [3000, 10000]\n"
)  # fmt: skip


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def run_sweep(tmp: Path, text: str, name: str) -> Path:
    f = tmp / f"{name}.toml"
    f.write_text(text)
    res = cli("-q", "sweep", f, "-o", tmp / name)
    assert res.exit_code == 0, res.output
    return tmp / name


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    return run_sweep(tmp_path_factory.mktemp("grid"), GRID, "grid")


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> Path:
    return run_sweep(tmp_path_factory.mktemp("family"), FAMILY, "family")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(v: str) -> float:
    return float(v) if v else math.nan


def test_table_csv_and_law_against_docs_formulas(grid, tmp_path):
    out = tmp_path / "map.png"
    res = cli("validate", grid, "--bootstrap", 200, "-o", out)
    assert res.exit_code == 0, res.output
    assert "holds where |fit − law| ≤ 1 × the CI half-width" in res.output
    rows = read_csv(grid / "validate.csv")  # the default CSV sits beside the index
    assert [r["point"] for r in rows] == ["p0000", "p0001", "p0002", "p0003"]
    assert [(float(r["task.alpha"]), float(r["task.gamma"])) for r in rows] == [
        (2.5, -0.25), (2.5, 0.25), (3.0, -0.25), (3.0, 0.25)]  # fmt: skip
    regimes = set()
    for r in rows:
        a, g = float(r["task.alpha"]), float(r["task.gamma"])
        assert r["series"] == "theory/loss/test"  # no simulation in the file: the closed form
        assert r["law_kind"] == "regime law"
        p, regime, tasks = regime_law(a, 0.0, g, 1.0, 100.0, 1e-3, 100_000, 100_000,
                                      num(r["window_t_lo"]), num(r["window_t_hi"]))  # fmt: skip
        # the same formula evaluated twice in double precision: equal to round-off
        assert num(r["law_p"]) == pytest.approx(p, rel=1e-12)
        assert r["regime"] == regime and (int(r["tasks_lo"]), int(r["tasks_hi"])) == tasks
        regimes.add(regime)
        d = num(r["fit_p"]) - num(r["law_p"])
        half = 0.5 * (num(r["ci_hi"]) - num(r["ci_lo"]))
        assert num(r["difference"]) == pytest.approx(d, rel=1e-12)
        assert num(r["diff_over_ci"]) == pytest.approx(d / half, rel=1e-12)
        assert r["verdict"] == ("holds" if abs(d / half) <= 1.0 else "breaks")
    assert regimes == {"small", "large"}  # the grid crosses both regimes
    # by hand at α = 2.5, γ = -0.25, Λ_s ≫ 1: η/κ = (2.5 − 0.5 − 1)/(2.5 − 0.75) = 4/7
    assert num(rows[0]["law_p"]) == pytest.approx(4 / 7, rel=1e-15)
    assert out.is_file() and out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"


def test_fit_column_is_fastdyn_fit(grid):
    """Each point's fit equals ``fastdyn fit`` of its file (same window, CI, seed)."""
    res = cli("validate", grid, "--bootstrap", 200, "--no-csv")
    assert res.exit_code == 0, res.output
    one = grid / "points" / "p0002.h5"
    fit = json.loads(cli("fit", one, "--y", "theory/loss/test", "--bootstrap", 200,
                         "--json").output)  # fmt: skip
    row = next(ln for ln in res.output.splitlines() if ln.split()[:2] == ["3", "-0.25"])
    assert f"{fit['exponent']:.4f}" in row and f"[{fit['ci'][0]:.4f}, {fit['ci'][1]:.4f}]" in row


def test_threshold_option_changes_the_verdicts(grid, tmp_path):
    loose = tmp_path / "loose.csv"
    assert (
        cli("validate", grid, "--bootstrap", 200, "--threshold", 1e6, "--csv", loose).exit_code == 0
    )
    rows = read_csv(loose)
    assert {r["verdict"] for r in rows} == {"holds"} and {r["threshold"] for r in rows} == {
        "1000000.0"
    }


def test_family_gets_its_local_law(family, tmp_path):
    out = tmp_path / "line.png"
    res = cli("validate", family / "index.h5", "--bootstrap", 200, "--csv", tmp_path / "f.csv",
              "-o", out)  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = read_csv(tmp_path / "f.csv")
    fitted = [r for r in rows if r["fit_p"]]
    assert fitted, rows
    s = np.arange(1, 100_001, dtype=float)
    for r in fitted:
        assert r["law_kind"] == "local law"
        lam = np.exp(-(s - 1) / float(r["task.strength_decay"]))
        p, tasks = local_law(2.0, 0.0, lam, 100.0, 1e-3, num(r["window_t_lo"]),
                             num(r["window_t_hi"]))  # fmt: skip
        assert (int(r["tasks_lo"]), int(r["tasks_hi"])) == tasks
        # fastdyn sums the tail T(s) by blocks of 1024, the reference by one cumsum: round-off
        assert num(r["law_p"]) == pytest.approx(p, rel=1e-9)
        # never the power law with parameters the file did not use (α = 2, γ = 0: p = 0.5); the
        # local law over the early tasks (Λ_s ≈ 1) is close to it, 3.6e-4 off at s0 = 3000
        assert abs(num(r["law_p"]) - 0.5) > 1e-4
    assert out.is_file() and out.read_bytes()[:4] == b"\x89PNG"


def one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastdyn: error: "), res.output
    for n in needles:
        assert n in lines[0], lines[0]


def test_not_a_sweep(grid, tmp_path):
    one_line_error(cli("validate", tmp_path), "not a sweep output folder")
    one_line_error(cli("validate", grid / "points" / "p0000.h5"), "not a sweep index")
    one_line_error(cli("validate", tmp_path / "nope"), "no such sweep folder or index")


def test_a_point_not_finished(grid, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(grid, copy)
    (copy / "points" / "p0001.h5").unlink()
    sweep = tmp_path / "s.toml"
    sweep.write_text(GRID)
    assert cli("-q", "sweep", sweep, "-o", copy, "--reindex").exit_code == 0
    one_line_error(cli("validate", copy), "point p0001 is 'pending'", "--resume")


def test_no_point_with_a_law(tmp_path):
    """A sweep of a model that declares no scaling law (a tiny ATTN_M run, 21 epochs)."""
    fig1 = Path(__file__).resolve().parents[2] / "data" / "configs" / "icl_fig1.toml"
    sweep = tmp_path / "s.toml"
    sweep.write_text(f"[sweep]\nbase = {str(fig1)!r}\nsets = ['data.n_test=20', "
                     "'schedule.epochs=21', 'attention.H=2']\n[grid]\ndata.P = [40, 50]\n")  # fmt: skip
    assert cli("-q", "sweep", sweep, "-o", tmp_path / "out").exit_code == 0
    one_line_error(cli("validate", tmp_path / "out"), "no point has a scaling law",
                   "'attn-m' declares none")  # fmt: skip


def test_figure_needs_one_or_two_axes(tmp_path):
    sweep = (
        BASE
        + "[grid]\ntask.alpha = [2.5, 3.0]\ntask.gamma = [-0.25, 0.25]\ntask.beta = [0.0, 0.1]\n"
    )
    out = run_sweep(tmp_path, sweep.replace("100000", "2000").replace("= 96", "= 16"), "three")
    one_line_error(cli("validate", out, "--bootstrap", 0, "-o", tmp_path / "m.png"),
                   "one or two grid axes", "the sweep has 3")  # fmt: skip
    one_line_error(cli("validate", out, "-o", tmp_path / "m.txt"), "must be .png, .pdf or .svg")


def test_shipped_law_map_crosses_both_regimes():
    """data/sweeps/law_map.toml: an α × γ grid of ≥ 6 points with (3, 0, −0.5), Λ0 = 1, so that
    γ < 0 puts the tasks s ≥ 4 at Λ_s = s^-γ ≥ 2 (Λ_s ≫ 1) and γ > 0 at Λ_s ≤ 1/2 (Λ_s ≪ 1)."""
    import tomllib

    from fastdyn.sweep import load

    root = Path(__file__).resolve().parents[2] / "data" / "sweeps"
    pts = load(root / "law_map.toml").points()
    cfgs = [tomllib.loads(p.config_toml)["task"] for p in pts]
    grid = {(c["alpha"], c["beta"], c["gamma"]) for c in cfgs}
    assert len(pts) >= 6 and (3.0, 0.0, -0.5) in grid
    assert {c["strength0"] for c in cfgs} == {1.0}
    assert min(g for *_, g in grid) < 0 < max(g for *_, g in grid)
    # the law there by hand (Λ_s ≫ 1): η/κ_t = (3 − 1 − 1)/(3 + 0 − 1.5) = 2/3
    p, regime, _ = regime_law(3.0, 0.0, -0.5, 1.0, 100.0, 1e-3, 10_000, 10_000, 10.0, 1e3)
    assert regime == "large" and p == pytest.approx(2 / 3, rel=1e-15)
