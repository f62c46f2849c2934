"""The toy model's config: one frozen dataclass per TOML section, rules from fastdyn.config.schema."""

from __future__ import annotations

from dataclasses import dataclass

from fastdyn.config.schema import ConfigError, choice, every, integer, integers, number


@dataclass(frozen=True)
class TaskSection:
    """[task]: n tasks, rates r_s = r0·s^-a, weights P(s) ∝ s^-alpha."""

    n_tasks: int = integer(3000, 1, 10**8, help="number of tasks")
    r0: float = number(1.0, 0.0, 1e6, lo_open=True, help="rate of task 1", units="1/time")
    a: float = number(1.0, 0.0, 10.0, help="rate exponent: r_s = r0·s^-a")
    alpha: float = number(1.5, 0.0, 10.0, lo_open=True, help="weight exponent: P(s) ∝ s^-alpha")
    f0: float = number(1e-3, 0.0, 1.0, lo_open=True, hi_open=True, help="f(0) of every task")


@dataclass(frozen=True)
class TimeSection:
    """[time]: log-spaced output times."""

    t_min: float = number(0.1, 0.0, 1e12, lo_open=True, units="time")
    t_max: float = number(1e3, 0.0, 1e12, lo_open=True, units="time")
    n_times: int = integer(40, 1, 10**6)


@dataclass(frozen=True)
class SolverSection:
    """[solver]: rk4 at a fixed nominal step (``none``: closed form only)."""

    integrator: str = choice("rk4", ("rk4", "none"))
    h: float = number(0.05, 0.0, 1e6, lo_open=True, help="nominal RK4 step", units="time")


@dataclass(frozen=True)
class OutputSection:
    """[output]: tracked tasks, chunking, checkpoints."""

    track: tuple = integers((), 1, help="tasks whose f_s(t) are stored; [] = 1, 10, 100, …")
    chunk_tasks: int = integer(1024, 1024, 10**8, help="tasks per chunk (whole blocks of 1024)")
    times_per_segment: int = integer(4, 1, 10**6)
    checkpoint_every: float | str = every(
        60.0, help="seconds, or '<n> steps' (output times); 0 = every segment"
    )


@dataclass(frozen=True)
class ToyConfig:
    """A whole toy-logistic run."""

    model: str = choice("toy-logistic", ("toy-logistic",))
    seed: int = integer(
        0, 0, 2**63 - 1, help="unused (the toy is deterministic); kept for the file format"
    )
    task: TaskSection = TaskSection()
    time: TimeSection = TimeSection()
    solver: SolverSection = SolverSection()
    output: OutputSection = OutputSection()

    def check(self) -> None:
        if self.time.t_max <= self.time.t_min:
            raise ConfigError(
                f"time.t_max: must be > time.t_min = {self.time.t_min}, got {self.time.t_max}"
            )
        bad = [s for s in self.output.track if s > self.task.n_tasks]
        if bad:
            raise ConfigError(
                f"output.track: task indices must be ≤ task.n_tasks ({self.task.n_tasks}), got {bad[0]}"
            )
