"""The toy's :class:`OdeSetup`: task tables by chunk, state, the closed form, and the driver's
generic RK4 (``tools.integrate_soa``) for the integration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fastdyn.models._spec import OdeSetup
from fastdyn.reduce import BLOCK, block_partials

from . import kernels


@dataclass
class Chunk:
    """Tasks first+1 … first+n: params (3, n) = (rate r, target K, test weight w)."""

    first: int
    n: int
    params: np.ndarray


@dataclass
class State:
    """f of every task and each chunk's clock (time of its last output)."""

    y: np.ndarray
    t_at: dict


def _partials(chunk: Chunk, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Block partial sums (in task order) of the loss terms of f (n, T)."""
    r, K, w = chunk.params
    e2 = (f - K[:, None]) ** 2 / 2.0
    pt, pr = block_partials(chunk.n, f.shape[1]), block_partials(chunk.n, f.shape[1])
    for b in range(pt.shape[0]):
        for i in range(b * BLOCK, min(b * BLOCK + BLOCK, chunk.n)):
            pt[b] += w[i] * e2[i]
            pr[b] += r[i] * e2[i]
    return pt, pr


def setup(cfg: Any, tools: Any) -> OdeSetup:
    t = cfg.task
    n = t.n_tasks
    s_all = np.arange(1, n + 1, dtype=np.float64)
    norm = float(np.sum(s_all**-t.alpha))
    times = np.geomspace(cfg.time.t_min, cfg.time.t_max, cfg.time.n_times)
    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else 10 ** np.arange(int(np.log10(n)) + 1, dtype=np.int64)
    )
    step = max(BLOCK, cfg.output.chunk_tasks // BLOCK * BLOCK)
    spans = [(a, min(step, n - a)) for a in range(0, n, step)]

    def chunk(first: int, m: int) -> Chunk:
        s = np.arange(first + 1, first + m + 1, dtype=np.float64)
        return Chunk(
            first,
            m,
            np.ascontiguousarray(np.stack([t.r0 * s**-t.a, np.ones(m), s**-t.alpha / norm])),
        )

    def new_state(chunks: Any, size: int) -> State:
        return State(np.full((1, size), t.f0), {})

    def advance(ch: Chunk, state: State, tt, _steps, loc, pt, pr, ft) -> None:
        y = state.y[:, ch.first : ch.first + ch.n]
        soa = tools.integrate_soa
        soa.advance_rk4(
            kernels.rhs,
            kernels.observe,
            kernels.loss,
            ch.params,
            y,
            state.t_at.get(ch.first, 0.0),
            tt,
            cfg.solver.h,
            loc,
            pt,
            pr,
            ft,
        )
        state.t_at[ch.first] = float(tt[-1])

    def theory(ch: Chunk, tt, loc):
        f = kernels.closed_form(tt, ch.params[0], ch.params[1], t.f0)
        pt, pr = _partials(ch, f)
        return pt, pr, f[loc]

    def restore(state: State, ck: dict, chunks: Any, rows: int, _last_step: int) -> None:
        if ck["y"].shape != state.y.shape:
            raise ValueError(
                f"checkpoint: y has shape {ck['y'].shape}, the config needs {state.y.shape}"
            )
        state.y[...] = ck["y"]
        if rows > 0:
            for first, _m in chunks.spans:
                state.t_at[first] = float(times[rows - 1])

    sim = cfg.solver.integrator != "none"
    return OdeSetup(
        n_tasks=n, spans=spans, chunk=chunk, times=times, steps=None, track=track[track <= n],
        tail=(0.0, 0.0), simulate=sim, advance=advance, new_state=new_state,
        save_state=lambda state: {"y": state.y}, restore=restore,
        summary=lambda state: {"tasks": int(state.y.shape[1])}, failure=lambda counts: None,
        zero_loss=lambda ch: float(np.sum(ch.params[2] * ch.params[1] ** 2)) / 2,
        cause=lambda chunks: f"lower solver.h ({cfg.solver.h}) below ~2/r0",
        checkpoint={"y": ((1, n if sim else 0), "f8")}, theory=theory,
        times_per_segment=cfg.output.times_per_segment, checkpoint_every=cfg.output.checkpoint_every,
    )  # fmt: skip
