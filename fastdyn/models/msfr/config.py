"""Config sections of an MSFR run (``model = "msfr"``); symbols as in docs/theory.md, MSFR.

msfr-h and msfr-attn reuse these sections (subclassed where a default or help differs); the keys every
model shares (seed, device, output) come from :mod:`fastdyn.config.common`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...config import common
from ...config.device import check_supported
from ...config.schema import (
    ConfigError,
    Section,
    check_memory,
    choice,
    flag,
    integer,
    number,
    numbers,
    text,
)
from .task_families import FAMILY_KEYS, FREQUENCY_LAWS, STRENGTH_LAWS, check_given, is_default

#: task fields a table replaces (setting one beside ``task.table`` is an error)
TABLE_REPLACES = ("alpha", "strength0", "gamma", "psi0", "beta", "psi_min", *FAMILY_KEYS)


def _decay(formula: str, law: str) -> Any:
    """The scale s0 of an exponential law (``formula``: where s0 enters; ``law``: its key)."""
    return number(
        100.0,
        0.0,
        1e12,
        lo_open=True,
        help=f"s0 in {formula} ({law} = 'exponential')",
        units="tasks",
    )


def _break(law: str) -> Any:
    """The break s_b of a broken power law (``law``: its key)."""
    return number(100.0, 1.0, 1e10, help=f"s_b of {law} = 'broken-power'", units="tasks")


def _beyond(default: float, lo: float, what: str, law: str, lo_open: bool = False) -> Any:
    """The exponent of a broken power law beyond its break (``what``: which one; ``law``: its
    key), in (lo, 20] or [lo, 20]."""
    return number(
        default, lo, 20.0, lo_open=lo_open, help=f"{what} beyond s_b ({law} = 'broken-power')"
    )


@dataclass(frozen=True)
class TaskSection(Section, prefix="task."):
    """[task]: the MSFR task distribution (docs/theory.md, MSFR)."""

    n_tasks: int = integer(10_000, 1, 10**10, help="number of task types N_s")
    alpha: float = number(2.0, 0.0, 20.0, lo_open=True, help="Zipf exponent: P(s) ∝ s^-α")
    strength0: float = number(1.0, 0.0, 1e6, lo_open=True, help="Λ0 in Λ_s = Λ0 s^-γ")
    gamma: float = number(0.0, -5.0, 20.0, help="task-strength exponent γ")
    psi0: float = number(
        100.0, 1.0, 1e9, help="ψ0 in ψ_s = max(psi_min, round(ψ0 s^-β))", units="tokens"
    )
    beta: float = number(0.0, -5.0, 20.0, help="context-length exponent β")
    psi_min: int = integer(1, 1, 10**9, help="smallest context length", units="tokens")
    n_samples: float | str = number(
        "inf", 1.0, 1e18, extra=("inf",), help='training sequences N; "inf" gives #_s/N = P(s)'
    )
    model_size: int | str = integer(
        "all",
        1,
        10**10,
        extra=("all",),
        help='model size D (tasks s ≤ D are represented); "all" = n_tasks',
    )
    x_dist: str = choice(
        "rademacher",
        ("rademacher", "gaussian"),
        help="scalar token input distribution ('gaussian': model = 'msfr-attn' only)",
    )
    embedding: str = choice(
        "block", ("block",), help="token embedding; 'shared' is trained only by msfr-attention"
    )
    frequency_law: str = choice(
        "power",
        FREQUENCY_LAWS,
        help="family of P(s): power (s^-α), exponential (e^-(s−1)/s0), broken-power (s^-α up to s_b, s^-α2 beyond); docs/task-tables.md",
    )
    frequency_decay: float = _decay("P(s) ∝ e^-(s−1)/s0", "frequency_law")
    frequency_break: float = _break("frequency_law")
    alpha2: float = _beyond(2.0, 0.0, "exponent α2 of P(s)", "frequency_law", lo_open=True)
    strength_law: str = choice(
        "power",
        STRENGTH_LAWS,
        help="family of Λ_s: power (Λ0 s^-γ), exponential (Λ0 e^-(s−1)/s0), broken-power (s^-γ up to s_b, s^-γ2 beyond), lognormal (Λ0 s^-γ e^(σ z_s), z_s ~ N(0,1) per task from the seed)",
    )
    strength_decay: float = _decay("Λ_s = Λ0 e^-(s−1)/s0", "strength_law")
    strength_break: float = _break("strength_law")
    gamma2: float = _beyond(1.0, -5.0, "exponent γ2 of Λ_s", "strength_law")
    strength_sigma: float = number(
        1.0,
        0.0,
        10.0,
        lo_open=True,
        help="σ of ln Λ_s about its median Λ0 s^-γ (strength_law = 'lognormal')",
    )
    table: str | None = text(
        None,
        help="a task table file (.npz, .csv, .h5) with columns weight (or P), strength, psi, optional counts; its length is n_tasks (docs/task-tables.md)",
    )

    def check(self) -> None:
        """Cross-field rules."""
        if self.n_samples != "inf" and float(self.n_samples) != int(float(self.n_samples)):
            raise ConfigError(
                f"task.n_samples: must be a whole number of sequences or 'inf', got {self.n_samples!r}"
            )

    def resolve(self, given: frozenset) -> TaskSection:
        """Without a table: a family parameter given beside a law that does not read it is an
        error (:func:`~fastdyn.models.msfr.task_families.check_given`). With ``task.table``: n_tasks = the table's length (a given n_tasks must equal it), and
        the power-law fields it replaces must not be given; a ``counts`` column fixes N = Σ #_s."""
        if self.table is None:
            check_given(self, given)
            return self
        from .task_table import open_table

        for k in TABLE_REPLACES:
            if k in given and not is_default(
                self, k
            ):  # defaults: a resolved config written back out
                raise ConfigError(
                    f"task.{k}: not used with task.table (the table gives P, Λ and ψ of every task); remove task.{k} or task.table"
                )
        tab = open_table(self.table)
        if "n_tasks" in given and self.n_tasks != tab.n:
            raise ConfigError(
                f"task.n_tasks: task.table {self.table} has {tab.n} rows (tasks); leave n_tasks out or set it to {tab.n}, got {self.n_tasks}"
            )
        if not tab.has_counts:
            return self.derived(n_tasks=tab.n)
        total = tab.counts_total()
        if "n_samples" in given and (
            self.n_samples == "inf" or int(float(self.n_samples)) != total
        ):
            raise ConfigError(
                f"task.n_samples: task.table {self.table} has a counts column, which fixes N = Σ counts = {total}; leave n_samples out or set it to {total}, got {self.n_samples!r}"
            )
        return self.derived(n_tasks=tab.n, n_samples=float(total))

    @property
    def d(self) -> int:
        """Resolved model size D = min(model_size, n_tasks)."""
        return self.n_tasks if self.model_size == "all" else min(int(self.model_size), self.n_tasks)


