"""④ Generic per-task integrators over structure-of-arrays state, for any ODE model.

A model gives three ``@njit`` functions of one task (p: its parameter column, y: its state):

- ``rhs(p, y, dy)``: writes dy/dt (gradient flow of the task's loss);
- ``observe(p, y) -> f``: the scalar recorded for tracked tasks;
- ``loss(p, y) -> (test_term, train_term)``: the task's contributions to L_test and L_train.

and its state ``y`` (n_state, n) and parameters ``params`` (k, n) as float64 arrays, task index
fastest. :func:`advance_rk4` takes every task through the output ``times`` with classical RK4 at a
fixed nominal step ``h`` (each interval [t_{j−1}, t_j] cut into ⌈Δt/h⌉ equal sub-steps, so every
task lands on every output time and a run cut into segments is bit-identical to an uncut one),
adding per-block partial sums (fixed order, :mod:`fastdyn.reduce`) of the loss terms at each output
time and writing f of the tracked tasks. Blocks run in parallel (``prange``); the arithmetic of a
task does not depend on its neighbours, so any thread count and any chunking by whole blocks give
bit-identical output. :func:`advance_dopri5` does the same with adaptive Dormand–Prince 5(4),
each task with its own step size and step counters in caller-owned arrays (the controller and
output-time clipping of the lane-vectorised dopri5, so segments and resumes continue the same step
sequence).
:func:`advance_fixed` is fixed steps with the solver's options: rk4 at each task's own step
h_s = 1/(steps_per_timescale·σ_s) (the model's ``rate_scale``), discrete gd (y ← y + η·rhs(y),
t = η·step) and the settling rule (the model's ``residual``), with each task's record (step,
steps taken, |r|, status) in a caller-owned array.

The kernels are specialised per model (the model's functions are compile-time arguments): numba's
own cache cannot key them (``cache=False`` here), so :mod:`fastdyn.drive._kernel_cache` keeps each
model's kernel in numba's cache directory under a fingerprint of the model's functions, and a new
process loads it instead of compiling it again. A model may bring its own cached, lane-vectorised
integrators as its fast path instead (a :class:`fastdyn.models.FastPath`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange, types

from ..core import stop_flag
from ..reduce import BLOCK
from . import soa_tasks
from ._kernel_cache import KernelBuilder

_FLAGS = {"cache": False, "nogil": True, "error_model": "numpy"}
_njit = njit(**_FLAGS)

#: rows of the per-task counters of :func:`advance_dopri5` (a caller-owned (3, n) int64 array):
#: accepted and rejected steps, and 1 for a task that failed (0 otherwise), so each row sums to a
#: run's count
COUNT_ACCEPTED, COUNT_REJECTED, COUNT_FAILED = 0, 1, 2

_KERNELS: dict[tuple, Any] = {}

# One signature per kernel, compiled (or loaded from the cache) when the kernel is built: the caller's arrays in any layout
# ('A'), so a chunk's column slice of a state array (strided when the state holds more than one
# chunk, contiguous when it holds one) and a part's own contiguous state run the same machine code
# instead of compiling the kernel once per layout (≈ 3 s each); the arrays the wrappers make
# (times, tpos, the stop flag) are contiguous.
_F1, _F2, _I2 = types.float64[:], types.float64[:, :], types.int64[:, :]
_F1C, _I1C, _F8, _I8 = types.float64[::1], types.int64[::1], types.float64, types.int64
_RK4_SIG = types.void(_F2, _F2, _F8, _F1C, _F8, _I1C, _F2, _F2, _F2, _I1C)
_DOPRI5_SIG = types.void(
    _F2, _F2, _F1, _I2, _F1, _F8, _F1C, _F8, _F8, _I8, _F8, _I1C, _F2, _F2, _F2, _I1C
)
_FIXED_SIG = types.void(
    _F2, _F2, _F2, _F8, _F1C, _F8, _F8, _F8, _F8, _I8, _I1C, _F2, _F2, _F2, _I1C
)


@njit(inline="always", **_FLAGS)
def _load(params, y, i, p, yy):
    """Task i's parameter column and state into the scratch arrays ``p``, ``yy``."""
    for r in range(p.shape[0]):
        p[r] = params[r, i]
    for r in range(yy.shape[0]):
        yy[r] = y[r, i]


