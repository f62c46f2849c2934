"""msfr-h's setup for the ODE driver: MSFR's task tables, per-task H_s, the generic RK4 or
dopri5 and the Riccati closed form (docs/msfr-h.md).

Each chunk holds the kernels' parameter block (3 + d², n) = (#/N, Λ, P(s), H_s row-major), the
initial (v, w) and the closed form's per-task constants (μ, P0, Q0) and H's defect
‖H² − μH‖_F/‖H‖_F². Chunks are cached when they fit in ``TABLE_CACHE_BYTES``. The RK4 step is one
for all tasks: ``solver.h``, or with 'auto' 1/(steps_per_timescale · the fastest task's rate).
dopri5 (``solver.rtol``, ``atol``, ``max_steps``) keeps each task's next step and its step counters
(accepted, rejected, failed) in the state and in checkpoints, so a resumed run takes the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...config.schema import ConfigError
from ...core.soa_state import SoaState, soa_checkpoint
from ...problems.msfr import MsfrProblem, default_track
from ...reduce import block_partials
from .._spec import OdeSetup
from . import hmat, kernels
from .theory import theory_kernel

TABLE_CACHE_BYTES = 1 << 30


@dataclass
class Chunk:
    """Tasks first+1 … first+n."""

    first: int
    n: int
    params: np.ndarray  # (3 + d², n): #/N, Λ, P(s), H_s row-major
    v0: np.ndarray  # (d, n)
    w0: np.ndarray
    mu: np.ndarray  # (n,) closed form: μ, P0, Q0
    p0: np.ndarray
    q0: np.ndarray
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
    params = np.empty((kernels.N_SCALARS + d * d, n))
    params[0], params[1], params[2] = tc.rate, tc.lam, tc.wtest
    params[kernels.N_SCALARS :] = h.reshape(n, d * d).T
    f0 = np.einsum("an,nab,bn->n", v0, h, w0)
    rs = tc.rate * np.abs(lmax) * (2.0 * np.abs(tc.lam) + 2.0 * np.abs(f0))
    return Chunk(first, n, np.ascontiguousarray(params), v0, w0, mu, p0, q0, defect, rs)


class ChunkCache:
    """``chunk(first, n)``, cached when every chunk fits in memory."""

    def __init__(self, cfg: Any, problem: MsfrProblem, h_file: np.ndarray | None):
        self.cfg, self.problem, self.h_file = cfg, problem, h_file
        d = int(cfg.h.dim)
        per_task = 8 * (kernels.N_SCALARS + d * d + 2 * d + 5)
        self.cache: dict | None = {} if problem.d * per_task <= TABLE_CACHE_BYTES else None

    def __call__(self, first: int, n: int) -> Chunk:
        if self.cache is None:
            return build_chunk(self.cfg, self.problem, self.h_file, first, n)
        key = (first, n)
        if key not in self.cache:
            self.cache[key] = build_chunk(self.cfg, self.problem, self.h_file, first, n)
        return self.cache[key]


#: (units, long_name) of msfr-h's own datasets
DESCRIPTIONS = {
    "tasks/h_defect": (
        "1",
        "defect |H^2 - mu H|_F / |H|_F^2 of each tracked task's H (0: the closed form is exact)",
    ),
}


def setup(cfg: Any, tools: Any) -> OdeSetup:
    """The ODE driver's view of a validated msfr-h config (``fastdyn.config.msfr_h``)."""
    from ...config.msfr_h import read_h_file

    h_file = read_h_file(cfg.h.file) if cfg.h.file is not None else None
    problem = MsfrProblem(cfg.task, SimpleNamespace(scheme="balanced", scale=1.0), cfg.seed)
    d_tasks, d = problem.d, int(cfg.h.dim)
    times, _ = tools.saveat.output_grid(cfg.time, "rk4", 1.0)
    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else default_track(d_tasks)
    )
    track = track[track <= d_tasks]
    spans = list(problem.chunks(cfg.output.chunk_tasks))
    chunk = ChunkCache(cfg, problem, h_file)

    # one pass over the tasks: the closed form's exactness, the fastest rate, tracked defects
    defect_max, fastest = 0.0, 0.0
    tracked_defect = np.full(len(track), np.nan)
    for first, n in spans:
        ch = chunk(first, n)
        defect_max = max(defect_max, float(np.max(ch.defect)))
        fastest = max(fastest, float(np.max(ch.rate_scale)))
        m = (track > first) & (track <= first + n)
        tracked_defect[m] = ch.defect[track[m] - 1 - first]
    integrator = cfg.solver.integrator
    sim, dopri5 = integrator != "none", integrator == "dopri5"
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

    def new_state(chunks: Any, size: int) -> SoaState:
        """(v, w) of every task stacked as y (2d, n)."""
        y = np.zeros((2 * d, size))
        for ch in chunks:
            y[:d, ch.first : ch.first + ch.n] = ch.v0
            y[d:, ch.first : ch.first + ch.n] = ch.w0
        return SoaState.start(y, dopri5)

    def advance(ch: Chunk, state: SoaState, tt, _steps, loc, pt, pr, ft) -> None:
        a, b = ch.first, ch.first + ch.n
        t0 = state.t_at.get(ch.first, 0.0)
        soa = tools.integrate_soa
        if dopri5:
            s = cfg.solver
            soa.advance_dopri5(
                kernels.rhs, kernels.observe, kernels.loss, ch.params, state.y[:, a:b],
                state.h[a:b], state.counts[:, a:b], t0, tt, s.rtol, s.atol, s.max_steps,
                loc, pt, pr, ft,
            )  # fmt: skip
        else:
            soa.advance_rk4(
                kernels.rhs, kernels.observe, kernels.loss, ch.params, state.y[:, a:b],
                t0, tt, step, loc, pt, pr, ft,
            )  # fmt: skip
        state.t_at[ch.first] = float(tt[-1])

    def theory(ch: Chunk, tt, loc):
        T = len(tt)
        pt, pr = block_partials(ch.n, T), block_partials(ch.n, T)
        tpos = np.full(ch.n, -1, dtype=np.int64)
        tpos[np.asarray(loc, dtype=np.int64)] = np.arange(len(loc))
        ft = np.zeros((len(loc), T))
        p = ch.params
        theory_kernel(
            np.ascontiguousarray(tt, dtype=np.float64),
            p[1],
            p[0],
            p[2],
            ch.mu,
            ch.p0,
            ch.q0,
            tpos,
            pt,
            pr,
            ft,
        )
        return pt, pr, ft

    def restore(state: SoaState, ck: dict, chunks: Any, rows: int, _last_step: int) -> None:
        state.restore(ck, chunks.spans, times, rows)

    def failure(counts: dict[str, int]) -> str | None:
        if not counts.get("failed", 0):
            return None
        return (
            f"{counts['failed']} tasks did not finish (dopri5 used up solver.max_steps = {cfg.solver.max_steps} "
            "accepted steps, or its step fell below the resolution of t): raise solver.max_steps or loosen solver.rtol"
        )

    def zero_loss(ch: Chunk) -> float:
        f0 = np.einsum(
            "an,nab,bn->n", ch.v0, ch.params[kernels.N_SCALARS :].T.reshape(ch.n, d, d), ch.w0
        )
        with np.errstate(over="ignore"):
            return float(np.sum(ch.params[2] * (np.abs(ch.params[1]) + np.abs(f0)) ** 2)) / 2

    def cause(_chunks: Any) -> str:
        if dopri5:
            return "gradient flow never raises a task's loss, so dopri5 lost accuracy; tighten solver.rtol"
        return f"the RK4 step h = {step:.3g} is too large for the fastest task; lower solver.h or raise solver.steps_per_timescale"

    th = cfg.theory.level != "none"
    exact = defect_max <= hmat.EXACT_DEFECT
    attrs = {"theory_exact": int(exact), "theory_defect_max": defect_max}
    if integrator == "rk4":
        attrs["rk4_h"] = step
    attrs["theory_note"] = (
        "exact: H = μΠ to 1e-12 (simulation = closed form to integrator tolerance)" if exact
        else f"leading order: max ‖H² − μH‖_F/‖H‖_F² = {defect_max:.3g} (error O(‖H − μΠ‖))"
    )  # fmt: skip
    return OdeSetup(
        n_tasks=d_tasks, spans=spans, chunk=chunk, times=times, steps=None, track=track,
        tail=problem.tail_losses(), simulate=sim, advance=advance, new_state=new_state,
        save_state=SoaState.arrays, restore=restore, summary=SoaState.summary, failure=failure,
        zero_loss=zero_loss, cause=cause,
        checkpoint=soa_checkpoint(2 * d, d_tasks if sim else 0, dopri5),
        theory=theory if th else None,
        static={"tasks/h_defect": tracked_defect}, extra_attrs=attrs,
        times_per_segment=cfg.output.times_per_segment, checkpoint_every=cfg.output.checkpoint_every,
        integrator=integrator, descriptions=DESCRIPTIONS,
    )  # fmt: skip