@dataclass(frozen=True)
class InitSection(Section, prefix="init."):
    """[init]: initial v_s, w_s (docs/theory.md, MSFR)."""

    scheme: str = choice(
        "balanced",
        ("balanced", "random"),
        help="balanced: v = w = σ0 û_s; random: i.i.d. N(0, σ0²) per task",
    )
    scale: float = number(1e-3, 0.0, 1e3, lo_open=True, help="σ0")


@dataclass(frozen=True)
class TimeSection(Section, prefix="time."):
    """[time]: the output time grid (gradient-flow time t; gd: t = η·step)."""

    grid: str = choice("log", ("log", "linear", "explicit"), help="spacing of the output times")
    t_min: float = number(
        1e-2, 0.0, lo_open=True, help="first output time after 0 (log/linear grids)"
    )
    t_max: float = number(1e12, 0.0, 1e15, lo_open=True, help="last output time")
    n_times: int = integer(256, 1, 10**7, help="number of output times (log/linear grids)")
    include_zero: bool = flag(True, help="also record t = 0")
    times: tuple = numbers(
        (), 0.0, help="explicit output times (grid = 'explicit'), strictly increasing"
    )

    def check(self) -> None:
        if self.grid == "explicit":
            if len(self.times) == 0:
                raise ConfigError(
                    "time.times: must be a non-empty list of times when time.grid = 'explicit'"
                )
            if any(b <= a for a, b in zip(self.times, self.times[1:], strict=False)):
                raise ConfigError("time.times: must be strictly increasing")
        elif self.t_min >= self.t_max:
            raise ConfigError(
                f"time.t_min: must be < time.t_max ({self.t_max:g}), got {self.t_min:g}"
            )

    @property
    def t_end(self) -> float:
        """The last output time."""
        return self.times[-1] if self.grid == "explicit" else self.t_max

    @property
    def n_grid(self) -> int:
        """The number of output times after 0 (t = 0 itself not counted)."""
        return len(self.times) if self.grid == "explicit" else self.n_times


@dataclass(frozen=True)
class SolverSection(Section, prefix="solver."):
    """[solver]: how the v/w dynamics are integrated (docs/theory.md, MSFR)."""

    integrator: str = choice(
        "dopri5",
        ("dopri5", "rk4", "gd", "none"),
        help="per-task adaptive DP5(4), per-task fixed-step RK4, discrete GD, or theory only",
    )
    rtol: float = common.rtol()
    atol: float = common.atol()
    steps_per_timescale: int = integer(200, 4, 10**7, help="rk4 steps per 1/(a_s R_s) of each task")
    lr: float = number(1e-2, 0.0, 1e6, lo_open=True, help="gd learning rate η (t = η·step)")
    settle_tol: float = number(
        1e-13, 0.0, 1e-3, lo_open=True, help="a task whose |f_s − Λ_s| ≤ settle_tol·Λ_s is frozen"
    )
    max_steps: int = integer(
        100_000_000, 1, 10**12, help="steps allowed per task; a task that needs more fails the run"
    )
    fast_path: bool = common.fast_path()


