"""④ The generic solver's integrators, one object per ``solver.integrator`` (:data:`SOLVERS`).

As diffrax keeps the term (the vector field), the solver and the step-size controller apart and
carries the solver's state as a record, the generic ODE driver (:func:`fastdyn.drive.ode_maths.
generic_job`) keeps them apart here: the term is the model's maths (:class:`fastdyn.models.OdeMaths`:
``rhs``, ``observe``, ``loss`` and its tables), the state record is
:class:`fastdyn.core.soa_state.SoaState` (y, each chunk's clock, and the solver's own per-task
arrays), and a :class:`Solver` knows the rest for one integrator:

- its method (a Butcher tableau of :mod:`fastdyn.drive.tableaux`) and, for dopri5, its controller
  (:func:`fastdyn.core.steppers.step_factor`);
- the checks of a config before the run (one-line ConfigErrors);
- how to make the state record, advance a chunk of it through a segment of output times (the
  kernels of :mod:`fastdyn.drive.integrate_soa`, or their CUDA twins,
  :mod:`fastdyn.drive.integrate_soa_cuda`: the ``integrators`` module it is given), and what a
  checkpoint holds of it and how it is put back;
- the root attributes it adds to the file (``rk4_h``; ``dopri5_rtol``, ``dopri5_atol``), and its
  messages for tasks that did not finish and for a divergence.

Registered (:data:`SOLVERS`): ``rk4`` (:class:`GlobalStep`: classical RK4, one nominal step h for
every task; with a model's ``rate_scale`` or settling rule it hands over to :class:`FixedSteps`,
each task at its own step h_s = 1/(steps_per_timescale·σ_s)), ``gd`` (:class:`GradientDescent`:
y ← y + η·rhs(y) per step, t = η·step), ``dopri5`` (:class:`Adaptive`: Dormand–Prince 5(4), each
task with its own step under the controller, with the settling rule when the model has one) and
``none`` (:class:`ClosedFormOnly`). A new method is one more :class:`Solver` in :data:`SOLVERS`
(with its kernels in :mod:`fastdyn.drive.integrate_soa` and :mod:`fastdyn.drive.soa_tasks`).

Each solver builds a chunk's ``advance`` once per run (:meth:`Solver.stepper`), with the config's
numbers resolved, so a segment costs one kernel call and no per-step Python.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..config.schema import ConfigError
from ..core import steppers
from ..core.soa_state import SoaState, soa_checkpoint
from ..models._spec import OdeMaths
from .tableaux import METHODS, Tableau

#: ``advance(chunk, state, times, steps, local_track, test_partials, train_partials, f)``
Advance = Callable[..., None]


def per_task_steps(m: OdeMaths) -> bool:
    """The model gives each task's rate (``rate_scale``) and the config ``steps_per_timescale``:
    rk4 steps task s at h_s = 1/(steps_per_timescale·σ_s)."""
    return m.rate_scale is not None and hasattr(m.solver, "steps_per_timescale")


def settles(m: OdeMaths) -> bool:
    """The settling rule is on: the model gives ``residual`` and ``solver.settle_tol`` > 0."""
    return m.residual is not None and float(getattr(m.solver, "settle_tol", 0.0)) > 0.0


def _step_cause(m: OdeMaths) -> str:
    return f"the rk4 step h = {m.solver.h:g} is too large for the fastest task; lower solver.h or use solver.integrator = 'dopri5'"


class Solver(ABC):
    """One ``solver.integrator`` of the generic solver (a stateless object; every method takes
    the model's maths ``m``). The defaults are a method that integrates and keeps only y."""

    #: ``solver.integrator``
    name: str = ""
    #: its Runge–Kutta method (None: no integration)
    tableau: Tableau | None = None
    #: whether it integrates (False: the closed form only)
    simulate: bool = True
    #: a fixed-step record per task (:func:`fastdyn.drive.integrate_soa.fixed_record`)
    fixed: bool = False
    #: per-task step sizes and counters (dopri5)
    adaptive: bool = False
    #: marks are step indices (gd), not times; a checkpoint restores the step too
    discrete: bool = False

    def for_maths(self, m: OdeMaths) -> Solver:
        """The solver that runs ``m`` (a variant of this one where the model's options ask)."""
        return self

    def check(self, m: OdeMaths) -> None:
        """ConfigError (one line) for a config this solver cannot run."""
        if m.n_state < 1:
            raise ConfigError(f"solver.integrator: the model has no state (n_state = {m.n_state})")

    def output_steps(self, m: OdeMaths) -> np.ndarray | None:
        """The output step indices of a discrete run (None: output times only)."""
        return None

    def start(self, m: OdeMaths, y: np.ndarray, integrators: Any) -> SoaState:
        """The state record at the start, holding ``y`` (n_state, n)."""
        return SoaState.start(y, self.adaptive, None, settle=self.adaptive and settles(m))

    @abstractmethod
    def stepper(self, m: OdeMaths, integrators: Any) -> Advance:
        """``advance(chunk, state, times, …)`` of this run (built once; every solver defines it)."""

    def kernel(self, m: OdeMaths) -> tuple[str, tuple[Any, ...]] | None:
        """The kernel its ``advance`` calls: the builder's name in
        :mod:`fastdyn.drive.integrate_soa` and the arguments it builds the kernel for (None:
        no kernel)."""
        return None

    def checkpoint(self, m: OdeMaths) -> dict[str, tuple[tuple[int, ...], str]]:
        """The arrays a checkpoint holds, ``{name: (shape, dtype)}`` (:meth:`SoaState.arrays`)."""
        n = int(m.n_tasks) if self.simulate else 0
        return soa_checkpoint(int(m.n_state), n, self.adaptive, self.fixed, settles(m))

    def restore(
        self,
        state: SoaState,
        ck: Mapping[str, np.ndarray],
        spans: Iterable[tuple[int, int]],
        times: np.ndarray,
        rows: int,
        last_step: int,
    ) -> None:
        """Put a checkpoint written after ``rows`` output rows (and ``last_step`` steps, for a
        discrete method) back (ValueError if it does not fit)."""
        state.restore(ck, spans, times, rows, last_step if self.discrete else None)

    def attrs(self, m: OdeMaths) -> dict[str, Any]:
        """Root attributes that say how the output was integrated (beside the config's keys)."""
        return {}

    def failure(self, m: OdeMaths, counts: Mapping[str, int]) -> str | None:
        """What went wrong with tasks that did not finish (None: every task finished)."""
        return None

    def cause(self, m: OdeMaths) -> str:
        """The likely cause of a divergence, when the model gives none (``OdeMaths.cause``)."""
        return f"the {self.name} integrator lost accuracy"


class GlobalStep(Solver):
    """Classical RK4 at one nominal step ``solver.h`` for every task (each output interval cut
    into ⌈Δt/h⌉ equal steps): :func:`fastdyn.drive.integrate_soa.advance_rk4`."""

    name, tableau = "rk4", METHODS["rk4"]

    def __init__(self, per_task: Solver) -> None:
        self.per_task = per_task

    def for_maths(self, m: OdeMaths) -> Solver:
        """Per-task steps or the settling rule: :class:`FixedSteps` (the same tableau)."""
        return self.per_task if per_task_steps(m) or settles(m) else self

    def check(self, m: OdeMaths) -> None:
        s = m.solver
        if len(m.times):
            n = float(m.times[-1]) / float(s.h)
            if n > s.max_steps:
                raise ConfigError(
                    f"solver.h: rk4 needs t_max / h = {n:.3g} steps per task, more than solver.max_steps = {s.max_steps}; raise h or max_steps, lower the last output time, or use solver.integrator = 'dopri5'"
                )
        super().check(m)

    def stepper(self, m: OdeMaths, integrators: Any) -> Advance:
        rk4, rhs, observe, loss, h = integrators.advance_rk4, m.rhs, m.observe, m.loss, float(m.solver.h)  # fmt: skip

        def advance(ch, state, tt, steps, loc, pt, pr, ft) -> None:
            a = ch.first
            rk4(rhs, observe, loss, ch.params, state.y[:, a : a + ch.n], state.t_at.get(a, 0.0), tt, h, loc, pt, pr, ft)  # fmt: skip
            state.t_at[a] = float(tt[-1])

        return advance

    def kernel(self, m: OdeMaths) -> tuple[str, tuple[Any, ...]] | None:
        return "rk4", (m.rhs, m.observe, m.loss)

    def attrs(self, m: OdeMaths) -> dict[str, Any]:
        return {"rk4_h": float(m.solver.h)}

    def cause(self, m: OdeMaths) -> str:
        return _step_cause(m)


class FixedSteps(Solver):
    """Fixed steps with each task's own record (:func:`fastdyn.drive.integrate_soa.advance_fixed`):
    RK4 at h_s = 1/(steps_per_timescale·σ_s) (σ_s = the model's ``rate_scale``; without it the
    nominal ``solver.h``), with the settling rule when the model gives ``residual``; marks are
    output times. The record (step, steps taken, |r|, status) is checkpointed as ``solver``."""

    name, tableau, fixed = "rk4", METHODS["rk4"], True

    def start(self, m: OdeMaths, y: np.ndarray, integrators: Any) -> SoaState:
        return SoaState.start(y, False, integrators.fixed_record(y.shape[1]))

    def options(self, m: OdeMaths) -> dict[str, Any]:
        """The keyword options of ``advance_fixed`` for ``m``."""
        s, per_task, settle = m.solver, per_task_steps(m), settles(m)
        return {
            "rate": m.rate_scale if per_task and not self.discrete else None,
            "residual": m.residual if settle else None,
            "gd": self.discrete,
            "steps_per_timescale": float(getattr(s, "steps_per_timescale", 0.0)),
            "h": float(getattr(s, "h", 0.0)) if not per_task else 0.0,
            "eta": float(s.lr) if self.discrete else 0.0,
            "settle_tol": float(getattr(s, "settle_tol", 0.0)),
            "max_steps": int(s.max_steps),
        }

    def stepper(self, m: OdeMaths, integrators: Any) -> Advance:
        fixed, rhs, observe, loss = integrators.advance_fixed, m.rhs, m.observe, m.loss
        kw = self.options(m)

        def advance(ch, state, tt, steps, loc, pt, pr, ft) -> None:
            a, b = ch.first, ch.first + ch.n
            t0 = state.t_at.get(a, 0.0)
            fixed(rhs, observe, loss, ch.params, state.y[:, a:b], state.fixed[:, a:b], t0, tt, loc, pt, pr, ft, **kw)  # fmt: skip
            state.t_at[a] = float(tt[-1])

        return advance

    def kernel(self, m: OdeMaths) -> tuple[str, tuple[Any, ...]] | None:
        kw = self.options(m)
        return "fixed", (m.rhs, m.observe, m.loss, kw["rate"], kw["residual"], kw["gd"])

    def failure(self, m: OdeMaths, counts: Mapping[str, int]) -> str | None:
        bad = counts.get("step_limit", 0) + counts.get("diverged", 0)
        if bad:
            return (
                f"{bad} tasks did not finish (step limit {counts.get('step_limit', 0)}, diverged {counts.get('diverged', 0)}): "
                f"raise solver.max_steps ({m.solver.max_steps}), or lower the step"
            )
        return None

    def cause(self, m: OdeMaths) -> str:
        if per_task_steps(m):
            return "the rk4 steps are too large for the fastest tasks; raise solver.steps_per_timescale or use solver.integrator = 'dopri5'"
        return _step_cause(m)


class GradientDescent(FixedSteps):
    """Discrete gradient descent y ← y + η·rhs(y) (Euler's tableau, η = ``solver.lr``), at the
    output step indices ``OdeMaths.steps`` (t = η·step), with the settling rule when the model
    gives ``residual``; each chunk's clock is also its step (``k_at``)."""

    name, tableau, discrete = "gd", METHODS["gd"], True

    def check(self, m: OdeMaths) -> None:
        if m.steps is None:
            raise ConfigError(
                "solver.integrator: gd needs the model's output steps (OdeMaths.steps)"
            )
        super().check(m)

    def output_steps(self, m: OdeMaths) -> np.ndarray | None:
        return m.steps

    def stepper(self, m: OdeMaths, integrators: Any) -> Advance:
        fixed, rhs, observe, loss = integrators.advance_fixed, m.rhs, m.observe, m.loss
        kw = self.options(m)

        def advance(ch, state, tt, steps, loc, pt, pr, ft) -> None:
            a, b = ch.first, ch.first + ch.n
            marks = np.asarray(steps, dtype=np.float64)
            k0 = float(state.k_at.get(a, 0))
            fixed(rhs, observe, loss, ch.params, state.y[:, a:b], state.fixed[:, a:b], k0, marks, loc, pt, pr, ft, **kw)  # fmt: skip
            state.k_at[a] = int(steps[-1])
            state.t_at[a] = float(tt[-1])

        return advance

    def cause(self, m: OdeMaths) -> str:
        return f"the gd learning rate solver.lr = {m.solver.lr:g} is too large for the fastest task; lower solver.lr"


class Adaptive(Solver):
    """Dormand–Prince 5(4), each task with its own step under the one controller
    (:func:`fastdyn.core.steppers.step_factor`, ``solver.rtol``, ``solver.atol``; accepted steps
    capped by ``solver.max_steps``) and, when the model gives ``residual``, the settling rule:
    :func:`fastdyn.drive.integrate_soa.advance_dopri5`. The record holds each task's next step
    ``h``, its counters (accepted, rejected, failed) and, settling, its last |r|."""

    name, tableau, adaptive = "dopri5", METHODS["dopri5"], True
    controller = staticmethod(steppers.step_factor)

    def stepper(self, m: OdeMaths, integrators: Any) -> Advance:
        s, rhs, observe, loss = m.solver, m.rhs, m.observe, m.loss
        dopri5, rtol, atol, cap = integrators.advance_dopri5, float(s.rtol), float(s.atol), int(s.max_steps)  # fmt: skip
        settle = settles(m)
        residual, settle_tol = (m.residual, float(s.settle_tol)) if settle else (None, 0.0)

        def advance(ch, state, tt, steps, loc, pt, pr, ft) -> None:
            a, b = ch.first, ch.first + ch.n
            t0 = state.t_at.get(a, 0.0)
            extra = {}
            if settle:
                extra = {"residual": residual, "rprev": state.rprev[a:b], "settle_tol": settle_tol}
            dopri5(rhs, observe, loss, ch.params, state.y[:, a:b], state.h[a:b], state.counts[:, a:b], t0, tt, rtol, atol, cap, loc, pt, pr, ft, **extra)  # fmt: skip
            state.t_at[a] = float(tt[-1])

        return advance

    def kernel(self, m: OdeMaths) -> tuple[str, tuple[Any, ...]] | None:
        return "dopri5", (m.rhs, m.observe, m.loss, m.residual if settles(m) else None)

    def attrs(self, m: OdeMaths) -> dict[str, Any]:
        return {"dopri5_rtol": float(m.solver.rtol), "dopri5_atol": float(m.solver.atol)}

    def failure(self, m: OdeMaths, counts: Mapping[str, int]) -> str | None:
        if counts.get("failed", 0):
            return (
                f"{counts['failed']} tasks did not finish (dopri5 used up solver.max_steps = {m.solver.max_steps} "
                "accepted steps, or its step fell below the resolution of t): raise solver.max_steps or loosen solver.rtol"
            )
        return None

    def cause(self, m: OdeMaths) -> str:
        return "dopri5 did not control the error; lower solver.rtol or solver.atol"


class ClosedFormOnly(Solver):
    """No integration: the run writes the model's closed form only (the checkpoint's y has no
    columns)."""

    name, simulate = "none", False

    def check(self, m: OdeMaths) -> None:
        return None

    def stepper(self, m: OdeMaths, integrators: Any) -> Advance:
        def advance(*_args: Any) -> None:
            raise RuntimeError("solver.integrator = 'none' integrates nothing")

        return advance


#: ``solver.integrator`` → its solver
SOLVERS: dict[str, Solver] = {
    s.name: s
    for s in (GlobalStep(per_task=FixedSteps()), GradientDescent(), Adaptive(), ClosedFormOnly())
}


def solver_of(m: OdeMaths) -> Solver:
    """The solver that runs ``m`` (``SOLVERS[m.solver.integrator]``, or its variant for the
    model's options); a one-line ConfigError for a name that is not registered."""
    name = str(m.solver.integrator)
    if name not in SOLVERS:
        raise ConfigError(
            f"solver.integrator: {name!r} has no generic solver; registered: {', '.join(sorted(SOLVERS))}"
        )
    return SOLVERS[name].for_maths(m)
