"""④ A model given as maths only (:class:`fastdyn.models._spec.OdeMaths`) made into a run.

The model supplies ``rhs``, ``observe``, ``loss`` (``@njit`` functions of one task), its parameter
and initial-state tables by task range, and its closed form. This module owns the rest, so that
every such model gets the same machinery (and :mod:`fastdyn.drive.ode_run` the same
:class:`~fastdyn.models._spec.OdeSetup` it runs for every ODE model):

- the state array y (n_state × n_tasks), the per-task dopri5 step sizes and counters, and each
  chunk's clock (the time of its last output row);
- the integrator, from ``solver.integrator``: :func:`fastdyn.drive.integrate_soa.advance_rk4` or
  :func:`~fastdyn.drive.integrate_soa.advance_dopri5`;
- what a checkpoint holds (y; for dopri5 also h and the counters) and how it is restored, so
  ``--resume`` and the split run are bit-identical to an uninterrupted run;
- the closed form's block partials (per-task terms added in task order within a block);
- the divergence reference (the test loss at the start) and the integrator counts of the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types

from ..config.schema import ConfigError
from ..core.soa_state import SoaState, soa_checkpoint
from ..models._spec import OdeMaths, OdeSetup
from ..reduce import BLOCK, add_block_sums, block_partials
from . import integrate_soa
from ._kernel_cache import jit_cached

#: chunks' tables are cached when every chunk's parameters and initial state fit in this many bytes
TABLE_CACHE_BYTES = 1 << 30


@dataclass
class Chunk:
    """Tasks first+1 … first+n: the kernels' parameters (k, n) and the initial state (n_state, n)."""

    first: int
    n: int
    params: np.ndarray
    y0: np.ndarray


_TEST_LOSS_SUMS: dict[Any, Any] = {}


def _test_loss_sum(loss: Any, params: np.ndarray, y: np.ndarray) -> float:
    """Σ_s |test_term(p_s, y_s)| in task order (the divergence reference), by a kernel compiled
    once per model and kept in numba's cache under the model's fingerprint
    (:mod:`fastdyn.drive._kernel_cache`), so a new process does not compile it again (≈ 1 s)."""
    if loss not in _TEST_LOSS_SUMS:

        def kernel(params, y):
            total = 0.0
            for i in range(y.shape[1]):
                te, _tr = loss(params[:, i].copy(), y[:, i].copy())
                total += abs(te)
            return total

        sig = types.float64(types.float64[:, :], types.float64[:, :])
        _TEST_LOSS_SUMS[loss] = jit_cached(
            kernel, sig, cache=False, nogil=True, error_model="numpy"
        )
    return float(_TEST_LOSS_SUMS[loss](params, y))


def _block_sums(terms: np.ndarray) -> np.ndarray:
    """Per-block partials (n_blocks, T) of per-task terms (n, T), tasks added in order."""
    terms = np.ascontiguousarray(terms, dtype=np.float64)
    out = block_partials(*terms.shape)
    add_block_sums(terms, out)
    return out


def _check(m: OdeMaths, integrator: str) -> None:
    s = m.solver
    if integrator == "rk4" and len(m.times):
        n = float(m.times[-1]) / float(s.h)
        if n > s.max_steps:
            raise ConfigError(
                f"solver.h: rk4 needs t_max / h = {n:.3g} steps per task, more than solver.max_steps = {s.max_steps}; raise h or max_steps, lower the last output time, or use solver.integrator = 'dopri5'"
            )
    if integrator != "none" and m.n_state < 1:
        raise ConfigError(f"solver.integrator: the model has no state (n_state = {m.n_state})")


