"""④ A model given as maths (:class:`fastdyn.models.OdeMaths`, the one ODE contract) made into a run.

The model supplies ``rhs``, ``observe``, ``loss`` (``@njit`` functions of one task), its parameter
and initial-state tables by task range, and its closed form. This module owns the rest, so that
every ODE model gets the same machinery (and :mod:`fastdyn.drive.ode_run` the same
:class:`~fastdyn.drive.ode_job.OdeJob` it runs for every ODE model):

- the state array y (n_state × n_tasks), each chunk's tables and clock (the time of its last
  output row);
- the integrator: the solver registered for ``solver.integrator``
  (:data:`fastdyn.drive.solvers.SOLVERS`), which makes and advances its per-task state record
  (dopri5's step sizes and counters, the fixed-step record), says what a checkpoint holds of it
  and how it is restored (so ``--resume`` and the split run are bit-identical to an uninterrupted
  run), and gives its attributes and messages;
- the closed form's block partials (per-task terms added in task order within a block);
- the divergence reference (the test loss at the start) and the integrator counts of the file.

A model may register a fast path for an integrator (:class:`fastdyn.models.FastPath`, e.g.
a model's lane-vectorised kernels): with ``solver.fast_path`` true (the default) the run uses it for
``solver.integrator`` instead of the generic solver, with the same output grid, tables' tail,
statics and attributes; ``solver.fast_path = false`` runs the generic solver on the same maths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types

from ..core.device import Device
from ..core.soa_state import SoaState
from ..models._spec import FastPath, OdeMaths
from ..reduce import BLOCK, add_block_sums, block_partials
from . import integrate_soa
from ._kernel_cache import jit_cached
from .ode_job import OdeJob
from .solvers import solver_of

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


def spans_of(m: OdeMaths) -> list[tuple[int, int]]:
    """(first, n) of every chunk: ``output.chunk_tasks`` rounded down to whole blocks (≥ one)."""
    n = int(m.n_tasks)
    step = max(BLOCK, int(m.output.chunk_tasks) // BLOCK * BLOCK)
    return [(a, min(step, n - a)) for a in range(0, n, step)]


def _track(m: OdeMaths) -> np.ndarray:
    track = np.asarray(m.track, dtype=np.int64)
    return track[(track >= 1) & (track <= int(m.n_tasks))]


def _theory(m: OdeMaths, params_of: Any) -> Any:
    """The closed form's block partials of a chunk from ``m.theory``'s per-task terms (None when
    the model has none); ``params_of(chunk)``: the chunk's parameter block (k, n)."""
    if m.theory is None:
        return None

    def theory(ch: Any, tt: np.ndarray, loc: np.ndarray):
        p = np.ascontiguousarray(params_of(ch), dtype=np.float64)
        te, tr, f = m.theory(p, np.ascontiguousarray(tt, dtype=np.float64))
        return _block_sums(np.asarray(te)), _block_sums(np.asarray(tr)), np.asarray(f)[loc]

    return theory


def _tables(m: OdeMaths, ch: Any) -> tuple[np.ndarray, np.ndarray]:
    """(parameters (k, n), initial state (n_state, n)) of a chunk of a fast path."""
    p = np.ascontiguousarray(m.params(ch.first, ch.n), dtype=np.float64)
    y0 = np.ascontiguousarray(m.init(ch.first, ch.n), dtype=np.float64)
    return p, y0.reshape(int(m.n_state), ch.n)


def fast_job(m: OdeMaths, fp: FastPath) -> OdeJob:
    """The :class:`OdeJob` of the model's fast path ``fp`` for ``m``'s integrator: its chunks,
    state, kernels and closed form, on the grid and with the outputs ``m`` declares."""
    integrator = str(m.solver.integrator)
    sim = integrator != "none"
    generic = (
        (lambda _chunks: m.cause())
        if m.cause is not None
        else (lambda _chunks: f"the {integrator} integrator lost accuracy")
    )
    return OdeJob(
        n_tasks=int(m.n_tasks), spans=spans_of(m), chunk=fp.chunk,
        times=np.ascontiguousarray(m.times, dtype=np.float64), steps=m.steps, track=_track(m),
        tail=m.tail, simulate=sim, advance=fp.advance, new_state=fp.new_state,
        save_state=fp.save_state, restore=fp.restore, summary=fp.summary, failure=fp.failure,
        zero_loss=fp.zero_loss or (lambda ch: _test_loss_sum(m.loss, *_tables(m, ch))),
        cause=generic, checkpoint=fp.checkpoint,
        theory=fp.theory or _theory(m, lambda ch: m.params(ch.first, ch.n)),
        static=dict(m.static), extra_attrs=dict(m.extra_attrs),
        times_per_segment=int(m.output.times_per_segment),
        checkpoint_every=m.output.checkpoint_every, resident=fp.resident, to_host=fp.to_host,
        integrator=integrator, descriptions=dict(m.descriptions),
    )  # fmt: skip


