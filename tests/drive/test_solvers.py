"""The generic solver's registry (``drive/solvers.py``): which solver runs which maths, and what
each declares to the driver (checkpoint arrays, root attributes, output steps, messages).

The checkpoint layouts are the ones files written before the registry hold, so ``--resume`` of
such a file still fits; the runs themselves (bit-identical outputs, resume) are held by
tests/engine/test_fast_path.py, tests/engine/test_toy_model.py and tests/golden.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fastdyn.config.schema import ConfigError
from fastdyn.drive.ode_maths import generic_job
from fastdyn.drive.solvers import SOLVERS, FixedSteps, GlobalStep
from fastdyn.drive.tableaux import METHODS
from fastdyn.models import OdeMaths

N, NS = 2048, 3


def _f(*_a):  # the kernels are never called here: no run starts
    return 0.0


def _maths(integrator: str, steps=None, rate=None, residual=None, **solver) -> OdeMaths:
    s = {"integrator": integrator, "h": 0.05, "rtol": 1e-8, "atol": 1e-12, "max_steps": 10**6}
    return OdeMaths(
        n_tasks=N, n_state=NS, rhs=_f, observe=_f, loss=_f,
        params=lambda first, n: np.zeros((1, n)), init=lambda first, n: np.zeros((NS, n)),
        times=np.array([1.0, 2.0]), track=np.array([1]), steps=steps,
        solver=SimpleNamespace(**(s | solver)),
        output=SimpleNamespace(chunk_tasks=1024, times_per_segment=1, checkpoint_every=0),
        rate_scale=rate, residual=residual, extra_attrs={"model_attr": 1},
    )  # fmt: skip


def test_every_registered_integrator_has_its_solver_and_tableau():
    assert sorted(SOLVERS) == ["dopri5", "gd", "none", "rk4"]
    for name, solver in SOLVERS.items():
        assert solver.name == name
        assert solver.tableau is METHODS.get(name)  # none: no method
    assert not SOLVERS["none"].simulate and SOLVERS["dopri5"].adaptive


def test_an_unregistered_integrator_is_a_one_line_config_error():
    with pytest.raises(ConfigError) as e:
        generic_job(_maths("euler"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("solver.integrator: 'euler'")
    assert msg.endswith("registered: dopri5, gd, none, rk4")


def test_rk4_runs_one_global_step_unless_the_model_asks_for_per_task_steps_or_settling():
    m = _maths("rk4")
    assert type(SOLVERS["rk4"].for_maths(m)) is GlobalStep
    job = generic_job(m)
    assert job.checkpoint == {"y": ((NS, N), "f8")} and job.steps is None
    assert job.extra_attrs == {"model_attr": 1, "rk4_h": 0.05}
    assert job.failure({"tasks": N}) is None
    assert "rk4 step h = 0.05" in job.cause(None)

    for m in (
        _maths("rk4", rate=_f, steps_per_timescale=8),  # h_s = 1/(8 σ_s)
        _maths("rk4", residual=_f, settle_tol=1e-13),  # the settling rule
    ):
        assert type(SOLVERS["rk4"].for_maths(m)) is FixedSteps
        job = generic_job(m)
        assert job.checkpoint == {"y": ((NS, N), "f8"), "solver": ((4, N), "f8")}
        assert job.extra_attrs == {"model_attr": 1}  # the config's keys say what the steps were
        assert job.failure({"step_limit": 1, "diverged": 2, "running": N - 3}).startswith(
            "3 tasks did not finish (step limit 1, diverged 2)"
        )
    # a settle_tol of 0 switches the rule off
    assert type(SOLVERS["rk4"].for_maths(_maths("rk4", residual=_f, settle_tol=0.0))) is GlobalStep


def test_rk4_checks_its_step_budget_before_the_run():
    with pytest.raises(ConfigError, match=r"^solver\.h: rk4 needs t_max / h = 40 steps"):
        generic_job(_maths("rk4", max_steps=39))


def test_dopri5_declares_its_steps_counters_and_settling_record():
    job = generic_job(_maths("dopri5"))
    assert job.checkpoint == {"y": ((NS, N), "f8"), "h": ((N,), "f8"), "counts": ((3, N), "i8")}
    assert job.extra_attrs == {"model_attr": 1, "dopri5_rtol": 1e-8, "dopri5_atol": 1e-12}
    assert job.failure({"tasks": N, "failed": 0}) is None
    assert job.failure({"tasks": N, "failed": 2}).startswith("2 tasks did not finish (dopri5")
    state = job.new_state([job.chunk(0, 1024), job.chunk(1024, 1024)], N)
    assert state.rprev is None and state.counts.shape == (3, N)

    job = generic_job(_maths("dopri5", residual=_f, settle_tol=1e-13))
    assert job.checkpoint["rprev"] == ((N,), "f8")
    state = job.new_state([job.chunk(0, 1024), job.chunk(1024, 1024)], N)
    assert np.all(state.rprev == np.inf)


def test_gd_outputs_its_steps_and_restores_its_step():
    with pytest.raises(ConfigError, match="gd needs the model's output steps"):
        generic_job(_maths("gd", lr=0.1))
    steps = np.array([10, 20])
    m = _maths("gd", steps=steps, lr=0.1)
    job = generic_job(m)
    assert job.steps is steps and job.extra_attrs == {"model_attr": 1}
    chunks = SimpleNamespace(spans=[(0, 1024), (1024, 1024)])
    state = job.new_state([job.chunk(a, n) for a, n in chunks.spans], N)
    job.restore(state, job.save_state(state), chunks, 1, 10)
    assert state.k_at == {0: 10, 1024: 10} and state.t_at == {0: 1.0, 1024: 1.0}


def test_none_integrates_nothing_and_keeps_an_empty_state_slot():
    job = generic_job(_maths("none"))
    assert not job.simulate and job.checkpoint == {"y": ((NS, 0), "f8")}
    assert job.extra_attrs == {"model_attr": 1}
