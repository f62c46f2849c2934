"""The model's entry: its maths (``setup`` → :class:`fastdyn.models.OdeMaths`) and ``ENTRY``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastdyn.core.device import Device
from fastdyn.models import (
    AnalysisHooks,
    ModelEntry,
    OdeMaths,
    RunHooks,
    WarmupHooks,
    stored_value,
)

from . import kernels
from .config import DeepLinearConfig
from .tables import singular_values, tables

#: the root ``note`` of a run whose closed form is not exact (``fastdyn inspect`` shows it)
RANDOM_NOTE = (
    "theory/* curves are the aligned-init mode solution (Saxe et al. 2014) with each mode k "
    "starting at ‖W1(0) v_k + W2(0)ᵀ u_k‖²/4: an approximation for this run's random init, "
    "not exact (the modes interact while they align)"
)


def setup(cfg: Any, device: Device = Device.CPU) -> OdeMaths:
    """The maths of a validated config (the driver compiles them for ``device``)."""
    t, n = cfg.task, cfg.task.n_tasks
    last: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def table(first: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        # params and init of a chunk are asked for one after the other: draw the tasks once
        if (first, m) not in last:
            last.clear()
            last[(first, m)] = tables(t, cfg.init, cfg.seed, n, first, m)
        return last[(first, m)]

    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else 10 ** np.arange(int(np.log10(n)) + 1, dtype=np.int64)
    )
    aligned = cfg.init.scheme == "aligned"
    return OdeMaths(
        n_tasks=n,
        n_state=t.h * t.d + t.o * t.h,
        rhs=kernels.rhs,
        observe=kernels.observe,
        loss=kernels.loss,
        params=lambda first, m: table(first, m)[0],
        init=lambda first, m: table(first, m)[1],
        times=np.geomspace(cfg.time.t_min, cfg.time.t_max, cfg.time.n_times),
        track=track,
        solver=cfg.solver,
        output=cfg.output,
        theory=lambda p, times: kernels.closed_form(p, times, t.mode),
        extra_attrs={"theory_exact": int(aligned)} | ({} if aligned else {"note": RANDOM_NOTE}),
    )


def task_strengths(run: Any, index: np.ndarray) -> np.ndarray:
    """σ_{s,m} of the stored mode m for tasks ``index`` (1-based), from the run's config: what
    tasks/f approaches, so ``plot --kind tasks`` shows u_m/σ_m."""
    get = lambda k, dflt: stored_value(run, f"task.{k}", dflt)  # noqa: E731
    m = int(get("mode", 1))
    sig = singular_values(
        index, m, float(get("s0", 2.0)), float(get("a", 0.5)), float(get("b", 1.0))
    )
    return sig[m - 1]


ENTRY = ModelEntry(
    name="deep-linear",
    kind="ode",
    summary="example plug-in: two-layer linear networks (W1, W2 per task) beside Saxe et al.'s mode solution",
    run=RunHooks(
        setup=setup,
        schema=DeepLinearConfig,
        # fastdyn compiles the integrators and these kernels for the GPU
        devices=(Device.CPU, Device.CUDA),
    ),
    analysis=AnalysisHooks(
        task_strengths=task_strengths,
        fit_note=(
            "deep-linear: the loss is a sum of sigmoidal mode transitions (Saxe et al. 2014); "
            "no power law is derived for it"
        ),
    ),
    warmup=WarmupHooks(sizes=("task.n_tasks=1024", "time.n_times=8")),
)
