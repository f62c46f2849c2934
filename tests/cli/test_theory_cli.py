"""``fastdyn theory``: exponent and plateau tables against hand-computed values."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fastdyn.cli import main


def theory(*args):
    return CliRunner().invoke(main, ["theory", *map(str, args)])


def test_exponents_table_by_hand():
    # alpha = 2, beta = 0.3, gamma = 0.25: eta = 1.5, kappa_t = 2.55
    res = theory("exponents", "--alpha", 2, "--beta", 0.3, "--gamma", 0.25)
    assert res.exit_code == 0, res.output
    rows = {ln.split()[0]: ln for ln in res.output.splitlines()[2:]}
    assert f"{-1.5 / 2.55:.6f}" in rows["time"] and "= -1.5/2.55" in rows["time"]
    assert "-1.500000" in rows["model"] and "= -1.5" in rows["model"]
    assert "-0.750000" in rows["data"] and "= -1.5/2" in rows["data"]
    assert f"{-1.5 / 3.55:.6f}" in rows["compute"] and "= -1.5/3.55" in rows["compute"]
    assert f"{1 / 3.55:.6f}" in rows["optimal"]


def test_exponents_json_by_hand():
    res = theory("exponents", "--alpha", 2, "--beta", 0.3, "--gamma", 0.25, "--json")
    d = json.loads(res.output)
    assert d["eta"] == pytest.approx(1.5, abs=1e-15) and d["kappa_t"] == pytest.approx(
        2.55, abs=1e-15
    )
    laws = d["laws"]
    assert laws["time"]["power"] == pytest.approx(-1.5 / 2.55, abs=1e-15)
    assert laws["model_size"]["power"] == pytest.approx(-1.5, abs=1e-15)
    assert laws["data"]["power"] == pytest.approx(-0.75, abs=1e-15)
    assert laws["compute"]["power"] == pytest.approx(-1.5 / 3.55, abs=1e-15)
    assert laws["d_star"]["power"] == pytest.approx(1 / 3.55, abs=1e-15)
    # beta = gamma = 0 (fixed context): time law -(alpha-1)/alpha
    d0 = json.loads(theory("exponents", "--alpha", 3, "--json").output)
    assert d0["laws"]["time"]["power"] == pytest.approx(-2 / 3, abs=1e-15)


def test_exponents_outside_domain_is_one_line_exit_2():
    res = theory("exponents", "--alpha", 0.5)
    assert res.exit_code == 2 and "alpha + 2*gamma > 1" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_plateaus_linear_d4_n31():
    res = theory("plateaus", "--dim", 4, "--context", 31, "--spectrum", "linear")
    assert res.exit_code == 0, res.output
    vals = [ln.split()[1] for ln in res.output.splitlines()[2:7]]
    assert vals == ["1.00000", "0.64058", "0.37737", "0.20980", "0.13600"]
    assert "L* (ATTN_M global minimum) = 0.13600" in res.output
    assert "eigenvalues 0.4, 0.3, 0.2, 0.1" in res.output


def test_plateaus_white_json_by_hand():
    d = json.loads(
        theory("plateaus", "--dim", 2, "--context", 4, "--spectrum", "white", "--json").output
    )
    # λ = 1/2 each, tr = 1: gain = 0.5 / (1 + (1 + 2)/4) = 2/7
    assert d["eigenvalues"] == pytest.approx([0.5, 0.5], abs=1e-15)
    assert d["plateaus"] == pytest.approx([1.0, 5 / 7, 3 / 7], abs=1e-14)
    assert d["loss_star"] == pytest.approx(3 / 7, abs=1e-14)


def test_plateaus_bad_input():
    res = theory("plateaus", "--dim", 0, "--context", 31)
    assert res.exit_code == 2 and "--dim" in res.output


def test_fixed_points_counts_and_table():
    # attn-s: all 2^D subsets are fixed points; attn-m: only ∅ and all (spec icl.md §4)
    s = json.loads(theory("fixed-points", "--model", "attn-s", "--dim", 4, "--json").output)
    assert (s["n_subsets"], s["n_fixed"]) == (16, 16)
    assert max(p["grad_norm"] for p in s["points"]) <= 1e-12
    m = json.loads(theory("fixed-points", "--model", "attn-m", "--dim", 4, "--json").output)
    assert m["n_fixed"] == 2
    assert [p["subset"] for p in m["points"] if p["fixed"]] == [[], [1, 2, 3, 4]]
    # the top-m subsets are the plateaus of the spec table (D = 4, N = 31)
    top = [p["loss"] for p in s["points"] if p["subset"] == list(range(1, p["m"] + 1))]
    assert [round(v, 5) for v in top] == [1, 0.64058, 0.37737, 0.20980, 0.13600]
    res = theory("fixed-points", "--model", "attn-m", "--dim", 2, "--rotate", 3)
    assert res.exit_code == 0, res.output
    assert "2 of 4 subsets are fixed points" in res.output
    assert [ln.split()[-1] for ln in res.output.splitlines()[2:6]] == ["yes", "no", "no", "yes"]


def test_fixed_points_bad_input():
    res = theory("fixed-points", "--model", "attn-s", "--dim", 4, "--heads", 3)
    assert res.exit_code == 2 and res.output.strip() == (
        "fastdyn: error: --heads: attn-s needs H ≥ D = 4 (one head per direction), got 3"
    )
    res = theory("fixed-points", "--model", "mlp", "--dim", 4)
    assert res.exit_code == 2 and "--model" in res.output


def test_local_exponents_of_a_preset_name_the_regime_honestly():
    """``--config`` takes a preset name; Λ_s ≡ 1 has no regime (both laws agree), and a window that
    spans Λ_s = 1 says its formula is the nearer law, not that the tasks are in it."""
    from click.testing import CliRunner

    from fastdyn.cli import main

    base = ["theory", "exponents", "--config", "quickstart", "--set", "task.n_tasks=10000",
            "--set", "output.track=[]"]  # fmt: skip
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 0, res.output
    assert "regime: none (Λ_s = 1 for every task: both regimes give the same laws)" in res.output
    assert "power-law formula at the local exponents (Λ_s constant)" in res.output
    res = CliRunner().invoke(main, [*base, "--set", "task.gamma=-0.3"])
    assert res.exit_code == 0, res.output
    assert "regime: mixed" in res.output and "(mixed; nearest Λ_s ≫ 1)" in res.output