def setup_from_maths(m: OdeMaths, device: str = "cpu") -> OdeSetup:
    """The :class:`OdeSetup` the ODE driver runs for the model ``m`` on ``device`` ("cuda": the
    integrators' CUDA twins, :mod:`fastdyn.drive.integrate_soa_cuda`, built from the same source
    and the model's own functions)."""
    if device == "cuda":
        from . import integrate_soa_cuda as integrators
    else:
        integrators = integrate_soa
    integrator = str(m.solver.integrator)
    _check(m, integrator)
    sim = integrator != "none"
    adaptive = integrator == "dopri5"
    n, ns = int(m.n_tasks), int(m.n_state)
    times = np.ascontiguousarray(m.times, dtype=np.float64)
    step = max(BLOCK, int(m.output.chunk_tasks) // BLOCK * BLOCK)
    spans = [(a, min(step, n - a)) for a in range(0, n, step)]
    track = np.asarray(m.track, dtype=np.int64)
    track = track[(track >= 1) & (track <= n)]
    cache: dict | None = {}

    def chunk(first: int, k: int) -> Chunk:
        nonlocal cache
        if cache is not None and (first, k) in cache:
            return cache[(first, k)]
        p = np.ascontiguousarray(m.params(first, k), dtype=np.float64)
        y0 = np.ascontiguousarray(m.init(first, k), dtype=np.float64).reshape(ns, k)
        if p.ndim != 2 or p.shape[1] != k:
            raise ValueError(f"params({first}, {k}): shape {p.shape}, expected (k, {k})")
        ch = Chunk(first, k, p, y0)
        if cache is not None:
            if (p.nbytes + y0.nbytes) * (n / max(k, 1)) > TABLE_CACHE_BYTES:
                cache = None
            else:
                cache[(first, k)] = ch
        return ch

    def new_state(chunks: Any, size: int) -> SoaState:
        y = np.zeros((ns, size))
        for ch in chunks:
            y[:, ch.first : ch.first + ch.n] = ch.y0
        return SoaState.start(y, adaptive)

    def advance(ch: Chunk, state: SoaState, tt, _steps, loc, pt, pr, ft) -> None:
        a, b = ch.first, ch.first + ch.n
        y = state.y[:, a:b]
        t0 = state.t_at.get(ch.first, 0.0)
        s = m.solver
        if adaptive:
            integrators.advance_dopri5(
                m.rhs, m.observe, m.loss, ch.params, y, state.h[a:b], state.counts[:, a:b], t0, tt,
                float(s.rtol), float(s.atol), int(s.max_steps), loc, pt, pr, ft,
            )  # fmt: skip
        else:
            integrators.advance_rk4(
                m.rhs, m.observe, m.loss, ch.params, y, t0, tt, float(s.h), loc, pt, pr, ft
            )
        state.t_at[ch.first] = float(tt[-1])

    def theory(ch: Chunk, tt, loc):
        te, tr, f = m.theory(ch.params, np.ascontiguousarray(tt, dtype=np.float64))
        return _block_sums(np.asarray(te)), _block_sums(np.asarray(tr)), np.asarray(f)[loc]

    def restore(state: SoaState, ck: dict, chunks: Any, rows: int, _last_step: int) -> None:
        state.restore(ck, chunks.spans, times, rows)

    def failure(counts: dict[str, int]) -> str | None:
        if counts.get("failed", 0):
            return (
                f"{counts['failed']} tasks did not finish (dopri5 used up solver.max_steps = {m.solver.max_steps} "
                "accepted steps, or its step fell below the resolution of t): raise solver.max_steps or loosen solver.rtol"
            )
        return None

    def cause(_chunks: Any) -> str:
        if adaptive:
            return "dopri5 did not control the error; lower solver.rtol or solver.atol"
        return f"the rk4 step h = {m.solver.h:g} is too large for the fastest task; lower solver.h or use solver.integrator = 'dopri5'"

    attrs = dict(m.extra_attrs)
    if integrator == "rk4":
        attrs["rk4_h"] = float(m.solver.h)
    elif adaptive:
        attrs |= {"dopri5_rtol": float(m.solver.rtol), "dopri5_atol": float(m.solver.atol)}
    return OdeSetup(
        n_tasks=n, spans=spans, chunk=chunk, times=times, steps=None, track=track, tail=m.tail,
        simulate=sim, advance=advance, new_state=new_state, save_state=SoaState.arrays,
        restore=restore, summary=SoaState.summary, failure=failure,
        zero_loss=lambda ch: float(_test_loss_sum(m.loss, ch.params, ch.y0)),
        cause=cause, checkpoint=soa_checkpoint(ns, n if sim else 0, adaptive),
        theory=theory if m.theory is not None else None,
        static=dict(m.static), extra_attrs=attrs,
        times_per_segment=int(m.output.times_per_segment),
        checkpoint_every=m.output.checkpoint_every,
        integrator=str(m.solver.integrator), descriptions=dict(m.descriptions),
    )  # fmt: skip


def ode_setup(entry: Any, cfg: Any, tools: Any) -> OdeSetup:
    """What the ODE driver runs for ``cfg``: the model's own :class:`OdeSetup`, or one built here
    from its :class:`OdeMaths`."""
    job = entry.setup(cfg, tools)
    if isinstance(job, OdeMaths):
        return setup_from_maths(job, getattr(tools, "device", "cpu"))
    return job
