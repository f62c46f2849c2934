"""MSFR's entry (``ENTRY``): config schema, devices, warm-up variants and analysis hooks."""

from typing import Any

import numpy as np

from ...config.schema import ConfigError
from ...core.device import Device
from .. import _spec
from .config import MsfrConfig
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

#: the argument types :func:`fastdyn.models.msfr.integrate.integrate` passes the CPU kernels
#: (:mod:`fastdyn.models.msfr.integrate_kernels`), as numba's signature text
_STATE = ", ".join(["float64[::1]"] * 10) + ", int8[::1], int64[::1]"  # lam … rprev, status, steps
_TAIL = "float64, int64, int64[::1], float64[:, ::1], float64[:, ::1], float64[:, ::1], int64[::1], int64"  # fmt: skip
#: dopri5_kernel(lam … steps, rejected, q, t0, times, rtol, atol, settle_tol, max_steps, tpos,
#: test_part, train_part, f_track, stop, bins)
DOPRI5_ARGS = f"({_STATE}, int64[::1], float64, float64, float64[::1], float64, float64, {_TAIL})"
#: lanes_kernel(is_gd, lam … steps, q, mark0, marks, spt, eta, settle_tol, max_steps, tpos,
#: test_part, train_part, f_track, stop, bins): rk4 and gd
LANES_ARGS = f"(boolean, {_STATE}, float64, float64, float64[::1], float64, float64, {_TAIL})"
_KERNELS = "fastdyn.models.msfr.integrate_kernels"
_THEORY = "fastdyn.models.msfr.theory"
#: _loss_partials_kernel(level, times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, rtol, test_p,
#: train_p, bad): the closed form's loss, every level
PARTIALS_ARGS = (
    "(int64, " + ", ".join(["float64[::1]"] * 9) + ", float64, float64[:, ::1], float64[:, ::1], int64[:, :, ::1])"
)  # fmt: skip
#: _f_curves_kernel(level, times, lam, psi, rate, v0x, v0y, w0x, w0y, rtol, out): the tracked tasks'
#: closed-form f, reached after the closed form's loss
F_CURVES_ARGS = "(int64, " + ", ".join(["float64[::1]"] * 8) + ", float64, float64[:, ::1])"


def _two_phases(cfg: Any) -> bool:
    """A closed form and an integrator on the fast path (the generic solver's kernel is
    declared by the driver)."""
    return cfg.theory.level != "none" and cfg.solver.integrator != "none" and cfg.solver.fast_path


def precompile(cfg: Any) -> tuple[tuple[str, str], ...]:
    """The closed form's kernel (one signature for every level; ≈ 12 s to compile alone, the
    larger part of a first run's compiling), then the tracked tasks' closed-form f (≈ 0.6 s after
    it: they share their callees), compiled in the second process while the run compiles
    :func:`compile_here`'s; nothing for a run with one phase (no closed form, or no
    integrator), or on the generic solver (``solver.fast_path`` false)."""
    if not _two_phases(cfg):
        return ()
    return (
        (f"{_THEORY}:_loss_partials_kernel", PARTIALS_ARGS),
        (f"{_THEORY}:_f_curves_kernel", F_CURVES_ARGS),
    )


def compile_here(cfg: Any) -> tuple[tuple[str, str], ...]:
    """The integrator's kernel (dopri5's, or the lane kernel of rk4 and gd: ≈ 7 s to compile),
    compiled by the run itself after its set-up (task table and checks, ≈ 3–4 s with the
    interpreter's start) while the second process compiles the closed form."""
    if not _two_phases(cfg):
        return ()
    if cfg.solver.integrator == "dopri5":
        return ((f"{_KERNELS}:dopri5_kernel", DOPRI5_ARGS),)
    return ((f"{_KERNELS}:lanes_kernel", LANES_ARGS),)


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
    warmup=_spec.WarmupHooks(
        sizes=_TINY, variants=_VARIANTS, precompile=precompile, compile_here=compile_here
    ),
)
