"""msfr-h's maths for the ODE driver (:class:`fastdyn.models.OdeMaths`): MSFR's task tables,
per-task H_s, the flow's kernels and the Riccati closed form (docs/msfr-h.md).

The driver owns the state (v, w) of every task, time, the integrator (``solver.integrator``:
RK4, adaptive dopri5, or none), checkpoints, ``--resume``, the split run and the device; this
module gives it each chunk's parameter block (3 + d² + 3, n) = (#/N, Λ, P(s), H_s row-major, μ,
P0, Q0), the initial (v, w) stacked as (2d, n), and the closed form's per-task terms. Chunks are
cached when they fit in ``TABLE_CACHE_BYTES``. The RK4 step is one for all tasks: ``solver.h``,
or with 'auto' 1/(steps_per_timescale · the fastest task's rate), resolved here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...config.schema import ConfigError
from ...core import saveat
from ...core.device import Device
from .._spec import OdeMaths
from ..msfr.problem import MsfrProblem, default_track
from . import hmat, kernels
from .theory import theory_terms

TABLE_CACHE_BYTES = 1 << 30


@dataclass
class Chunk:
    """Tasks first+1 … first+n."""

    first: int
    n: int
    params: np.ndarray  # (3 + d² + 3, n): #/N, Λ, P(s), H_s row-major, μ, P0, Q0
    y0: np.ndarray  # (2d, n): v0 above w0
    defect: np.ndarray  # ‖H² − μH‖_F / ‖H‖_F²
    rate_scale: np.ndarray  # (#/N) λmax(H) (2|Λ| + 2|f0|): the fastest rate of the task's flow


def build_chunk(
    cfg: Any, problem: MsfrProblem, h_file: np.ndarray | None, first: int, n: int
) -> Chunk:
    """The chunk of tasks first+1 … first+n."""
    tc = problem.chunk(first, n)
    d = int(cfg.h.dim)
    kappa = tc.psi * (1.0 + tc.lam * tc.lam)
    h = hmat.unit_matrices(cfg.h, h_file, cfg.seed, first, n) * kappa[:, None, None]
    v0, w0 = hmat.initial_state(cfg.init, h, cfg.seed, first)
    mu, p0, q0, defect, lmax = hmat.eigen_data(h, v0, w0)
    a = kernels.N_SCALARS + d * d
    params = np.empty((kernels.n_params(d), n))
    params[0], params[1], params[2] = tc.rate, tc.lam, tc.wtest
    params[kernels.N_SCALARS : a] = h.reshape(n, d * d).T
    params[a], params[a + 1], params[a + 2] = mu, p0, q0
    f0 = np.einsum("an,nab,bn->n", v0, h, w0)
    rs = tc.rate * np.abs(lmax) * (2.0 * np.abs(tc.lam) + 2.0 * np.abs(f0))
    y0 = np.ascontiguousarray(np.concatenate([v0, w0]))
    return Chunk(first, n, np.ascontiguousarray(params), y0, defect, rs)


class ChunkCache:
    """``chunk(first, n)``: every chunk cached when all fit in memory, else the last one (the
    driver asks for a chunk's parameters and its initial state one after the other)."""

    def __init__(self, cfg: Any, problem: MsfrProblem, h_file: np.ndarray | None):
        self.cfg, self.problem, self.h_file = cfg, problem, h_file
        d = int(cfg.h.dim)
        per_task = 8 * (kernels.n_params(d) + 2 * d + 2)
        self.keep_all = problem.d * per_task <= TABLE_CACHE_BYTES
        self.cache: dict[tuple[int, int], Chunk] = {}

    def __call__(self, first: int, n: int) -> Chunk:
        key = (first, n)
        if key not in self.cache:
            if not self.keep_all:
                self.cache.clear()
            self.cache[key] = build_chunk(self.cfg, self.problem, self.h_file, first, n)
        return self.cache[key]


#: (units, long_name) of msfr-h's own datasets
DESCRIPTIONS = {
    "tasks/h_defect": (
        "1",
        "defect |H^2 - mu H|_F / |H|_F^2 of each tracked task's H (0: the closed form is exact)",
    ),
}


def theory(params: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The closed form's (test terms, train terms, f), each (n, T), of a parameter block."""
    n, T = params.shape[1], len(times)
    a = params.shape[0] - kernels.N_THEORY
    te, tr, f = np.empty((n, T)), np.empty((n, T)), np.empty((n, T))
    theory_terms(
        np.ascontiguousarray(times, dtype=np.float64),
        params[1], params[0], params[2], params[a], params[a + 1], params[a + 2], te, tr, f,
    )  # fmt: skip
    return te, tr, f


def setup(cfg: Any, device: Device = Device.CPU) -> OdeMaths:
    """The maths of a validated msfr-h config (``fastdyn.models.msfr_h.config``); the driver
    compiles them for ``device``, so they do not depend on it."""
    from .config import read_h_file

    h_file = read_h_file(cfg.h.file) if cfg.h.file is not None else None
    problem = MsfrProblem(cfg.task, SimpleNamespace(scheme="balanced", scale=1.0), cfg.seed)
    d_tasks = problem.d
    times, _ = saveat.output_grid(cfg.time, "rk4", 1.0)
    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else default_track(d_tasks)
    )
    track = track[track <= d_tasks]
    chunk = ChunkCache(cfg, problem, h_file)

    # one pass over the tasks: the closed form's exactness, the fastest rate, tracked defects
    defect_max, fastest = 0.0, 0.0
    tracked_defect = np.full(len(track), np.nan)
    for first, n in problem.chunks(cfg.output.chunk_tasks):
        ch = chunk(first, n)
        defect_max = max(defect_max, float(np.max(ch.defect)))
        fastest = max(fastest, float(np.max(ch.rate_scale)))
        m = (track > first) & (track <= first + n)
        tracked_defect[m] = ch.defect[track[m] - 1 - first]
    integrator = cfg.solver.integrator
    step = cfg.solver.h
    if step == "auto":
        step = (
            1.0 / (cfg.solver.steps_per_timescale * fastest)
            if fastest > 0
            else float(times[-1]) or 1.0
        )
    step = float(step)
    if integrator == "rk4" and float(times[-1]) / step > cfg.solver.max_steps:
        raise ConfigError(
            f"solver.h: RK4 at h = {step:.3g} needs {float(times[-1]) / step:.3g} steps per task to t = {float(times[-1]):g}, more than solver.max_steps = {cfg.solver.max_steps}; lower time.t_max or solver.steps_per_timescale, or raise solver.max_steps"
        )

    exact = defect_max <= hmat.EXACT_DEFECT
    attrs = {"theory_exact": int(exact), "theory_defect_max": defect_max}
    attrs["theory_note"] = (
        "exact: H = μΠ to 1e-12 (simulation = closed form to integrator tolerance)" if exact
        else f"leading order: max ‖H² − μH‖_F/‖H‖_F² = {defect_max:.3g} (error O(‖H − μΠ‖))"
    )  # fmt: skip
    return OdeMaths(
        n_tasks=d_tasks,
        n_state=2 * int(cfg.h.dim),
        rhs=kernels.rhs,
        observe=kernels.observe,
        loss=kernels.loss,
        params=lambda first, n: chunk(first, n).params,
        init=lambda first, n: chunk(first, n).y0,
        times=times,
        track=track,
        solver=replace(cfg.solver, h=step),  # the RK4 step resolved ('auto')
        output=cfg.output,
        theory=theory if cfg.theory.level != "none" else None,
        tail=problem.tail_losses(),
        static={"tasks/h_defect": tracked_defect},
        extra_attrs=attrs,
        descriptions=DESCRIPTIONS,
    )
