"""`fastdyn theory exponents --config/--set`: local exponents of a table or named family."""

import json

import pytest
from click.testing import CliRunner

from fastdyn.cli import main


def run(*args):
    return CliRunner().invoke(main, ["theory", "exponents", *[str(a) for a in args]])


def test_power_law_local_slopes_are_its_exponents():
    res = run(
        "--set", "task.n_tasks=50000", "--set", "task.gamma=0.3", "--window", "30:3000", "--json"
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["alpha_w"] == pytest.approx(2.0, abs=1e-9) and d["gamma_w"] == pytest.approx(
        0.3, abs=1e-9
    )
    assert d["power_law"] and d["regime"] == "small"
    # the tail slope is η = α + 2γ − 1 = 1.6 up to the finite-window sum; κ_w includes the log
    assert d["eta_w"] == pytest.approx(1.6, abs=0.02)
    assert d["regime_law"]["time"] == pytest.approx(1.6 / 2.3, abs=2e-3)
    assert abs(d["time"] - d["regime_law"]["time"]) < 0.03


def test_exponential_strengths_have_no_single_power_law():
    res = run("--set", "task.n_tasks=20000", "--set", "task.strength_law=exponential",
              "--set", "task.strength_decay=1000", "--window", "100:1000")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "no single power law over the window" in res.output
    assert "task.strength_law = 'exponential'" in res.output and "regime:" in res.output


def test_exponential_frequencies_keep_the_time_law_and_say_so():
    """P(s) ∝ e^-(s−1)/s0 at constant Λ: the tail Σ_(s'>s) P Λ²/2 and the emergence times
    t_s ∝ 1/P_s are both exponential in s, so L ∝ t^-1 exactly while eta_w (the model-size
    exponent) grows across the window."""
    res = run("--set", "task.n_tasks=100000", "--set", "task.frequency_law=exponential",
              "--set", "task.frequency_decay=1000", "--window", "100:10000")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "no single power law in model size over the window" in res.output, res.output
    assert "the time law holds over the whole window (exponent 1 and 1)" in res.output
    assert "not this window’s law" in res.output


@pytest.mark.parametrize(
    "args, expect",
    [(["--alpha", 2, "--set", "task.n_tasks=100"], "--alpha: give either"),
     (["--window", "1:10"], "--window/--time: need --config or --set"),
     (["--set", "task.n_tasks=100", "--window", "50:10"], "--window: needs 1 ≤ S_LO < S_HI"),
     ([], "--alpha: missing")],
)  # fmt: skip
def test_bad_uses_are_one_line_errors(args, expect):
    res = run(*args)
    assert res.exit_code == 2 and res.output.count("\n") == 1 and expect in res.output, res.output


def _exp_family():
    from tests.reference.msfr_local_laws_reference import family

    return family(20000, strength_law="exponential", strength_decay=100.0)


def test_exponential_strengths_fit_only_the_tasks_that_emerge():
    """Λ_s = e^-(s−1)/100 with ψ = 100, σ0 = 1e-3: f0(0) = 1e-4 (1 + Λ_s²), so tasks past
    s ≈ 1 + 100 ln(1/2e-4) ≈ 852 have Λ_s ≤ 2 f0(0) and never emerge. Both slopes are fitted over
    the emerging tasks 10 … 852 of the window 10:2000 and match the numpy reference (the same
    sampled tasks; the two tail sums differ in summation order only: measured equal to the last
    bit, tolerance 1e-10 for the order). Over the whole window the tail slope is 7.3, not 4.7: a fit of η_w over
    tasks that never emerge would fail this."""
    from tests.reference.msfr_local_laws_reference import local_exponents

    res = run("--set", "task.n_tasks=20000", "--set", "task.strength_law=exponential",
              "--set", "task.strength_decay=100", "--window", "10:2000", "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    ref = local_exponents(*_exp_family(), 10, 2000, 1e-3)
    em = d["emerging"]
    assert (em["first"], em["last"], em["n"]) == (ref["first"], ref["last"], ref["n_emerging"])
    assert (em["first"], em["last"], em["n_past"]) == (10, 852, 2000 - 852)
    assert (d["s_lo"], d["s_hi"]) == (10, 852)
    assert "tasks 853 … 2000 start at or past half-rise" in em["text"]
    for key in ("eta_w", "kappa_w", "time"):
        assert d[key] == pytest.approx(ref[key], rel=1e-10), key
    assert d["t_lo"] > 0  # no task with t_s = 0 in the fit


def test_exponential_strengths_text_names_the_emerging_tasks():
    res = run("--set", "task.n_tasks=20000", "--set", "task.strength_law=exponential",
              "--set", "task.strength_decay=100", "--window", "10:2000")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "local slopes over tasks s = 10 … 852" in res.output
    assert "tasks 10 … 852 of 10 … 2000 emerge" in res.output
    assert "(tasks 10 … 2000 emerge)" not in res.output


def test_a_window_where_no_task_emerges_is_one_line():
    res = run("--set", "task.strength_law=exponential", "--set", "task.strength_decay=100",
              "--window", "900:2000")  # fmt: skip
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "no task of 900 … 2000 emerges" in res.output
