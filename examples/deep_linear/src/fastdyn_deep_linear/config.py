"""The model's config: its own [task] and [init] sections, fastdyn's shared ODE sections for the
rest ([time] with a shorter default span)."""

from __future__ import annotations

from dataclasses import dataclass

from fastdyn.config.common import device, model_key, seed
from fastdyn.config.ode import LogTimeSection, OdeOutputSection, OdeSolverSection
from fastdyn.config.schema import ConfigError, choice, integer, like, number


@dataclass(frozen=True)
class TaskSection:
    """[task]: n networks W2 W1 (W1: h×d, W2: o×h), teacher singular values σ_{s,k} = s0·k^-b·s^-a."""

    n_tasks: int = integer(1000, 1, 10**7, help="number of tasks (independent networks)")
    d: int = integer(3, 1, 32, help="input dimension")
    h: int = integer(3, 1, 32, help="hidden width")
    o: int = integer(3, 1, 32, help="output dimension")
    s0: float = number(2.0, 0.0, 1e3, lo_open=True, help="σ of mode 1 of task 1")
    a: float = number(0.5, 0.0, 10.0, help="task exponent: σ_{s,k} ∝ s^-a")
    b: float = number(1.0, 0.0, 10.0, help="mode exponent: σ_{s,k} ∝ k^-b")
    mode: int = integer(1, 1, 32, help="the mode k whose strength u_k = u_kᵀ W2 W1 v_k is tasks/f")


@dataclass(frozen=True)
class InitSection:
    """[init]: aligned (the closed form is exact) or random small weights (it is not)."""

    scheme: str = choice(
        "aligned",
        ("aligned", "random"),
        help="aligned: every mode k ≤ min(d, h, o) at strength u0 in the teacher's basis; random: iid N(0, scale²) entries",
    )
    u0: float = number(1e-3, 0.0, 1e3, lo_open=True, help="aligned: initial strength of each mode")
    scale: float = number(
        1e-2, 0.0, 1e3, lo_open=True, help="random: standard deviation of each weight"
    )


@dataclass(frozen=True)
class TimeSection(LogTimeSection):
    """[time]: log-spaced output times t_min … t_max, in units of τ (the inverse learning rate)."""

    t_max: float = like(LogTimeSection, "t_max", 200.0)


@dataclass(frozen=True)
class DeepLinearConfig:
    """A whole deep-linear run (``model = "deep-linear"``)."""

    model: str = model_key("deep-linear")
    seed: int = seed("seed of the teachers' singular vectors, the hidden basis and random inits")
    device: str = device("cpu, or cuda: fastdyn's generic integrators on the GPU")
    task: TaskSection = TaskSection()
    init: InitSection = InitSection()
    time: TimeSection = TimeSection()
    solver: OdeSolverSection = OdeSolverSection()
    output: OdeOutputSection = OdeOutputSection()

    def check(self) -> None:
        t = self.task
        if t.mode > min(t.d, t.o):
            raise ConfigError(
                f"task.mode: must be ≤ min(task.d, task.o) = {min(t.d, t.o)} (the teacher's modes), got {t.mode}"
            )
        if self.time.t_max <= self.time.t_min:
            raise ConfigError(
                f"time.t_max: must be > time.t_min = {self.time.t_min}, got {self.time.t_max}"
            )
        bad = [s for s in self.output.track if s > t.n_tasks]
        if bad:
            raise ConfigError(
                f"output.track: task indices must be ≤ task.n_tasks ({t.n_tasks}), got {bad[0]}"
            )