@dataclass(frozen=True)
class TheorySection(Section, prefix="theory."):
    """[theory]: the closed form written beside the simulation (docs/theory.md, MSFR)."""

    level: str = choice(
        "exact",
        ("leading", "first_order", "exact", "none"),
        help="f0, f0 + ε f1, the exact finite-ψ reduction, or none",
    )


@dataclass(frozen=True)
class OutputSection(Section, prefix="output."):
    """[output]: what is stored besides the losses."""

    track: tuple = common.track(
        "task indices s whose f_s(t) are stored; [] = 1, 3, 10, 30, … up to the model size"
    )
    chunk_tasks: int = integer(
        262_144, 1024, 2**31, help="tasks per kernel call (rounded down to a multiple of 1024)"
    )
    times_per_segment: int = integer(
        16, 1, 10**6, help="output times computed (and flushed) per pass over the tasks"
    )
    checkpoint_every: float | str = common.checkpoint_every(
        'resume state written to /checkpoint every this many seconds (60, "60s") or output times ("100 steps"); 0 = after every segment; "off" = only when a signal stops the run'
    )
    keep_checkpoint: bool = common.keep_checkpoint(", a fraction of the size")


@dataclass(frozen=True)
class MsfrConfig(Section):
    """A whole MSFR run."""

    model: str = common.model_key("msfr")
    seed: int = common.seed("seed of every random draw (counts, init)")
    device: str = common.device(
        "where the kernels run: cpu, or cuda (rk4/gd/dopri5 and the leading/first-order closed form; docs/cuda.md)"
    )
    task: TaskSection = TaskSection()
    init: InitSection = InitSection()
    time: TimeSection = TimeSection()
    solver: SolverSection = SolverSection()
    theory: TheorySection = TheorySection()
    output: OutputSection = OutputSection()

    def check(self) -> None:
        check_supported(self)
        if self.solver.integrator == "gd":
            common.check_step_budget(self, "lr", "gd")
        if self.task.x_dist != "rademacher":
            raise ConfigError(
                f"task.x_dist: {self.task.x_dist!r} is not modelled by model = 'msfr' (its expected dynamics use Rademacher tokens, E x⁴ = 1; Gaussian tokens move the fixed point at O(1/ψ)); use 'rademacher', or model = 'msfr-attn' to train on Gaussian sequences"
            )
        common.check_computes(self)
        need = _bytes_needed(self)
        _, field, what, fix = max(_memory_terms(self))  # the term that dominates names the field
        check_memory(need, field, what, fix)
        common.check_track(self)


def _bytes_needed(cfg: MsfrConfig) -> float:
    """Rough peak memory of a run: the terms of :func:`_memory_terms`, plus per block of 1024
    tasks the normaliser, counts and tail sums (64 bytes) and the process itself (Python, numba,
    h5py: 256 MiB)."""
    blocks = 64.0 * cfg.task.n_tasks / 1024
    return sum(t[0] for t in _memory_terms(cfg)) + blocks + 256 * 2**20


def _memory_terms(cfg: MsfrConfig) -> list[tuple[float, str, str, str]]:
    """(bytes, field, what, how to lower it) of each part of a run's memory that a config field
    scales: per represented task 28 float64 (the integrator state, 65 bytes, is allocated up
    front and touched as the first pass reaches each chunk; the cached task table, 64 bytes;
    checkpoint and kernel temporaries) — measured 120–145 bytes per task for dopri5 and rk4 at
    2–4 million tasks; theory-only runs keep no state and cache the tables only up to 1 GiB (one
    chunk otherwise); the output grid and its closed form (≈ 4 float64 per time per tracked
    series); the closed form's per-block partial sums over the whole grid (:func:`_grid_bytes`)."""
    n_times = cfg.time.n_grid
    d = cfg.task.d
    per_task = (
        8.0 * 28 * d
        if cfg.solver.integrator != "none"
        else min(64.0 * d, 2.0**30) + 64.0 * min(d, cfg.output.chunk_tasks)
    )
    n_series = 4 + max(len(cfg.output.track), 8)
    return [
        (per_task, "task.model_size", f"D = {d} represented tasks (state, tables, checkpoint)",
         "lower task.model_size or task.n_tasks"),
        (8.0 * 8 * n_times * n_series, "output.track",
         f"{n_times} output times × {len(cfg.output.track)} tracked tasks (the saved series and their closed form)",
         "lower time.n_times or track fewer tasks"),
        (_grid_bytes(cfg), "time.n_times",
         f"{n_times} output times × {cfg.output.chunk_tasks} tasks per chunk (the closed form's per-block partial sums)",
         "lower time.n_times or output.chunk_tasks"),
    ]  # fmt: skip


def _grid_bytes(cfg: MsfrConfig) -> float:
    """The closed form over the whole output grid at once: per chunk, per block of 1024 tasks and
    per output time, the test and train partial sums (2 float64), summed in block order."""
    if cfg.theory.level == "none":
        return 0.0
    n_times = cfg.time.n_grid
    per_chunk = min(cfg.task.n_tasks, cfg.output.chunk_tasks)
    return 2 * 8.0 * -(-per_chunk // 1024) * n_times