def generic_job(m: OdeMaths, device: Device = Device.CPU) -> OdeJob:
    """The :class:`OdeJob` of the generic solver for the model ``m`` on ``device``: the solver
    registered for ``solver.integrator`` (:data:`fastdyn.drive.solvers.SOLVERS`) with the
    integrators of ``device`` (CUDA: their twins, :mod:`fastdyn.drive.integrate_soa_cuda`, built
    from the same source and the model's own functions)."""
    solver = solver_of(m)
    solver.check(m)
    if device == Device.CUDA:
        from . import integrate_soa_cuda as integrators
    else:
        integrators = integrate_soa
    n, ns = int(m.n_tasks), int(m.n_state)
    times = np.ascontiguousarray(m.times, dtype=np.float64)
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
        return solver.start(m, y, integrators)

    def restore(state: SoaState, ck: dict, chunks: Any, rows: int, last_step: int) -> None:
        solver.restore(state, ck, chunks.spans, times, rows, last_step)

    return OdeJob(
        n_tasks=n, spans=spans_of(m), chunk=chunk, times=times, steps=solver.output_steps(m),
        track=_track(m), tail=m.tail,
        simulate=solver.simulate, advance=solver.stepper(m, integrators), new_state=new_state,
        save_state=SoaState.arrays, restore=restore, summary=SoaState.summary,
        failure=lambda counts: solver.failure(m, counts),
        zero_loss=lambda ch: float(_test_loss_sum(m.loss, ch.params, ch.y0)),
        cause=lambda _chunks: m.cause() if m.cause is not None else solver.cause(m),
        checkpoint=solver.checkpoint(m), theory=_theory(m, lambda ch: ch.params),
        static=dict(m.static), extra_attrs=dict(m.extra_attrs) | solver.attrs(m),
        times_per_segment=int(m.output.times_per_segment),
        checkpoint_every=m.output.checkpoint_every,
        integrator=str(m.solver.integrator), descriptions=dict(m.descriptions),
    )  # fmt: skip


def precompile(m: OdeMaths, device: Device = Device.CPU) -> tuple[tuple[str, str], ...]:
    """The generic solver's kernel for ``m`` as a (kernel, signature) pair
    (:mod:`fastdyn._precompile`): the builder of :mod:`fastdyn.drive.integrate_soa` that its
    solver's ``advance`` calls (:meth:`fastdyn.drive.solvers.Solver.kernel`), named with the model's
    functions, ``"fastdyn.drive.integrate_soa:rk4[pkg.mod:rhs,pkg.mod:observe,pkg.mod:loss]"``.
    Nothing for the closed form alone, a fast path, the GPU, or a model whose functions are not
    module-level (no stable dotted name)."""
    s = m.solver
    fast = m.fast_paths.get(str(s.integrator)) is not None and bool(getattr(s, "fast_path", True))
    kernel = None if device != Device.CPU or fast else solver_of(m).kernel(m)
    if kernel is None:
        return ()
    builder, args = getattr(integrate_soa, kernel[0]), kernel[1]
    name = builder.name_for(*args)
    return () if name is None else ((name, builder.signature),)


def job_of(m: OdeMaths, device: Device = Device.CPU) -> OdeJob:
    """The run of ``m``: its fast path for ``solver.integrator`` when it registered one and
    ``solver.fast_path`` is true (the default), else the generic solver (its kernel declared in
    ``precompile``: :func:`precompile`)."""
    fp = m.fast_paths.get(str(m.solver.integrator))
    if fp is not None and bool(getattr(m.solver, "fast_path", True)):
        return fast_job(m, fp)
    job = generic_job(m, device)
    job.precompile = precompile(m, device)
    return job


def ode_job(entry: Any, cfg: Any, device: Device = Device.CPU) -> OdeJob:
    """What the ODE driver runs for ``cfg``: the :class:`OdeMaths` of the model's ``setup``,
    made into a run by :func:`job_of` (TypeError if the setup returns anything else)."""
    m = entry.setup(cfg, device)
    if not isinstance(m, OdeMaths):
        raise TypeError(f"{entry.name}: setup must return OdeMaths, got {type(m).__name__}")
    return job_of(m, device)
