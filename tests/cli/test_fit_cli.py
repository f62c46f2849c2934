"""``fastdyn fit``: exponent ± CI, window and theory; JSON; scans; frontier; one-line exit-2 errors."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from tests.analysis.test_compare import EX, grid_runs, plateau_power
from tests.analysis.test_load import make_run, msfr_config


def fit(*args):
    return CliRunner().invoke(main, ["fit", *map(str, args)])


@pytest.fixture
def msfr_file(tmp_path):
    t = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 300)])
    L = np.concatenate([[1.0], plateau_power(t[1:], EX.time)])
    return make_run(tmp_path / "msfr.h5", t, {"loss/test": L, "loss/train": 0.9 * L})


def one_error_line(res, needle):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output
    assert lines[0].startswith("fastdyn: error:") and "Traceback" not in res.output


def test_fit_prints_exponent_window_and_theory(msfr_file):
    res = fit(msfr_file, "--bootstrap", 200)
    assert res.exit_code == 0, res.output
    out = res.output
    assert f"p = {EX.time:.5f} ±" in out and "95% CI [" in out
    assert "window     t in [" in out and "(auto: local exponent" in out
    assert f"theory     p = {EX.time:.5f}" in out and "alpha=2, beta=0.3, gamma=0.25" in out
    assert "diff       +0.00000" in out or "diff       -0.00000" in out


def test_fit_json_has_exponent_ci_window_theory(msfr_file):
    res = fit(msfr_file, "--json", "--bootstrap", 100, "--y", "loss/train", "--window", "1e2:1e6")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["exponent"] == pytest.approx(EX.time, abs=1e-10)
    assert d["ci"][0] <= d["exponent"] <= d["ci"][1]
    assert 1e2 <= d["window"][0] < d["window"][1] <= 1e6 and d["window_mode"] == "given"
    assert d["theory"] == pytest.approx(EX.time) and abs(d["difference"]) < 1e-10
    assert d["y"] == "loss/train" and d["fit"]["bootstrap"] == 100


def test_fit_several_files_time_gives_one_result_each(msfr_file, tmp_path):
    t = np.geomspace(1e-2, 1e6, 200)
    other = make_run(tmp_path / "o.h5", t, {"loss/test": plateau_power(t, 0.4)}, model="attn_s",
                     config={"model": "attn_s"})  # fmt: skip
    res = fit(msfr_file, other, "--json", "--bootstrap", 0, "--offset")
    assert res.exit_code == 0, res.output
    a, b = json.loads(res.output)
    assert a["exponent"] == pytest.approx(EX.time, abs=1e-6)
    assert b["exponent"] == pytest.approx(0.4, abs=1e-6) and b["theory"] is None
    text = fit(msfr_file, other, "--bootstrap", 0).output
    assert "theory     none for this model/config" in text


def test_fit_model_size_scan_and_compute_frontier(tmp_path):
    Ds = np.geomspace(10, 1e5, 17).round().astype(int)
    runs = grid_runs(tmp_path, Ds)
    files = [r.path for r in runs]
    small = [r.path for r in runs if r.config["task"]["model_size"] <= 1000]
    res = fit(*small, "--x", "model_size", "--json", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    # final loss D^-1.5 + t_end^-b, t_end = 1e12: the D law within 0.3 % at D <= 1000
    d = json.loads(res.output)
    assert d["theory"] == pytest.approx(1.5) and d["exponent"] == pytest.approx(1.5, abs=0.005)
    assert d["window_mode"] == "all" and len(d["paths"]) == len(small)
    res = fit(*files, "--x", "compute", "--json", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["theory"] == pytest.approx(EX.compute) and abs(d["difference"]) < 0.01
    assert d["d_star_theory"] == pytest.approx(EX.d_star) and abs(d["d_star_difference"]) < 0.01
    text = fit(*files, "--x", "compute", "--bootstrap", 0).output
    assert "D*(C)      q = " in text and f"theory q = {EX.d_star:.5f}" in text


def test_warning_names_the_cutoff(tmp_path):
    t = np.geomspace(1e-2, 1e9, 300)
    f = make_run(tmp_path / "c.h5", t, {"loss/test": plateau_power(t, EX.time, t0=0.1)},
                 config=msfr_config(n_tasks=1000))  # fmt: skip
    res = fit(f, "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    assert "fastdyn: warning:" in res.output and "learned-task cutoff" in res.output


def test_missing_dataset(msfr_file):
    one_error_line(fit(msfr_file, "--y", "loss/nope"), "--y loss/nope")


def test_missing_file(tmp_path):
    one_error_line(fit(tmp_path / "nope.h5"), "no such file")


def test_wrong_file_type(tmp_path):
    txt = tmp_path / "notes.h5"
    txt.write_text("not hdf5 at all\n")
    one_error_line(fit(txt), "not a readable HDF5 file")
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    one_error_line(fit(plain), "not a fastdyn file")


def test_truncated_file(msfr_file):
    data = msfr_file.read_bytes()
    msfr_file.write_bytes(data[: len(data) // 2])
    res = fit(msfr_file)
    one_error_line(res, str(msfr_file))


def test_running_file_needs_allow_running(tmp_path):
    t = np.geomspace(1e-2, 1e6, 200)
    f = make_run(tmp_path / "r.h5", t, {"loss/test": plateau_power(t, EX.time)}, status="running",
                 rows_per_append=50)  # fmt: skip
    one_error_line(fit(f), "still running")
    res = fit(f, "--allow-running", "--json", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["exponent"] == pytest.approx(EX.time, abs=1e-10)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--window", "5"], "--window: must be auto, all or LO:HI"),
        (["--window", "1e6:1e2"], "--window: must have LO < HI"),
        (["--window", "a:b"], "--window: LO and HI must be numbers"),
        (["--x", "model_size"], "at least 3 runs"),
        (["--window", "1e9:1e10"], "window"),
    ],
)
def test_bad_arguments(msfr_file, args, needle):
    one_error_line(fit(msfr_file, *args), needle)
