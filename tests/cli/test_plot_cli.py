"""``fastdyn plot --kind ...``: PNGs written for every kind; one-line exit-2 errors."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from tests.analysis.test_compare import EX, grid_runs, plateau_power
from tests.analysis.test_load import make_run


def plot(*args):
    return CliRunner().invoke(main, ["plot", *map(str, args)])


def png_ok(path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.fixture
def msfr_file(tmp_path):
    t = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 200)])
    L = np.concatenate([[1.0], plateau_power(t[1:], EX.time)])
    idx = np.array([1, 10])
    f = np.outer(t**2 / (t**2 + 1e4), idx.astype(float) ** -0.25)
    return make_run(tmp_path / "m.h5", t, {"loss/test": L, "theory/loss/test": L, "tasks/f": f},
                    static={"tasks/index": idx, "tasks/emergence": np.array([100.0, 100.0])})  # fmt: skip


@pytest.mark.parametrize("kind", ["loss", "scaling", "tasks"])
def test_kinds_on_one_file(msfr_file, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    res = plot(msfr_file, "-o", out, "--kind", kind, "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    png_ok(out)


def test_scaling_scan_and_frontier(tmp_path):
    Ds = np.geomspace(10, 1e5, 13).round().astype(int)
    files = [r.path for r in grid_runs(tmp_path, Ds)]
    res = plot(*files, "-o", tmp_path / "f.png", "--kind", "frontier", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    png_ok(tmp_path / "f.png")
    res = plot(*files[:6], "-o", tmp_path / "d.png", "--kind", "scaling", "--x", "model_size")
    assert res.exit_code == 0, res.output
    png_ok(tmp_path / "d.png")


def test_weights(tmp_path):
    t = np.geomspace(1e-2, 1e3, 30)
    cfg = {"model": "attn_s", "data": {"D": 2, "N": 31, "spectrum": "linear"}}
    f = make_run(tmp_path / "w.h5", t, {"params/value_weights": np.tanh(t)[:, None],
                                        "params/Gamma_eig": np.tanh(t[:, None] / [1, 2])},
                 model="attn_s", config=cfg)  # fmt: skip
    res = plot(f, "-o", tmp_path / "w.png", "--kind", "weights")
    assert res.exit_code == 0, res.output
    png_ok(tmp_path / "w.png")


def one_error_line(res, needle):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in res.output, res.output


def test_errors(msfr_file, tmp_path):
    out = tmp_path / "x.png"
    one_error_line(plot(msfr_file, "-o", out, "--kind", "weights"), "no weight snapshots")
    one_error_line(plot(msfr_file, "-o", out, "--y", "loss/nope"), "--y loss/nope")
    one_error_line(
        plot(msfr_file, "-o", out, "--kind", "scaling", "--y", "loss/nope"), "--y loss/nope"
    )
    one_error_line(plot(msfr_file, "-o", out, "--kind", "frontier"), "at least 3")
    t = np.geomspace(1e-2, 1e6, 100)
    run = make_run(tmp_path / "r.h5", t, {"loss/test": plateau_power(t, 0.5)}, status="running")
    one_error_line(plot(run, "-o", out, "--kind", "scaling"), "still running")
    res = plot(run, "-o", out, "--kind", "scaling", "--allow-running", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    res = plot(run, "-o", tmp_path / "loss.png")  # loss curves of a running run need no flag
    assert res.exit_code == 0, res.output
    # a run killed before its first row: said so, not matplotlib's "cannot be log-scaled"
    e = np.empty(0)
    none = make_run(tmp_path / "e.h5", e, {"loss/test": e}, status="interrupted")
    one_error_line(plot(none, "-o", tmp_path / "e.png"), "no rows written yet (status interrupted)")
    assert not (tmp_path / "e.png").exists()
    assert not (tmp_path / "never.png").exists()
