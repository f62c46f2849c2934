"""① Config keys and cross-section rules that several models share, declared once.

Fields: the top-level ``model``, ``seed`` and ``device``, and a section's own ``seed``; the ``[output]`` keys of a resumable run
(``track``, ``checkpoint_every``, ``keep_checkpoint``); the optimiser keys of the trained models;
the dopri5 tolerances. Each is a factory: the key's type, default and allowed values live here, the
help text, which says what the model's seed draws or what its checkpoint holds, is the model's.

Rules: the cross-section checks (``output.track`` within ``task.n_tasks``, a run that computes
something, a fixed step's budget, ``schedule.save_steps`` within ``schedule.epochs``), called from
a section's ``check()`` with the config (``check_track(self)``), so a rule and its one-line error
read the same in every model.

Every section of fastdyn's own models derives from :class:`~fastdyn.config.schema.Section`, so it
validates the same way whether :func:`~fastdyn.config.load.build` makes it from TOML or Python
code constructs it directly.
"""

from __future__ import annotations

from typing import Any

from .device import DEVICES
from .schema import OPTIMIZERS, ConfigError, choice, every, flag, integer, integers, number

__all__ = [
    "SEED_MAX", "atol", "beta1", "beta2", "check_computes", "check_save_steps",
    "check_step_budget", "check_track", "checkpoint_every", "device",
    "keep_checkpoint", "model_key", "momentum", "optimizer", "rtol", "section_seed", "seed", "track",
]  # fmt: skip

#: the largest seed of the models whose draws take a signed 64-bit seed
SEED_MAX = 2**63 - 1


# --- the top level ----------------------------------------------------------------------------


def model_key(name: str) -> Any:
    """The top-level ``model`` of a schema that serves the one model ``name``."""
    return choice(name, (name,))


def seed(help: str, hi: int | None = SEED_MAX) -> Any:
    """The top-level ``seed`` (0 by default, ≥ 0; ``hi``: the largest, None for no bound)."""
    return integer(0, 0, hi, help=help)


def section_seed(what: str) -> Any:
    """A section's own ``seed`` of ``what`` it draws (≥ 0), omitted: the run's ``seed``."""
    return integer(None, 0, help=f"seed of {what}; omitted = the run's seed")


def device(help: str) -> Any:
    """The top-level ``device``: cpu (the default) or cuda; :func:`check_supported` says where
    the model has no CUDA kernel."""
    return choice("cpu", DEVICES, help=help)


# --- [output] -------------------------------------------------------------------------------------


def track(help: str) -> Any:
    """``output.track``: task indices s ≥ 1 whose f_s(t) are stored; see :func:`check_track`."""
    return integers((), 1, help=help)


def checkpoint_every(help: str) -> Any:
    """``output.checkpoint_every``: every 60 s by default (:func:`~fastdyn.config.schema.every`)."""
    return every(60.0, help=help)


def keep_checkpoint(note: str = "") -> Any:
    """``output.keep_checkpoint`` (``note``: what dropping it saves, appended to the help)."""
    return flag(
        False,
        help=f"keep /checkpoint in a complete file (else the finished file is rewritten without it{note})",
    )


# --- [optim] and [solver] -----------------------------------------------------------------------


def optimizer() -> Any:
    """``optim.name``: one of drive/optim.py's optimisers."""
    return choice("gd", OPTIMIZERS, help="optimiser")


def momentum() -> Any:
    return number(0.0, 0.0, 1.0, hi_open=True, help="sgd heavy-ball μ")


def beta1() -> Any:
    return number(0.9, 0.0, 1.0, hi_open=True, help="adam β1")


def beta2() -> Any:
    return number(0.999, 0.0, 1.0, hi_open=True, help="adam β2")


def fast_path() -> Any:
    """``solver.fast_path``: run a model's registered fast path for its integrator."""
    return flag(
        True,
        help="use the model's specialised integrator for solver.integrator where it has one; false: the generic solver on the same maths",
    )


def rtol() -> Any:
    """``solver.rtol`` of dopri5."""
    return number(1e-8, 1e-14, 1e-2, help="dopri5 relative tolerance")


def atol(default: float = 1e-14) -> Any:
    """``solver.atol`` of dopri5."""
    return number(default, 0.0, 1.0, lo_open=True, help="dopri5 absolute tolerance")


# --- rules across sections ------------------------------------------------------------------------


def check_track(cfg: Any) -> None:
    """Every ``output.track`` index names a task: ≤ ``task.n_tasks``."""
    bad = [s for s in cfg.output.track if s > cfg.task.n_tasks]
    if bad:
        keep = ",".join(str(s) for s in cfg.output.track if s <= cfg.task.n_tasks)
        raise ConfigError(
            f"output.track: task indices must be ≤ task.n_tasks ({cfg.task.n_tasks}), got {bad[0]}; "
            f"keep the smaller ones (--set output.track=[{keep}]) or use [] for the default"
        )


def check_computes(cfg: Any) -> None:
    """A run integrates (``solver.integrator``) or writes the closed form (``theory.level``)."""
    if cfg.solver.integrator == "none" and cfg.theory.level == "none":
        raise ConfigError(
            "solver.integrator: 'none' needs theory.level other than 'none' (nothing would be computed)"
        )


def check_step_budget(cfg: Any, key: str, method: str, per: str = "") -> None:
    """A fixed step ``solver.<key>`` (gd's learning rate, RK4's h) reaches the last output time
    (``time.t_end``) within ``solver.max_steps`` steps (``per``: " per task" where each task
    takes them)."""
    n = cfg.time.t_end / float(getattr(cfg.solver, key))
    if n > cfg.solver.max_steps:
        raise ConfigError(
            f"solver.{key}: {method} needs t_max / {key} = {n:.3g} steps{per}, more than solver.max_steps = {cfg.solver.max_steps}; raise {key} or max_steps, or lower time.t_max"
        )


def check_save_steps(schedule: Any, *, name_step: bool = True) -> None:
    """``schedule.save_steps`` lie within ``schedule.epochs`` (``name_step``: the error names the
    first step beyond)."""
    bad = [s for s in schedule.save_steps if s > schedule.epochs]
    if bad:
        got = f", got {bad[0]}" if name_step else ""
        raise ConfigError(
            f"schedule.save_steps: must be ≤ schedule.epochs ({schedule.epochs}){got}"
        )
