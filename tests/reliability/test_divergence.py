"""Divergence: detected within one chunk, status `failed: diverged …`, the rows before it kept, a
message naming the learning rate against the estimated stability bound 2/λ_max, exit 1 (issue 6,
acceptance 3: an MSFR gd run and an ATTN_M run with too large a step)."""

from __future__ import annotations

import re

import numpy as np
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.drive.train import hessian_lambda_max
from fastdyn.models.icl.attn_m import AttnM
from fastdyn.models.icl.problem import generate

GD = [
    "--set",
    "task.n_tasks=2048",
    "--set",
    "solver.integrator=gd",
    "--set",
    "time.t_max=20",
    "--set",
    "time.n_times=30",
    "--set",
    "output.times_per_segment=3",
]


def _bound(output: str) -> float:
    m = re.search(r"2/λ_max ≈ ([0-9.eE+-]+)", output)
    assert m, output
    return float(m.group(1))


def test_msfr_gd_above_the_bound_fails_with_the_bound_and_keeps_the_rows_before(tmp_path):
    p = tmp_path / "d.h5"
    res = CliRunner().invoke(main, ["simulate", *GD, "--set", "solver.lr=0.05", "-o", str(p)])
    assert res.exit_code == 1, res.output
    line = res.output.strip().splitlines()[-1]
    assert (
        "diverged at t = " in line and "solver.lr = 0.05 is above the gd stability bound" in line
    ), line
    r = fastdyn.load(p)
    assert r.status.startswith("failed: diverged")
    n = len(r.time)
    assert 0 < n < 31 and np.all(np.isfinite(r["loss/test"]))  # the segments before it, all finite
    # the estimate is a real bound: 0.8× it trains to the end, 1.25× it diverges (the fastest task's
    # linearisation at its minimum; the factor leaves room for the 3-digit rounding in the message)
    bound = _bound(line)
    ok = CliRunner().invoke(
        main, ["simulate", *GD, "--set", f"solver.lr={0.8 * bound}", "-o", str(tmp_path / "ok.h5")]
    )
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(
        main,
        ["simulate", *GD, "--set", f"solver.lr={1.25 * bound}", "-o", str(tmp_path / "bad.h5")],
    )
    assert bad.exit_code == 1 and "diverged" in bad.output, bad.output


def test_attn_m_with_too_large_a_step_fails_naming_the_bound(tmp_path):
    p = tmp_path / "a.h5"
    args = [
        "--set",
        "model=attn-m",
        "--set",
        "data.P=200",
        "--set",
        "schedule.epochs=400",
        "--set",
        "schedule.save_every=20",
        "--set",
        "init.scale=0.1",
    ]
    res = CliRunner().invoke(main, ["simulate", *args, "--set", "optim.lr=20", "-o", str(p)])
    assert res.exit_code == 1, res.output
    line = res.output.strip().splitlines()[-1]
    assert (
        "diverged at step" in line and "optim.lr = 20 is above the stability bound 2/λ_max" in line
    ), line
    r = fastdyn.load(p)
    assert r.status.startswith("failed: diverged at step")
    assert len(r.time) >= 1 and np.all(np.isfinite(r["loss/train"]))


def test_hessian_lambda_max_matches_a_dense_finite_difference_hessian():
    d = generate(2, 4, 50, seed=3)
    m = AttnM(2, 2, 4)
    prep = m.prepare(d.tokens, d.labels)
    th = m.init("reference", 0.3, 1)
    n = m.n_params
    H = np.zeros((n, n))
    gp, gm = np.zeros(n), np.zeros(n)
    h = 1e-5
    for i in range(n):
        e = np.zeros(n)
        e[i] = h
        m.loss_and_grad(th + e, prep, gp, None)
        m.loss_and_grad(th - e, prep, gm, None)
        H[:, i] = (gp - gm) / (2 * h)
    ev = np.linalg.eigvalsh(0.5 * (H + H.T))
    ref = ev[np.argmax(np.abs(ev))]
    got = hessian_lambda_max(m, prep, th, iters=200)
    # both are central differences with h ~ 1e-5 (error ~1e-9 relative); power iteration converges
    # at the ratio of the two largest |eigenvalues|: 200 iterations leave < 1e-6 unless they tie
    assert abs(got - ref) <= 1e-5 * abs(ref), (got, ref, ev)


def test_the_largest_init_is_not_a_divergence(tmp_path):
    """init.scale = 1e3 (the allowed maximum) starts at a loss ~10^16 times the f = 0 loss: the
    reference is the starting loss, so the run completes and its loss only falls (issue 22)."""
    p = tmp_path / "big.h5"
    sets = ["init.scale=1e3", "task.n_tasks=100", "time.n_times=16"]
    res = CliRunner().invoke(
        main, ["simulate", *[a for s in sets for a in ("--set", s)], "-o", str(p), "--quiet"]
    )
    assert res.exit_code == 0, res.output
    r = fastdyn.load(p)
    loss = r["loss/test"]
    assert r.status == "complete" and np.all(np.isfinite(loss))
    # the start is far above the f = 0 loss (f_s(0) ≈ σ0² ψ_s ≫ Λ_s), and gradient flow only lowers it
    assert loss[0] > 1e6 * loss[-1] and np.all(np.diff(loss) <= 1e-12 * loss[0])


_SMALL_ATTN_M = ["--set", "model=attn-m", "--set", "data.P=200", "--set", "schedule.epochs=40"]


def test_an_init_scale_whose_weights_overflow_is_one_line_naming_it(tmp_path):
    """init.scale = 1e308: the initial draw overflows to inf; the learning rate is not to blame."""
    p = tmp_path / "a.h5"
    res = CliRunner().invoke(
        main, ["simulate", *_SMALL_ATTN_M, "--set", "init.scale=1e308", "-o", str(p)]
    )
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "init.scale: 1e+308 makes the initial weights overflow" in lines[0]
    assert not p.exists()


def test_a_non_finite_loss_before_any_step_names_init_scale_not_the_learning_rate(tmp_path):
    """init.scale = 1e150: finite weights whose loss (a polynomial of degree 4 in them for
    attn-m) overflows at step 0, before the learning rate has acted."""
    p = tmp_path / "a.h5"
    res = CliRunner().invoke(
        main, ["simulate", *_SMALL_ATTN_M, "--set", "init.scale=1e150", "-o", str(p)]
    )
    assert res.exit_code == 1, res.output
    line = res.output.strip().splitlines()[-1]
    assert "diverged at step 0" in line and "lower init.scale" in line and "optim.lr" not in line
