"""Acceptance 5: `fastdyn fit` on the index file of the D scan reproduces the single-file fits.

The D scan is data/sweeps/d_scan.toml (α = 2, β = 0.3, γ = 0.25, closed form) scaled down to
N_s = 20 000 tasks and D = 30 … 3000 so that it runs in about a second."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.config.load import apply_sets
from fastdyn.sweep import load, read_index, run_sweep

D_SCAN = Path(__file__).resolve().parents[2] / "data" / "sweeps" / "d_scan.toml"
FIT = [
    "fit",
    "--x",
    "model_size",
    "--y",
    "theory/loss/test",
    "--json",
    "--bootstrap",
    "200",
    "--seed",
    "1",
]


def _d_scan(tmp_path: Path) -> Path:
    sw = load(D_SCAN)
    assert [k for axis in sw.axes for k, _ in axis] == ["task.model_size"]
    sw.base = apply_sets(sw.base, ["task.n_tasks=20000", "time.n_times=16"])
    sw.axes = [[("task.model_size", [30, 100, 300, 1000, 3000])]]
    res = run_sweep(sw, tmp_path / "d")
    assert res.counts() == {"complete": 5}
    return res.index


def _fit(args: list[str]) -> dict:
    r = CliRunner().invoke(main, [*FIT, *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _same_fit(a: dict, b: dict) -> None:
    for k in ("exponent", "stderr", "ci", "window", "theory", "difference"):
        assert a[k] == b[k], k
    assert a["x"] == b["x"] == "model_size"


def test_fit_of_index_files_equals_single_file_fit(tmp_path):
    index = _d_scan(tmp_path)
    files = sorted(str(p) for p in (index.parent / "points").glob("*.h5"))
    ref = _fit(files)
    via = _fit([str(p) for p in read_index(index)])
    _same_fit(ref, via)
    # the fit sees the scan: L(D) falls with D (theory exponent η = α + 2γ − 1 = 1.5)
    assert ref["exponent"] > 0 and ref["theory"] == 1.5


def test_fastdyn_fit_index(tmp_path):
    index = _d_scan(tmp_path)
    files = sorted(str(p) for p in (index.parent / "points").glob("*.h5"))
    _same_fit(_fit(files), _fit([str(index)]))
    _same_fit(_fit(files), _fit([str(index.parent)]))  # the sweep folder names its index


def test_load_many_reads_an_index_as_a_table(tmp_path):
    import fastdyn

    index = _d_scan(tmp_path)
    table = fastdyn.load_many(index)
    assert sorted(table.column("task.model_size")) == [30, 100, 300, 1000, 3000]
    assert [r.path for r in table.runs] == read_index(index)
    assert all(r.status == "complete" for r in table.runs)