@njit(inline="always", **_FLAGS)
def _add_terms(test_part, train_part, b, te, tr):
    """Add one task's loss terms into block b's partials (tasks in order within a block: the
    fixed order of the sums)."""
    for j in range(te.shape[0]):
        test_part[b, j] += te[j]
        train_part[b, j] += tr[j]


def _rk4_source(rhs: Any, observe: Any, loss: Any) -> Any:
    """The parallel CPU kernel of RK4 for one model, as the Python function :data:`rk4` jits."""
    task = soa_tasks.rk4_task(rhs, observe, loss, _njit)

    def kernel(params, y, t0, times, h, tpos, test_part, train_part, f_track, stop):
        n, ns, kp, T = y.shape[1], y.shape[0], params.shape[0], times.shape[0]
        for b in prange((n + BLOCK - 1) // BLOCK):
            lo, hi = b * BLOCK, min(b * BLOCK + BLOCK, n)
            p, yy, yt = np.empty(kp), np.empty(ns), np.empty(ns)
            yn, K = np.empty(ns), np.empty((4, ns))
            te, tr, fdummy = np.empty(T), np.empty(T), np.empty(T)
            for i in range(lo, hi):
                _load(params, y, i, p, yy)
                tracked = tpos[i] >= 0
                f = f_track[tpos[i]] if tracked else fdummy
                if task(p, yy, yt, yn, K, t0, times, h, te, tr, f, tracked, stop) != 0:
                    break  # a stop request: the block's outputs stay incomplete
                _add_terms(test_part, train_part, b, te, tr)
                for r in range(ns):
                    y[r, i] = yy[r]

    return kernel


#: ``rk4(rhs, observe, loss)``: the kernel of :func:`advance_rk4` for one model (compiled once per
#: process and model, kept in numba's cache under the model's fingerprint)
rk4 = KernelBuilder(f"{__name__}:rk4", _rk4_source, _RK4_SIG, _KERNELS, parallel=True, **_FLAGS)


def _dopri5_source(rhs: Any, observe: Any, loss: Any, residual: Any) -> Any:
    """The parallel CPU kernel of dopri5 for one model (``residual``: with the settling rule), as
    the Python function :data:`dopri5` jits."""
    task = soa_tasks.dopri5_task(rhs, observe, loss, _njit, residual)

    def kernel(
        params, y, h, counts, rprev, t0, times, rtol, atol, max_steps, settle_tol, tpos,
        test_part, train_part, f_track, stop,
    ):  # fmt: skip
        n, ns, kp, T = y.shape[1], y.shape[0], params.shape[0], times.shape[0]
        for b in prange((n + BLOCK - 1) // BLOCK):
            lo, hi = b * BLOCK, min(b * BLOCK + BLOCK, n)
            p, yy, yt, yn, er = np.empty(kp), np.empty(ns), np.empty(ns), np.empty(ns), np.empty(ns)
            K = np.empty((7, ns))
            te, tr, fdummy = np.empty(T), np.empty(T), np.empty(T)
            for i in range(lo, hi):
                _load(params, y, i, p, yy)
                tracked = tpos[i] >= 0
                f = f_track[tpos[i]] if tracked else fdummy
                code, hs, nacc, nrej, failed, rp = task(
                    p, yy, yt, yn, er, K, h[i],
                    counts[COUNT_ACCEPTED, i], counts[COUNT_REJECTED, i], counts[COUNT_FAILED, i],
                    rprev[i], t0, times, rtol, atol, max_steps, settle_tol, te, tr, f, tracked,
                    stop,
                )  # fmt: skip
                if code == soa_tasks.BUDGET:  # its counters are kept, for the message
                    counts[COUNT_ACCEPTED, i], counts[COUNT_REJECTED, i] = nacc, nrej
                    counts[COUNT_FAILED, i] = 1
                    h[i] = hs
                if code != soa_tasks.DONE:
                    break  # the block gives up; its outputs stay incomplete
                _add_terms(test_part, train_part, b, te, tr)
                for r in range(ns):
                    y[r, i] = yy[r]
                h[i] = hs
                counts[COUNT_ACCEPTED, i], counts[COUNT_REJECTED, i] = nacc, nrej
                counts[COUNT_FAILED, i] = failed
                rprev[i] = rp

    return kernel


#: ``dopri5(rhs, observe, loss, residual)``: the kernel of :func:`advance_dopri5` for one model
#: (``residual`` None: without the settling rule)
dopri5 = KernelBuilder(
    f"{__name__}:dopri5", _dopri5_source, _DOPRI5_SIG, _KERNELS, parallel=True, **_FLAGS
)


def advance_rk4(
    rhs, observe, loss, params: np.ndarray, y: np.ndarray, t0: float, times: np.ndarray, h: float,
    local_track: np.ndarray, test_partials: np.ndarray, train_partials: np.ndarray, f_track: np.ndarray,
) -> None:  # fmt: skip
    """Advance ``y`` (n_state, n; in place) from ``t0`` through ``times`` with RK4 at nominal step
    ``h``; add the loss terms' block partials into ``test_partials``/``train_partials`` (n_blocks(n),
    T) and write f of the tasks ``local_track`` (chunk-local indices) into ``f_track`` (len, T)."""
    times = np.ascontiguousarray(times, dtype=np.float64)
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"h: the nominal step must be a finite number > 0, got {h!r}")
    if times.size and (times[0] < t0 or np.any(np.diff(times) <= 0)):
        raise ValueError("times: must be increasing and ≥ t0")
    n = y.shape[1]
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[np.asarray(local_track, dtype=np.int64)] = np.arange(len(local_track))
    rk4(rhs, observe, loss)(
        params,
        y,
        float(t0),
        times,
        float(h),
        tpos,
        test_partials,
        train_partials,
        f_track,
        stop_flag.FLAG,
    )


# ---- adaptive Dormand–Prince 5(4) per task ---------------------------------------------------------


def advance_dopri5(
    rhs, observe, loss, params: np.ndarray, y: np.ndarray, h: np.ndarray, counts: np.ndarray,
    t0: float, times: np.ndarray, rtol: float, atol: float, max_steps: int,
    local_track: np.ndarray, test_partials: np.ndarray, train_partials: np.ndarray,
    f_track: np.ndarray, *, residual: Any = None, rprev: np.ndarray | None = None,
    settle_tol: float = 0.0,
) -> None:  # fmt: skip
    """Advance ``y`` (n_state, n; in place) from ``t0`` through ``times`` with adaptive
    Dormand–Prince 5(4), each task with its own steps; loss partials and tracked f as
    :func:`advance_rk4`. With ``residual`` (the model's ``residual(p, y) -> (r, scale)``) and
    ``settle_tol`` > 0 the settling rule stops a task (failed = 2 in its counters: settled) after
    an accepted step with |r| ≤ max(settle_tol, rtol)·|scale| and |r| ≤ ``rprev`` (n,), the
    caller-owned |r| after each task's previous step (+inf at the start).

    Per task: the 5th-order solution is propagated (FSAL: k7 = rhs(y_new) is the next k1), the
    error estimate is err = h Σ_i E_i k_i (E = B − B̂) with the norm-wise scaled norm
    ‖err‖ / (atol + rtol·max(‖y‖, ‖y_new‖)), ‖·‖ the RMS over the n_state components; a step is
    accepted iff that is ≤ 1, and the next step is h·clip(0.9·err^(−1/5), 0.2, 10) (no growth
    right after a rejection; 0.2 for a non-finite err): the lane-vectorised dopri5's
    (:func:`fastdyn.core.steppers.dopri5_controller`). A step
    that would pass the next output time t_j is shortened to land on it exactly, and after it
    the larger of its own proposal and the unshortened step is kept.

    Caller-owned per-task state, updated in place, so that a run cut into segments (each call
    starting at the last one's final time) is bit-identical to one call: ``h`` (n,) float64, the
    next step (≤ 0 or NaN: choose one, Hairer's heuristic, :func:`fastdyn.drive.soa_tasks.dopri5_task`); ``counts``
    (3, n) int64, rows :data:`COUNT_ACCEPTED`, :data:`COUNT_REJECTED` (steps, cumulative) and
    :data:`COUNT_FAILED` (1 for a task that failed, 2 for one the settling rule stopped, else 0).

    A task that has made ``max_steps`` accepted steps (cumulative) with an output time still
    ahead fails the run at once, as the lane-vectorised dopri5: its counters are stored (failed = 1),
    ``stop_flag.FLAG[1]`` is set and every block returns with its outputs incomplete
    (:func:`fastdyn.core.stop_flag.halted`; the ODE driver then reports
    ``failure(summary(state))``). A task whose step falls below the resolution of t stops
    (failed = 1, no halt); its state and outputs stay frozen, in this and later calls. Blocks
    run in ``prange`` and poll the stop flag before every step and output time; a task's
    arithmetic does not depend on its neighbours, so 1 and N threads give bit-identical results.

    The model's functions are compile-time arguments, so each model has its own kernel, like
    :func:`advance_rk4`: compiled once (≈ 3 s) and kept in numba's cache directory under a
    fingerprint of the model's functions (:mod:`fastdyn.drive._kernel_cache`; numba's
    ``cache=True`` keys a closure by a pickle that differs in every process, so it never hits).
    """
    times = np.ascontiguousarray(times, dtype=np.float64)
    if not (np.isfinite(rtol) and rtol > 0 and np.isfinite(atol) and atol >= 0):
        raise ValueError(f"rtol/atol: need rtol > 0 and atol ≥ 0, got {rtol!r}, {atol!r}")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps: must be ≥ 1, got {max_steps!r}")
    if times.size and (times[0] < t0 or np.any(np.diff(times) <= 0)):
        raise ValueError("times: must be increasing and ≥ t0")
    n = y.shape[1]
    if h.shape != (n,) or h.dtype != np.float64:
        raise ValueError(f"h: must be a float64 array of shape ({n},), got {h.dtype} {h.shape}")
    if counts.shape != (3, n) or counts.dtype != np.int64:
        raise ValueError(
            f"counts: must be an int64 array of shape (3, {n}), got {counts.dtype} {counts.shape}"
        )
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[np.asarray(local_track, dtype=np.int64)] = np.arange(len(local_track))
    if rprev is None:
        rprev = np.full(n, np.inf)  # (read only by the settling rule)
    stop_flag.clear_halt()
    dopri5(rhs, observe, loss, residual)(
        params, y, h, counts, rprev, float(t0), times, float(rtol), float(atol),
        np.int64(max_steps), float(settle_tol), tpos, test_partials, train_partials, f_track,
        stop_flag.FLAG,
    )  # fmt: skip


# ---- fixed steps with options: per-task step sizes, gd, settling ------------------------------------


def _fixed_source(rhs: Any, observe: Any, loss: Any, rate: Any, residual: Any, gd: bool) -> Any:
    """The parallel CPU kernel of :func:`fastdyn.drive.soa_tasks.fixed_task` for one model and
    set of options, as the Python function :data:`fixed` jits."""
    task = soa_tasks.fixed_task(rhs, observe, loss, rate, residual, bool(gd), _njit)
    NR = soa_tasks.FIXED_ROWS

    def kernel(
        params, y, rec, mark0, marks, spt, h, eta, settle_tol, max_steps, tpos, test_part,
        train_part, f_track, stop,
    ):  # fmt: skip
        n, ns, kp, T = y.shape[1], y.shape[0], params.shape[0], marks.shape[0]
        for b in prange((n + BLOCK - 1) // BLOCK):
            lo, hi = b * BLOCK, min(b * BLOCK + BLOCK, n)
            p, yy, yt = np.empty(kp), np.empty(ns), np.empty(ns)
            yn, K = np.empty(ns), np.empty((4, ns))
            st = np.empty(NR)
            te, tr, fdummy = np.empty(T), np.empty(T), np.empty(T)
            for i in range(lo, hi):
                _load(params, y, i, p, yy)
                for r in range(NR):
                    st[r] = rec[r, i]
                tracked = tpos[i] >= 0
                f = f_track[tpos[i]] if tracked else fdummy
                code = task(
                    p, yy, yt, yn, K, st, mark0, marks, spt, h, eta, settle_tol, max_steps, te,
                    tr, f, tracked, stop,
                )  # fmt: skip
                if code != soa_tasks.DONE:
                    break  # a stop request: the block's outputs stay incomplete
                _add_terms(test_part, train_part, b, te, tr)
                for r in range(ns):
                    y[r, i] = yy[r]
                for r in range(NR):
                    rec[r, i] = st[r]

    return kernel


#: ``fixed(rhs, observe, loss, rate, residual, gd)``: the kernel of :func:`advance_fixed` for one
#: model and set of options (``rate``, ``residual`` None where not used; ``gd`` a bool)
fixed = KernelBuilder(
    f"{__name__}:fixed", _fixed_source, _FIXED_SIG, _KERNELS, parallel=True, **_FLAGS
)


def fixed_record(n: int) -> np.ndarray:
    """A fresh (FIXED_ROWS, n) record of :func:`advance_fixed`: no step chosen, none taken,
    |r| before the first step +inf, every task running."""
    rec = np.zeros((soa_tasks.FIXED_ROWS, n))
    rec[soa_tasks.FIX_H] = np.nan
    rec[soa_tasks.FIX_RPREV] = np.inf
    return rec


def advance_fixed(
    rhs, observe, loss, params: np.ndarray, y: np.ndarray, rec: np.ndarray, mark0: float,
    marks: np.ndarray, local_track: np.ndarray, test_partials: np.ndarray,
    train_partials: np.ndarray, f_track: np.ndarray, *, rate: Any = None, residual: Any = None,
    gd: bool = False, steps_per_timescale: float = 0.0, h: float = 0.0, eta: float = 0.0,
    settle_tol: float = 0.0, max_steps: int = 1 << 62,
) -> None:  # fmt: skip
    """Advance ``y`` (n_state, n; in place) through the output ``marks`` with fixed steps and
    the generic solver's options (:func:`fastdyn.drive.soa_tasks.fixed_task`): rk4 (marks are
    times, from ``mark0``) at h_s = 1/(steps_per_timescale·σ_s), σ_s = ``rate(p, y)`` (or one
    nominal step ``h`` without ``rate``), or gd (``gd``: marks are step indices, from step
    ``mark0``; y ← y + η·rhs(y)); settling with ``residual(p, y) -> (r, scale)`` and
    ``settle_tol``. ``rec`` (:data:`~fastdyn.drive.soa_tasks.FIXED_ROWS`, n) float64 is each
    task's record (:func:`fixed_record`), updated in place, so a run cut into segments is
    bit-identical to one call. Loss partials and tracked f as :func:`advance_rk4`."""
    marks = np.ascontiguousarray(marks, dtype=np.float64)
    if marks.size and (marks[0] < mark0 or np.any(np.diff(marks) <= 0)):
        raise ValueError("marks: must be increasing and ≥ mark0")
    n = y.shape[1]
    if rec.shape != (soa_tasks.FIXED_ROWS, n) or rec.dtype != np.float64:
        raise ValueError(
            f"rec: must be float64 ({soa_tasks.FIXED_ROWS}, {n}), got {rec.dtype} {rec.shape}"
        )
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[np.asarray(local_track, dtype=np.int64)] = np.arange(len(local_track))
    fixed(rhs, observe, loss, rate, residual, bool(gd))(
        params, y, rec, float(mark0), marks, float(steps_per_timescale), float(h), float(eta),
        float(settle_tol), np.int64(max_steps), tpos, test_partials, train_partials, f_track,
        stop_flag.FLAG,
    )  # fmt: skip
