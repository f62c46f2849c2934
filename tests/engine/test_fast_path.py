"""A model's registered fast path against the engine's generic solver on the same maths.

MSFR hands the driver its maths (one task's flow, its tables, its closed form) and registers its
lane-vectorised kernels as fast paths; ``solver.fast_path = false`` runs the generic solver of
``drive/`` on the same maths: rk4 at MSFR's per-task steps h_s = 1/(steps_per_timescale·σ_s),
discrete gd, and the settling rule, all options of the generic solver. The two are independent
implementations (lock-step lanes with FMA contraction and a factored RK4 step against one task at a
time with the textbook RK4 step), so their agreement checks both. Runs: the quickstart at 2000
tasks and 12 log-spaced times.

Settled tasks: both freeze a task once |r| ≤ thr·|Λ| (thr = settle_tol for rk4 and gd,
max(settle_tol, rtol) for dopri5), where r is a few rounding errors apart, so a settled task's
loss terms (≤ wtest·(thr·Λ)²/2) may differ by up to themselves: the comparisons allow thr²·L(0)
beside the relative bound (L(0) = Σ wtest Λ²/2 with f(0) ≈ 0, the small init).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.config import load_config

from ..reliability.conftest import assert_same_series

QUICKSTART = Path(__file__).resolve().parents[2] / "data" / "configs" / "quickstart.toml"
SMALL = ["task.n_tasks=2000", "time.n_times=12", "output.track=[1, 10, 100, 1000]"]


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _pair(tmp_path: Path, sets: list[str]) -> tuple[fastdyn.h5.Run, fastdyn.h5.Run]:
    """(fast path run, generic run) of the quickstart with ``sets``."""
    out = []
    for fast in ("true", "false"):
        cfg = load_config(QUICKSTART, [*SMALL, *sets, f"solver.fast_path={fast}"])
        path = tmp_path / f"fast_{fast}.h5"
        fastdyn.simulate(cfg, path)
        out.append(fastdyn.load(path))
    fast_run, generic = out
    assert fast_run.status == generic.status == "complete"
    # the generic solver really ran: its counts name the tasks, the lanes' do not
    assert "solver_tasks" in generic.attrs and "solver_tasks" not in fast_run.attrs
    return fast_run, generic


def _worst(fast_run, generic, rtol: float, floor: float) -> dict[str, float]:
    """max |Δ|/(floor + rtol·|fast|) per series (≤ 1 passes)."""
    out = {}
    for k in ("loss/test", "loss/train", "tasks/f"):
        a, b = fast_run[k], generic[k]
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)), k
        out[k] = float(np.max(np.abs(a - b) / (floor + rtol * np.abs(a))))
    return out


def test_rk4_fast_path_equals_the_generic_solver(tmp_path):
    """rk4: ≤ 1e-12 relative. Measured: 1.8e-16 at every time before the tasks settle; at
    t = 1e6 every task has settled and the loss is 6.9e-23, 7e-30 apart (the floor is 5e-27);
    tasks/f ≤ 9e-16 relative."""
    fast_run, generic = _pair(tmp_path, ["time.t_max=1e6", 'solver.integrator="rk4"'])
    l0 = float(fast_run["loss/test"][0])
    worst = _worst(fast_run, generic, 1e-12, 1e-13**2 * l0)
    assert max(worst.values()) <= 1.0, worst
    assert int(generic.attrs["solver_settled"]) == int(fast_run.attrs["solver_settled"]) > 0


def test_gd_fast_path_equals_the_generic_solver(tmp_path):
    """gd (y ← y + η F(y), t = η·step): ≤ 1e-12 relative. Measured: bit-identical (both take
    the same operations in the same order: one product and one sum per component)."""
    sets = ["time.t_max=1e3", 'solver.integrator="gd"', "solver.lr=0.01"]
    fast_run, generic = _pair(tmp_path, sets)
    assert np.array_equal(fast_run["step"], generic["step"])
    worst = _worst(fast_run, generic, 1e-12, 0.0)
    assert max(worst.values()) <= 1.0, worst
    assert int(generic.attrs["solver_steps"]) == int(fast_run.attrs["solver_steps"])


def test_dopri5_fast_path_agrees_within_its_tolerance(tmp_path):
    """dopri5 at rtol = 1e-8, to t = 1e4: the two differ in their starting steps (MSFR's
    0.01·‖y‖/‖k‖ ≤ 0.01/σ, Hairer's), so each is within its own error of the flow: allowed rtol
    relative (the error control's per-step target), plus rtol²·L(0) for settled tasks (both
    settle at |r| ≤ max(settle_tol, rtol)·|Λ|); f within 2·rtol (Λ = 1). Measured: 8.3e-12
    relative in the loss (0.0008 of the bound), 6.8e-12 in the tracked f; to t = 1e6, where every
    task has settled, 1.1e-7 relative at the last time (a loss of 1.9e-17, far below the floor
    5e-17)."""
    rtol = 1e-8
    fast_run, generic = _pair(tmp_path, ["time.t_max=1e4", f"solver.rtol={rtol}"])
    l0 = float(fast_run["loss/test"][0])
    for k in ("loss/test", "loss/train"):
        a, b = fast_run[k], generic[k]
        assert np.max(np.abs(a - b) / (rtol**2 * l0 + rtol * np.abs(a))) <= 1.0, k
    f_a, f_b = fast_run["tasks/f"], generic["tasks/f"]
    assert np.max(np.abs(f_a - f_b)) <= 2 * rtol
    assert "solver_settled" in generic.attrs and generic.attrs["solver_failed"] == 0


@pytest.mark.parametrize("integrator", ["rk4", "gd", "dopri5"])
def test_generic_options_resume_bit_identical(tmp_path, integrator, monkeypatch, sigterm_after):
    """The generic solver's per-task record (step, steps taken, |r|, status; dopri5: step,
    counters and |r|) and gd's step are checkpointed: a run stopped by SIGTERM after its 2nd segment and resumed equals the
    uninterrupted run bit for bit, its step counts included."""
    sets = [*SMALL, "time.t_max=1e2", f"solver.integrator={integrator}", "solver.lr=0.01"]
    sets += ["solver.fast_path=false", "output.times_per_segment=3", "output.checkpoint_every=0"]
    args = [a for s in sets for a in ("--set", s)]
    whole, p = tmp_path / "whole.h5", tmp_path / "int.h5"
    assert _invoke("-q", "simulate", str(QUICKSTART), *args, "-o", str(whole)).exit_code == 0
    sigterm_after(2)
    res = _invoke("-q", "simulate", str(QUICKSTART), *args, "-o", str(p))
    monkeypatch.undo()
    assert res.exit_code == 143, res.output
    assert len(fastdyn.load(p).time) == 6  # 2 segments of 3 output times
    assert _invoke("-q", "simulate", "--resume", str(p)).exit_code == 0
    ref, got = fastdyn.load(whole), fastdyn.load(p)
    assert_same_series(ref, got)
    counts = {k: v for k, v in ref.attrs.items() if k.startswith("solver_")}
    assert "solver_settled" in counts and counts == {k: got.attrs[k] for k in counts}
