"""The model's config: its own [task] section, and fastdyn's shared ODE sections for the rest."""

from __future__ import annotations

from dataclasses import dataclass

from fastdyn.config.common import device
from fastdyn.config.ode import LogTimeSection, OdeOutputSection, OdeSolverSection
from fastdyn.config.schema import ConfigError, choice, integer, number


@dataclass(frozen=True)
class TaskSection:
    """[task]: n tasks, rates r_s = r0·s^-a, weights P(s) ∝ s^-alpha."""

    n_tasks: int = integer(3000, 1, 10**8, help="number of tasks")
    r0: float = number(1.0, 0.0, 1e6, lo_open=True, help="rate of task 1", units="1/time")
    a: float = number(1.0, 0.0, 10.0, help="rate exponent: r_s = r0·s^-a")
    alpha: float = number(1.5, 0.0, 10.0, lo_open=True, help="weight exponent: P(s) ∝ s^-alpha")
    f0: float = number(1e-3, 0.0, 1.0, lo_open=True, hi_open=True, help="f(0) of every task")


@dataclass(frozen=True)
class LogisticConfig:
    """A whole logistic run (``model = "logistic"``)."""

    model: str = choice("logistic", ("logistic",))
    seed: int = integer(
        0, 0, 2**63 - 1, help="unused (the model is deterministic); kept for the file format"
    )
    device: str = device("cpu, or cuda: fastdyn's generic integrators on the GPU")
    task: TaskSection = TaskSection()
    time: LogTimeSection = LogTimeSection()
    solver: OdeSolverSection = OdeSolverSection()
    output: OdeOutputSection = OdeOutputSection()

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
