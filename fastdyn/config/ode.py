"""Config sections shared by every per-task ODE model that hands the driver its maths only
(:class:`fastdyn.models._spec.OdeMaths`): the integrator, the output and the log time grid.

A model's root config uses them as they are (``solver: OdeSolverSection = OdeSolverSection()``)
or subclasses them to change a default; every key then means the same in every such model.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import common
from .schema import choice, every, integer, integers, number


@dataclass(frozen=True)
class OdeSolverSection:
    """[solver]: the driver's per-task integrators (the same for every ODE model)."""

    integrator: str = choice(
        "rk4",
        ("rk4", "dopri5", "none"),
        help="rk4: classical RK4 at the nominal step h; dopri5: adaptive Dormand–Prince 5(4), its own step per task; none: the closed form only",
    )
    h: float = number(
        0.05,
        0.0,
        1e9,
        lo_open=True,
        help="rk4's nominal step (each output interval is cut into ⌈Δt/h⌉ equal steps)",
        units="time",
    )
    rtol: float = common.rtol()
    atol: float = common.atol(1e-12)
    max_steps: int = integer(
        10_000_000, 1, 10**12, help="steps allowed per task (rk4: t_max/h, checked before the run; dopri5: the run fails when a task uses them up)"
    )  # fmt: skip
    fast_path: bool = common.fast_path()


@dataclass(frozen=True)
class OdeOutputSection:
    """[output]: tracked tasks, chunking and checkpoints."""

    track: tuple = integers((), 1, help="tasks whose f_s(t) are stored; [] = 1, 10, 100, …")
    chunk_tasks: int = integer(1024, 1024, 10**8, help="tasks per chunk (whole blocks of 1024)")
    times_per_segment: int = integer(
        4, 1, 10**6, help="output times per segment (rows flushed together)"
    )
    checkpoint_every: float | str = every(
        60.0, help="seconds, or '<n> steps' (output times); 0 = every segment"
    )  # fmt: skip


@dataclass(frozen=True)
class LogTimeSection:
    """[time]: log-spaced output times t_min … t_max."""

    t_min: float = number(0.1, 0.0, 1e12, lo_open=True, help="first output time", units="time")
    t_max: float = number(1e3, 0.0, 1e12, lo_open=True, help="last output time", units="time")
    n_times: int = integer(40, 1, 10**6, help="number of output times")
