"""MSFR's entry (``ENTRY``): config schema, devices, warm-up variants and analysis hooks."""

from typing import Any

import numpy as np

from ...config.msfr import MsfrConfig
from ...config.schema import ConfigError
from ...core.device import Device
from .. import _spec
from .fit_laws import SCALING
from .setup import setup


def check_device(cfg: Any) -> None:
    """The closed form at level 'exact' has no CUDA kernel."""
    if cfg.theory.level == "exact":
        raise ConfigError(
            "theory.level: 'exact' has no CUDA kernel; use 'leading', 'first_order' or 'none' with device = 'cuda', or device = 'cpu'"
        )


def task_strengths(run: Any, index: np.ndarray) -> np.ndarray:
    """Λ_s = strength0 · s^-γ of the tasks ``index`` (1-based), from the run's config."""
    lam0 = float(_spec.stored_value(run, "task.strength0", 1.0))
    gamma = float(_spec.stored_value(run, "task.gamma", 0.0))
    return lam0 * index.astype(float) ** -gamma


_TINY = ("task.n_tasks=3000", "time.n_times=6", "output.track=[1, 2]")


def compile_beside(cfg: Any) -> tuple[str, ...] | None:
    """A closed form beside an integrator, the integrator not compiled yet: a small
    run without the closed form compiles it (≈ 7 s of dopri5's kernels) while this run compiles
    the closed form, which it computes first (≈ 12 s). The small run integrates its 3000 tasks
    only to 10 t_min, so it lasts about as long as its compiling whatever the solver settings. A
    task table (its length fixes n_tasks) or an explicit time grid is not shrunk: None."""
    if cfg.theory.level == "none" or cfg.solver.integrator == "none":
        return None
    if cfg.task.table is not None or cfg.time.grid == "explicit":
        return None
    from ..._cache import has_cached
    from .integrate_kernels import dopri5_kernel, lanes_kernel

    if has_cached(dopri5_kernel if cfg.solver.integrator == "dopri5" else lanes_kernel):
        return None
    t_max = min(cfg.time.t_max, 10.0 * cfg.time.t_min)
    return (*_TINY, 'theory.level="none"', f"time.t_max={t_max!r}")


#: ``fastdyn warmup``: runs that reach the integrators, closed forms and paths the presets do not
_VARIANTS = (
    (
        "msfr rk4, leading, random init",
        "quickstart",
        (
            'solver.integrator="rk4"',
            "solver.steps_per_timescale=8",
            'theory.level="leading"',
            'init.scheme="random"',
            "time.t_max=1e4",
        ),
    ),
    (
        "msfr gd, exact",
        "quickstart",
        ('solver.integrator="gd"', "solver.lr=0.01", "time.t_max=1", 'theory.level="exact"'),
    ),
    (
        "msfr dopri5, finite data, exact",
        "quickstart",
        ("task.n_samples=100000", 'theory.level="exact"', "task.model_size=1000"),
    ),
    (
        "msfr task families (column path)",
        "msfr_families",
        ('task.strength_law="exponential"', "task.strength_decay=100"),
    ),
    (
        "msfr theory only, first order",
        "quickstart",
        ('solver.integrator="none"', 'theory.level="first_order"'),
    ),
    (
        "msfr theory only, leading, finite data",
        "quickstart",
        ('solver.integrator="none"', 'theory.level="leading"', "task.n_samples=100000"),
    ),
)  # fmt: skip


ENTRY = _spec.ModelEntry(
    name="msfr",
    kind="ode",
    summary="multitask sparse feature regression: per-task v/w gradient flow and closed forms",
    default=True,
    run=_spec.RunHooks(
        setup=setup,
        schema=MsfrConfig,
        devices=(Device.CPU, Device.CUDA),
        check_device=check_device,
    ),
    analysis=_spec.AnalysisHooks(task_strengths=task_strengths, scaling=SCALING),
    warmup=_spec.WarmupHooks(sizes=_TINY, variants=_VARIANTS, compile_beside=compile_beside),
)
