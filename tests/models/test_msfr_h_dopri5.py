"""msfr-h on the generic per-task dopri5 (``solver.integrator = "dopri5"``): the exact closed form,
far fewer steps than the fixed-step RK4 on a task table whose rates span 1e4, a SIGTERM and
``--resume`` bit-identical to an uninterrupted run (the per-task steps and counters are in the
checkpoint), and the step budget failing the run.

One dopri5 compile for the file (≈ 3 s); each run ≈ 1 s after it.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.config.schema import ConfigError
from fastdyn.h5.writer import read_checkpoint
from tests.reliability.conftest import assert_same_series

#: 10 tasks, P(s) ∝ s^-4 (rates #/N · λmax(H) · 2Λ from 14.8 down to 1.48e-3: 1e4 apart), ψ = 4,
#: Λ = 1, H = κ diag(1, 0) (the default spectrum: H² = κH, the closed form is exact), t ≤ 2000:
#: tasks 1–5 are learnt early and then sit at their minimum, task 10 is still rising at t_max
SETS = {"model": "msfr-h", "task.n_tasks": "10", "task.alpha": "4", "task.psi0": "4",
        "time.t_max": "2000", "time.n_times": "60", "output.track": "[1, 2, 5, 10]",
        "solver.integrator": "dopri5", "solver.rtol": "1e-10", "output.checkpoint_every": "0",
        "output.times_per_segment": "5"}  # fmt: skip


def _args(sets: dict) -> list[str]:
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def _attrs(path) -> dict:
    with h5py.File(path, "r") as f:
        return dict(f.attrs)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    p = tmp_path_factory.mktemp("dopri5") / "ref.h5"
    res = CliRunner().invoke(main, ["-q", "simulate", *_args(SETS), "-o", str(p)])
    assert res.exit_code == 0, res.output
    return p


def test_exact_closed_form_with_far_fewer_steps_than_rk4(reference):
    """dopri5 at rtol 1e-10 equals the exact closed form: max |f − f_theory| = 1.9e-10 (Λ = 1)
    and loss/test (and train) within 1.3e-10 relative (measured), held to 1e-8. Steps: dopri5
    11 812 accepted (+ 1 487 rejected) over the 10 tasks (measured; the fast tasks' steps are
    bounded by stability on their converged tail); RK4 at its 'auto' step h = 1/(200 · 14.8)
    = 3.38e-4 (the fastest task's) takes Σ_j ⌈Δt_j/h⌉ = 5 914 851 steps per task, 59 148 510 for
    the 10: 5000× more."""
    run = fastdyn.load(reference)
    a = _attrs(reference)
    assert run.status == "complete" and a["theory_exact"] == 1 and "rk4_h" not in a
    f, fth = run["tasks/f"], run["theory/tasks/f"]
    assert f[-1, 0] > 0.999 and f[-1, -1] < 0.01  # task 1 learnt, task 10 not yet: both regimes
    assert np.max(np.abs(f - fth)) <= 1e-8
    for k in ("test", "train"):
        assert np.max(np.abs(run[f"loss/{k}"] / run[f"theory/loss/{k}"] - 1)) <= 1e-8, k
    assert a["solver_tasks"] == 10 and a["solver_failed"] == 0 and a["solver_rejected"] > 0
    # RK4's step and step count for the same tasks (the setup only: nothing is integrated)
    from fastdyn.core.device import Device
    from fastdyn.models.registry import get_model

    cfg = fastdyn.load_config(None, [f"{k}={v}" for k, v in (SETS | {"solver.integrator": "rk4"}).items()])  # fmt: skip
    job = get_model("msfr-h").setup(cfg, Device.CPU)
    h = job.solver.h  # 'auto', resolved by the setup
    rk4_steps = 10 * np.sum(np.ceil(np.diff(np.concatenate([[0.0], job.times])) / h))
    assert 1e4 < a["solver_steps"] < rk4_steps / 1000, (a["solver_steps"], rk4_steps)


def test_sigterm_then_resume_is_bit_identical(reference, tmp_path, monkeypatch, sigterm_after):
    """SIGTERM after the 3rd of 12 segments, then ``--resume``: every series and the step counts
    bit-identical to the uninterrupted run (each task's next step and counters come back from
    the checkpoint; restarted with fresh steps the counts and f would differ)."""
    p = tmp_path / "int.h5"
    sigterm_after(3)
    res = CliRunner().invoke(main, ["-q", "simulate", *_args(SETS), "-o", str(p)])
    monkeypatch.undo()
    assert res.exit_code == 143, res.output
    assert len(fastdyn.load(p).time) == 15
    with h5py.File(p, "r") as f:  # the checkpoint holds the per-task step state
        arrays, rows, _seq = read_checkpoint(f)
    assert rows == 15 and arrays["h"].shape == (10,) and np.all(arrays["h"] > 0)
    assert arrays["counts"].shape == (3, 10) and np.all(arrays["counts"][0] > 0)
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    assert res.exit_code == 0, res.output
    ref, got = fastdyn.load(reference), fastdyn.load(p)
    assert got.status == "complete"
    assert_same_series(ref, got)
    for k in ("solver_steps", "solver_rejected", "solver_failed", "solver_tasks"):
        assert _attrs(p)[k] == _attrs(reference)[k], k


def test_step_budget_fails_the_run(tmp_path):
    """solver.max_steps = 300 accepted steps per task (task 1 needs thousands): the run stops at
    once with a failed status naming the budget."""
    cfg = fastdyn.load_config(None, [f"{k}={v}" for k, v in (SETS | {"solver.max_steps": "300"}).items()])  # fmt: skip
    status = fastdyn.simulate(cfg, tmp_path / "x.h5")
    assert status.startswith("failed") and "solver.max_steps = 300" in status, status
    assert "1 tasks did not finish" in status, status


def test_rk4_step_check_only_for_rk4():
    """A solver.h whose RK4 step count exceeds max_steps is refused for rk4 only (dopri5 chooses
    its own steps; h is RK4's)."""
    sets = SETS | {"solver.h": "1e-3", "solver.max_steps": "1000"}
    with pytest.raises(ConfigError, match="solver.h: RK4 needs"):
        fastdyn.load_config(None, [f"{k}={v}" for k, v in (sets | {"solver.integrator": "rk4"}).items()])  # fmt: skip
    cfg = fastdyn.load_config(None, [f"{k}={v}" for k, v in sets.items()])
    assert cfg.solver.integrator == "dopri5" and cfg.solver.max_steps == 1000
