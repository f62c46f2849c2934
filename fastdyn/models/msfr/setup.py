"""③ MSFR's maths for the ODE driver (:class:`fastdyn.models.OdeMaths`), with its fast path.

Every task s evolves y_s = (v_x, v_y, w_x, w_y) by the flow of :mod:`fastdyn.models.msfr.ode`
(p = (Λ, ψ, rate, wtest, q), its column of the task table); the closed forms of
:mod:`fastdyn.models.msfr.theory` (levels leading, first_order, exact) are evaluated beside it.
MSFR registers a fast path (:class:`fastdyn.models.FastPath`) for every integrator: its
lane-vectorised kernels (:mod:`fastdyn.models.msfr.integrate`: rk4, dopri5, gd with the settling
rule, CPU and CUDA) and the closed form's block partials. State kept between segments: (v, w) of
every represented task (4·D floats), the last step size of each task (dopri5), |r| before the
last step, status and step counts; task tables are regenerated per chunk from the seed (cheap),
or cached when they fit in ``TABLE_CACHE_BYTES``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core import saveat
from ...core.device import Device
from ...core.restore import restore_arrays, restore_clocks
from ...reduce import BLOCK, block_partials
from .._spec import FastPath, OdeMaths
from . import ode
from .problem import MsfrProblem, TaskChunk, default_track

TABLE_CACHE_BYTES = 1 << 30
_STATE = ("y", "h", "rprev", "status", "steps", "rejected")


def track_of(cfg: Any, d: int) -> np.ndarray:
    """The tracked tasks (1-based): ``output.track`` or 1, 3, 10, 30, … ≤ D."""
    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else default_track(d)
    )
    return track[track <= d]


def emergence(problem: MsfrProblem, track: np.ndarray, level: str) -> np.ndarray:
    """Closed-form emergence (half-rise) times of the tracked tasks."""
    from . import theory

    out = np.full(len(track), np.nan)
    for i, s in enumerate(track):
        first = (int(s) - 1) // BLOCK * BLOCK
        ch = problem.chunk(first, min(BLOCK, problem.d - first)).select(
            np.array([int(s) - 1 - first])
        )
        out[i] = theory.emergence_times(
            ch.lam, ch.psi, ch.rate, ch.v0x, ch.v0y, ch.w0x, ch.w0y, level
        )[0]
    return out


def gd_stability_bound(chunks: Any, query: bool = True) -> tuple[float, int]:
    """(2/λ_max, s): the largest stable gd learning rate near convergence and the task that sets it.

    gd is y ← y + η F(y) with F the flow's right-hand side; at a task's minimum (r = 0) the
    Jacobian of F along the converging direction has eigenvalue −λ with λ = rate·λmax(H)·|Λ|
    (:func:`fastdyn.models.msfr.ode.rate_scale` at r = 0), so gd is stable there iff η·λ < 2.
    (tests/reliability/test_divergence.py checks 0.8× the bound converges and 1.25× diverges.)"""
    best, arg = 0.0, 1
    q = 1.0 if query else 0.0
    for ch in chunks:
        lam, psi = np.abs(ch.lam), ch.psi
        tr = psi * (1.0 + lam * lam) + q
        eig = 0.5 * (tr + np.sqrt(np.maximum(tr * tr - 4.0 * psi * q * lam * lam, 0.0)))
        lmax = ch.rate * eig * lam
        if lmax.size and lmax.max() > best:
            best, arg = float(lmax.max()), ch.first + 1 + int(np.argmax(lmax))
    return (2.0 / best if best > 0 else float("inf")), arg


def start_loss_bound(ch: Any) -> float:
    """The divergence reference of a chunk: Σ wtest (|Λ| + |f0|_max)² / 2, at least its test loss
    with every f = 0 and at the initialisation (|f0| ≤ ψ|uᵀv||uᵀw| + |v_x w_x|). Each task's flow
    only lowers its |f − Λ|, so a loss far above this is an integration error, not a large init."""
    uv = ch.v0x + ch.lam * ch.v0y
    uw = ch.w0x + ch.lam * ch.w0y
    f0 = ch.psi * np.abs(uv * uw) + np.abs(ch.v0x * ch.w0x)
    with np.errstate(over="ignore"):
        return float(np.sum(ch.wtest * (np.abs(ch.lam) + f0) ** 2)) / 2


def cause(cfg: Any, chunks: Any) -> str:
    """The likely cause of a divergence, for the message."""
    if cfg.solver.integrator == "gd":
        bound, s = gd_stability_bound(chunks)
        lr = cfg.solver.lr
        if lr > bound:
            return f"solver.lr = {lr:g} is above the gd stability bound 2/λ_max ≈ {bound:.3g} (λ_max ≈ {2 / bound:.3g}, set by task s = {s}); lower solver.lr below {bound:.3g}"
        return f"solver.lr = {lr:g} is below the estimated bound 2/λ_max ≈ {bound:.3g} (task s = {s}), so the early transient (|r| ≈ Λ) is the likely cause; lower solver.lr"
    return f"gradient flow never raises a task's loss, so the {cfg.solver.integrator} integrator lost accuracy; tighten solver.rtol or raise solver.steps_per_timescale"


class TableCache:
    """``chunk(first, n)``: the task table of a chunk, cached when all of them fit in memory."""

    def __init__(self, problem: MsfrProblem):
        self.problem = problem
        self.cache: dict[tuple[int, int], TaskChunk] | None = (
            {} if problem.d * 8 * 8 <= TABLE_CACHE_BYTES else None
        )

    def __call__(self, first: int, n: int) -> TaskChunk:
        if self.cache is None:
            return self.problem.chunk(first, n)
        key = (first, n)
        if key not in self.cache:
            self.cache[key] = self.problem.chunk(first, n)
        return self.cache[key]


def params_table(ch: TaskChunk, query: bool = True) -> np.ndarray:
    """The (9, n) parameter block of a chunk: rows Λ, ψ, rate, wtest, q (:mod:`.ode`'s P_*) and
    the initial state v_x, v_y, w_x, w_y (read by the closed form only)."""
    return np.concatenate(
        [ode.pack_params(ch.lam, ch.psi, ch.rate, ch.wtest, query), init_table(ch)]
    )


def init_table(ch: TaskChunk) -> np.ndarray:
    """The (4, n) initial state of a chunk: rows v_x, v_y, w_x, w_y."""
    return np.stack([ch.v0x, ch.v0y, ch.w0x, ch.w0y])


def setup(cfg: Any, device: Device = Device.CPU) -> OdeMaths:
    """The maths of a validated MSFR config (``fastdyn.models.msfr.config``), with its fast path on
    ``device`` (MSFR's lane-vectorised integrators, :mod:`fastdyn.models.msfr.integrate`)."""
    from . import integrate, theory

    problem = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    d = problem.d
    integrator, level = cfg.solver.integrator, cfg.theory.level
    times, steps = saveat.output_grid(cfg.time, integrator, cfg.solver.lr)
    track = track_of(cfg, d)
    sim, th = integrator != "none", level != "none"
    n_state = d if sim else 0
    ck_spec = {
        "y": ((4, n_state), "f8"),
        "h": ((n_state,), "f8"),
        "rprev": ((n_state,), "f8"),
        "status": ((n_state,), "i1"),
        "steps": ((n_state,), "i8"),
        "rejected": ((n_state,), "i8"),
    }
    # the exact reduction has no closed-form half-rise time: the first-order one is stored, and
    # the root attribute ``emergence_level`` says which
    em_level = "leading" if level == "leading" else "first_order"
    static = {"tasks/emergence": emergence(problem, track, em_level)} if th else {}
    table = TableCache(problem)

    def advance(ch, state, tt, st, loc, pt, pr, ft) -> None:
        integrate.advance_chunk(
            cfg.solver, integrator, ch, state, tt, st, loc, pt, pr, ft, device=device
        )

    def theory_partials(ch, t, loc):
        T = len(t)
        pt, pr = block_partials(ch.n, T), block_partials(ch.n, T)
        theory.loss_partials(
            t,
            ch.lam,
            ch.psi,
            ch.rate,
            ch.wtest,
            ch.v0x,
            ch.v0y,
            ch.w0x,
            ch.w0y,
            level,
            pt,
            pr,
            device=device,
        )
        ftt = np.zeros((len(loc), T))
        if len(loc):
            sub = ch.select(loc)
            theory.f_curves(
                t, sub.lam, sub.psi, sub.rate, sub.v0x, sub.v0y, sub.w0x, sub.w0y, level, ftt
            )
        return pt, pr, ftt

    def save_state(state) -> dict[str, np.ndarray]:
        return {name: getattr(state.tasks, name) for name in _STATE}

    def restore(state, ck, chunks, rows: int, last_step: int) -> None:
        """Put the checkpointed per-task state and every chunk's clock back (ValueError when the
        checkpoint does not fit the config)."""
        restore_arrays(save_state(state), ck)
        restore_clocks(state, chunks.spans, times, rows, None if steps is None else last_step)

    def failure(stats: dict[str, int]) -> str | None:
        unfinished = stats.get("step_limit", 0) + stats.get("stalled", 0) + stats.get("diverged", 0)
        if not unfinished:
            return None
        return (
            f"{unfinished} tasks did not finish (step limit {stats.get('step_limit', 0)}, stalled {stats.get('stalled', 0)}, diverged {stats.get('diverged', 0)}): "
            f"raise solver.max_steps ({cfg.solver.max_steps}), loosen solver.rtol, or for gd lower solver.lr below ~2/(rate·κ) of the fastest task"
        )

    def theory_terms(p: np.ndarray, t: np.ndarray):
        """The closed form's per-task (test terms, train terms, f), each (n, T)."""
        lam, psi, rate, wtest = p[ode.P_LAM], p[ode.P_PSI], p[ode.P_RATE], p[ode.P_WTEST]
        f = np.zeros((p.shape[1], len(t)))
        v0 = p[ode.N_PARAMS :]
        theory.f_curves(t, lam, psi, rate, v0[0], v0[1], v0[2], v0[3], level, f)
        rr = 0.5 * (f - lam[:, None]) * (f - lam[:, None])
        return wtest[:, None] * rr, rate[:, None] * rr, f

    fast = FastPath(
        chunk=table, new_state=integrate.State.create, advance=advance, save_state=save_state,
        restore=restore, checkpoint=ck_spec, summary=lambda state: state.summary(),
        failure=failure, zero_loss=start_loss_bound, theory=theory_partials if th else None,
        resident=lambda: integrate.keep_state_on(device), to_host=integrate.state_to_host,
    )  # fmt: skip
    spans = list(problem.chunks(cfg.output.chunk_tasks))
    return OdeMaths(
        n_tasks=d, n_state=ode.N_STATE, rhs=ode.column_rhs, observe=ode.column_f,
        loss=ode.column_loss, params=lambda first, n: params_table(table(first, n)),
        init=lambda first, n: init_table(table(first, n)), times=times, steps=steps,
        track=track, solver=cfg.solver, output=cfg.output,
        theory=theory_terms if th else None, tail=problem.tail_losses(), static=static,
        extra_attrs={"emergence_level": em_level} if th else {},
        cause=lambda: cause(cfg, (table(a, n) for a, n in spans)),
        rate_scale=ode.column_rate_scale, residual=ode.column_residual,
        fast_paths=dict.fromkeys(("rk4", "dopri5", "gd", "none"), fast),
    )  # fmt: skip
