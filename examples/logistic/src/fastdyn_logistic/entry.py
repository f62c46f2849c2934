"""The model's entry: its maths (``setup`` → :class:`fastdyn.models.OdeMaths`) and ``ENTRY``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastdyn.core.device import Device
from fastdyn.models import AnalysisHooks, ModelEntry, OdeMaths, RunHooks, WarmupHooks

from . import kernels
from .config import LogisticConfig
from .laws import SCALING


def setup(cfg: Any, device: Device = Device.CPU) -> OdeMaths:
    """The maths of a validated config (the driver compiles them for ``device``)."""
    t = cfg.task
    n = t.n_tasks
    norm = float(np.sum(np.arange(1, n + 1, dtype=np.float64) ** -t.alpha))

    def params(first: int, m: int) -> np.ndarray:
        s = np.arange(first + 1, first + m + 1, dtype=np.float64)
        return np.stack([t.r0 * s**-t.a, np.ones(m), s**-t.alpha / norm])

    def theory(p: np.ndarray, times: np.ndarray):
        r, K, w = p
        f = kernels.closed_form(times, r, K, t.f0)
        e2 = (f - K[:, None]) ** 2 / 2.0
        return w[:, None] * e2, r[:, None] * e2, f

    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else 10 ** np.arange(int(np.log10(n)) + 1, dtype=np.int64)
    )
    return OdeMaths(
        n_tasks=n,
        n_state=1,
        rhs=kernels.rhs,
        observe=kernels.observe,
        loss=kernels.loss,
        params=params,
        init=lambda first, m: np.full((1, m), t.f0),
        times=np.geomspace(cfg.time.t_min, cfg.time.t_max, cfg.time.n_times),
        track=track,
        solver=cfg.solver,
        output=cfg.output,
        theory=theory,
    )


ENTRY = ModelEntry(
    name="logistic",
    kind="ode",
    summary="example plug-in: per-task logistic flow df/dt = r f (K − f) beside its closed form",
    run=RunHooks(
        setup=setup,
        schema=LogisticConfig,
        # fastdyn compiles the integrators and these kernels for the GPU
        devices=(Device.CPU, Device.CUDA),
    ),
    analysis=AnalysisHooks(scaling=SCALING),  # the law `fastdyn fit` shows beside its fits
    warmup=WarmupHooks(sizes=("task.n_tasks=2000", "time.n_times=8")),
)
