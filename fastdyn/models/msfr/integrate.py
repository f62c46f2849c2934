"""④ Integrate the MSFR per-task gradient flow for a chunk of tasks (docs/theory.md, MSFR).

Every task s evolves y_s = (v_x, v_y, w_x, w_y) by the flow of :mod:`fastdyn.models.msfr.ode`
independently of the others, with its own steps, and is recorded at shared output times t_j:

- ``rk4``: fixed nominal step h_s = 1 / (steps_per_timescale · σ_s) with σ_s the task's rate scale
  (:func:`fastdyn.models.msfr.ode.rate_scale` at the state where the task starts: σ_s =
  rate·λmax(H)·(|Λ| + |r|), = 2 a_s Λ_s for small init). Each interval [t_{j−1}, t_j] is cut into
  n = ⌈Δt/h_s⌉ equal sub-steps, so every task lands exactly on every output time. h_s is kept in
  the state, so a run split into segments gives bit-identical results to an unsplit one.
- ``dopri5``: Dormand–Prince 5(4) per task, FSAL, standard controller
  (:func:`fastdyn.core.steppers.dopri5_controller`), norm-wise error
  ‖err‖_rms / (atol + rtol·max(‖y‖_rms, ‖y_new‖_rms)); a step that would pass t_j is shortened to
  land on it (and the unshortened proposal is kept for the next step).
- ``gd``: discrete gradient descent with one shared learning rate η, t = η · step:
  y ← y + η · F(y) (v and w updated simultaneously), recorded at step indices k_j.

Settling rule (needed for horizons like t ∈ [1e-2, 1e12] with rates spanning 1e-12 … 1e6): after
every accepted step, with r the new residual and r_prev the residual after the previous step,
a task is frozen when

    |r| ≤ settle_tol · |Λ|   and   |r| ≤ |r_prev|.

Along the exact gradient flow the task's loss rate·r²/2 is non-increasing, so |r(t)| ≤ |r(t*)| for
all later t and the frozen f differs from the true f(t) by at most 2·settle_tol·|Λ| (by
settle_tol·|Λ| when r keeps its sign, as it does on the final exponential approach); the state itself
is within ≈ |r|/|∇f| of the converged point. The second condition rejects a step on which |r|
grew (a gd overshoot). Frozen tasks keep their state and fill the remaining output times.
settle_tol ≤ 0 disables settling. Λ = 0 tasks never settle (their residual decays like 1/t).

Per-task status codes (:data:`STATUS_NAMES`): running (reached the last output time), settled,
frozen (rate 0 or a stationary start: never moves), step limit (``max_steps`` reached: the task
stops and keeps its state, so its outputs are stale), diverged (non-finite state: outputs NaN, so
the loss becomes NaN and the driver reports it), stalled (dopri5 step below the resolution of t).

Outputs per call: per-block partial sums (n_blocks, T) of the test terms wtest·r²/2 and the train
terms rate·r²/2 (each block summed serially in task order, :mod:`fastdyn.reduce`), f_s(t_j) of the
tracked tasks (n_track, T), and the updated :class:`TaskState` (final state, step sizes, step
counts, status) so a run can continue or be checkpointed. Deterministic: per-task arithmetic does
not depend on neighbours (nor on which thread runs it: the kernels hand out lane groups / tasks
dynamically to one worker per thread, so power-law tables with most of the work in the first
block still keep every thread busy), and sums are per fixed block in task order, so results are
bit-identical for any thread count and any chunk size that is a multiple of BLOCK (chunks start
on a block boundary).

Layers: Python wrappers (this module: :func:`integrate_rk4`, :func:`integrate_dopri5`,
:func:`integrate_gd`, the segment-wise :func:`advance` and the driver-facing :class:`State` /
:func:`advance_chunk`) validate and allocate; the ``@njit(parallel=True)`` kernels and the serial
per-group / per-task kernels are in :mod:`fastdyn.models.msfr.integrate_kernels`, the lock-step lane machinery of
rk4 and gd in :mod:`fastdyn.models.msfr.lanes`. The kernels and :data:`LANES` are re-exported here.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from ...core import saveat, stop_flag
from ...core.task_status import (  # noqa: F401  (public names of this module too)
    STATUS_DIVERGED,
    STATUS_FROZEN,
    STATUS_NAMES,
    STATUS_RUNNING,
    STATUS_SETTLED,
    STATUS_STALLED,
    STATUS_STEP_LIMIT,
)
from ...reduce import accumulate_blocks, n_blocks
from .integrate_kernels import (  # noqa: F401  (re-exported: kernels keep their old address)
    _lane_group,
    dopri5_kernel,
    gd_kernel,
    rk4_kernel,
)
from .lanes import _CHECK_EVERY, LANES  # noqa: F401  (re-exported)

INTEGRATORS = ("rk4", "dopri5", "gd")

# defaults (kept equal to config.py [solver])
DEFAULT_STEPS_PER_TIMESCALE = 200.0
DEFAULT_RTOL = 1e-8
DEFAULT_ATOL = 1e-14
DEFAULT_SETTLE_TOL = 1e-13
DEFAULT_MAX_STEPS = 10**8

# ----------------------------------------------------------------------------------------------
# Python layer: validation, allocation
# ----------------------------------------------------------------------------------------------


@dataclass
class TaskState:
    """Per-task integrator state of n tasks (structure of arrays, task index fastest).

    ``y`` (4, n): v_x, v_y, w_x, w_y. ``h``: rk4 nominal step / dopri5 next step proposal / gd η
    (NaN = not chosen yet). ``rprev``: |r| after the last step (settling). ``status``: int8 codes
    (:data:`STATUS_NAMES`). ``steps``: accepted steps. ``rejected``: dopri5 rejected steps.
    """

    y: np.ndarray
    h: np.ndarray
    rprev: np.ndarray
    status: np.ndarray
    steps: np.ndarray
    rejected: np.ndarray

    @classmethod
    def fresh(cls, v0x: Any, v0y: Any, w0x: Any, w0y: Any) -> TaskState:
        """The state at the start of a run from the initial weights."""
        cols = [np.asarray(a, dtype=np.float64).reshape(-1) for a in (v0x, v0y, w0x, w0y)]
        n = cols[0].shape[0]
        if any(c.shape[0] != n for c in cols):
            raise ValueError("v0x, v0y, w0x, w0y: must all have the same length")
        y = np.empty((4, n))
        for r, c in enumerate(cols):
            y[r] = c
        return cls(
            y=y,
            h=np.full(n, np.nan),
            rprev=np.full(n, np.inf),
            status=np.zeros(n, dtype=np.int8),
            steps=np.zeros(n, dtype=np.int64),
            rejected=np.zeros(n, dtype=np.int64),
        )

    @property
    def n(self) -> int:
        return int(self.y.shape[1])

    def view(self, a: int, b: int) -> TaskState:
        """Tasks a … b−1 as views (writes go through to this state)."""
        return TaskState(
            self.y[:, a:b],
            self.h[a:b],
            self.rprev[a:b],
            self.status[a:b],
            self.steps[a:b],
            self.rejected[a:b],
        )

    def copy(self) -> TaskState:
        return TaskState(
            *(
                np.array(x)
                for x in (self.y, self.h, self.rprev, self.status, self.steps, self.rejected)
            )
        )

    def counts(self) -> dict[str, int]:
        """Number of tasks per status name."""
        c = np.bincount(self.status.astype(np.int64), minlength=len(STATUS_NAMES))
        return {name: int(c[i]) for i, name in enumerate(STATUS_NAMES)}


@dataclass
class Segment:
    """Outputs of one call: per-block loss partials (n_blocks, T) and tracked f (n_track, T)."""

    times: np.ndarray
    test_partials: np.ndarray
    train_partials: np.ndarray
    f_track: np.ndarray
    track: np.ndarray
    out_steps: np.ndarray | None = None

    def loss_test(self) -> np.ndarray:
        """Σ over blocks (in block order) of the test partials: Σ_s wtest_s r_s²/2 per time."""
        out = np.zeros(self.test_partials.shape[1])
        accumulate_blocks(out, self.test_partials)
        return out

    def loss_train(self) -> np.ndarray:
        """Σ over blocks (in block order) of the train partials: Σ_s rate_s r_s²/2 per time."""
        out = np.zeros(self.train_partials.shape[1])
        accumulate_blocks(out, self.train_partials)
        return out


@dataclass
class ODEResult(Segment):
    """A whole integration: the segment outputs plus the final :class:`TaskState`."""

    state: TaskState = field(default=None)  # type: ignore[assignment]


def _f64(name: str, a: Any, n: int | None = None) -> np.ndarray:
    """``a`` as a 1-d C-contiguous float64 array: the same object when it is one already (the GPU
    twins then find their device copy of it), checked finite in one pass without a temporary
    (a finite sum means finite entries; an overflowing sum is checked entry by entry)."""
    if isinstance(a, np.ndarray) and a.dtype == np.float64 and a.ndim == 1 and a.flags.c_contiguous:
        x = a
    else:
        x = np.ascontiguousarray(np.asarray(a, dtype=np.float64).reshape(-1))
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name}: expected length {n}, got {x.shape[0]}")
    with np.errstate(over="ignore", invalid="ignore"):
        total = x.sum()
    if not np.isfinite(total) and not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: must be finite")
    return x


#: the per-task parameter arrays checked already (id → weak reference): a run passes the same
#: table arrays in every segment, and the four checks cost ≈ 30 ms per 10^7 tasks
_CHECKED: dict[int, tuple] = {}


def _params(lam: Any, psi: Any, rate: Any, wtest: Any):
    key = (id(lam), id(psi), id(rate), id(wtest))
    got = _CHECKED.get(key[0])
    if got is not None and all(r() is a for r, a in zip(got, (lam, psi, rate, wtest), strict=True)):
        return lam, psi, rate, wtest
    out = _check_params(lam, psi, rate, wtest)
    if all(o is a for o, a in zip(out, (lam, psi, rate, wtest), strict=True)):
        if len(_CHECKED) > 64:
            _CHECKED.clear()
        _CHECKED[key[0]] = tuple(weakref.ref(a) for a in out)
    return out


def _check_params(lam: Any, psi: Any, rate: Any, wtest: Any):
    lam = _f64("lam", lam)
    n = lam.shape[0]
    psi = _f64("psi", psi, n)
    rate = _f64("rate", rate, n)
    wtest = _f64("wtest", wtest, n)
    if psi.size and psi.min() <= 0.0:
        raise ValueError("psi: must be > 0")
    if rate.size and rate.min() < 0.0:
        raise ValueError("rate: must be ≥ 0")
    return lam, psi, rate, wtest


#: the last few tracked-position arrays, by (n, tracked indices): a run asks for the same ones
#: in every segment (and most chunks track nothing), and a fresh 8-byte-per-task array costs
#: page faults (≈ 0.2 s at 10^7 tasks) and, on the GPU, a new device copy
_TPOS: dict[tuple[int, bytes], np.ndarray] = {}
_TPOS_KEEP = 4


def _track_positions(track: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    tr = np.zeros(0, np.int64) if track is None else np.asarray(track, dtype=np.int64).reshape(-1)
    if tr.size and (tr.min() < 0 or tr.max() >= n):
        raise ValueError(
            f"track: local task indices must lie in [0, {n}), got {tr.min()}…{tr.max()}"
        )
    if np.unique(tr).size != tr.size:
        raise ValueError("track: indices must be unique")
    key = (n, tr.tobytes())
    tpos = _TPOS.pop(key, None)  # (re-inserted: the most recent last)
    if tpos is None:
        tpos = np.full(n, -1, dtype=np.int64)
        tpos[tr] = np.arange(tr.size, dtype=np.int64)
        while len(_TPOS) >= _TPOS_KEEP:
            del _TPOS[next(iter(_TPOS))]
    _TPOS[key] = tpos  # shared: the kernels only read it
    return tr, tpos


def _check_settings(settle_tol: float, max_steps: int) -> None:
    if not np.isfinite(settle_tol):
        raise ValueError(f"settle_tol: must be finite, got {settle_tol!r}")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps: must be ≥ 1, got {max_steps}")


def _kernel_state(state: TaskState) -> tuple[np.ndarray, ...]:
    """The task-state arrays in the kernels' argument order: vx, vy, wx, wy (the rows of y), h,
    rprev, status, steps."""
    if state.y.shape[0] != 4 or state.y.dtype != np.float64:
        raise ValueError(f"state.y: expected float64 (4, n), got {state.y.dtype} {state.y.shape}")
    return (*(state.y[r] for r in range(4)), state.h, state.rprev, state.status, state.steps)


def advance(
    integrator: str,
    lam: Any,
    psi: Any,
    rate: Any,
    wtest: Any,
    state: TaskState,
    times: Any,
    *,
    t0: float = 0.0,
    query: bool = True,
    steps_per_timescale: float = DEFAULT_STEPS_PER_TIMESCALE,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    eta: float | None = None,
    out_steps: Any = None,
    k0: int = 0,
    settle_tol: float = DEFAULT_SETTLE_TOL,
    max_steps: int = DEFAULT_MAX_STEPS,
    track: Any = None,
    test_partials: np.ndarray | None = None,
    train_partials: np.ndarray | None = None,
    f_track: np.ndarray | None = None,
    device: str = "cpu",
) -> Segment:
    """Advance ``state`` (in place) of one chunk of tasks from time ``t0`` through the output
    ``times`` with ``integrator`` ∈ {"rk4", "dopri5", "gd"} and return the segment's outputs.
    ``device = "cuda"`` runs the rk4, gd and dopri5 kernels' CUDA twins (``integrate_cuda.py``).

    Parameters are per-task float64 arrays (Λ, ψ, rate = #_s/N, wtest = P(s)); the chunk's first
    task must sit on a block boundary for the partials to combine across chunks. ``query=False``
    drops the query term of H (H⁰ = ψ u uᵀ, the ε = 0 model). ``times`` strictly increasing,
    ``times[0] ≥ t0`` (an output at t0 records the current state). For gd give ``eta`` and either
    ``out_steps`` (int64 step indices, > k0 except the first may equal k0) or ``times`` (converted
    by :func:`fastdyn.core.saveat.gd_steps`); ``k0`` is the step the state is at. Partial/f arrays
    may be passed in (zeroed by the caller; results are added/written), else they are allocated.
    """
    lam, psi, rate, wtest = _params(lam, psi, rate, wtest)
    n = lam.shape[0]
    if state.n != n:
        raise ValueError(f"state: holds {state.n} tasks, parameters {n}")
    _check_settings(settle_tol, max_steps)
    tr, tpos = _track_positions(track, n)
    q = 1.0 if query else 0.0
    marks_out: np.ndarray | None = None
    if integrator == "gd":
        if eta is None or not (np.isfinite(eta) and eta > 0.0):
            raise ValueError(f"eta: gd needs a finite learning rate > 0, got {eta!r}")
        if out_steps is None:
            ks, times_arr = saveat.gd_steps(times, eta)
        else:
            ks = np.asarray(out_steps, dtype=np.int64).reshape(-1)
            times_arr = eta * ks.astype(np.float64)
        if ks.size == 0 or ks[0] < k0 or (ks.size > 1 and np.any(np.diff(ks) <= 0)):
            raise ValueError("out_steps: must be strictly increasing step indices ≥ k0")
        marks_out = ks
        nt = ks.size
    elif integrator in ("rk4", "dopri5"):
        times_arr = saveat.check_times(times)
        if not np.isfinite(t0) or times_arr[0] < t0:
            raise ValueError(f"times: must start at or after t0 = {t0:g}")
        nt = times_arr.size
    else:
        raise ValueError(f"integrator: must be one of {', '.join(INTEGRATORS)}, got {integrator!r}")
    nb = n_blocks(n)
    if test_partials is None:
        test_partials = np.zeros((nb, nt))
    if train_partials is None:
        train_partials = np.zeros((nb, nt))
    if f_track is None:
        f_track = np.zeros((tr.size, nt))
    for name, a, shape in (
        ("test_partials", test_partials, (nb, nt)),
        ("train_partials", train_partials, (nb, nt)),
        ("f_track", f_track, (tr.size, nt)),
    ):
        if a.shape != shape or a.dtype != np.float64:
            raise ValueError(
                f"{name}: expected float64 array of shape {shape}, got {a.dtype} {a.shape}"
            )
    common = (lam, psi, rate, wtest, *_kernel_state(state))
    on_gpu = device == "cuda"
    if integrator == "rk4":
        if not (np.isfinite(steps_per_timescale) and steps_per_timescale > 0):
            raise ValueError(f"steps_per_timescale: must be > 0, got {steps_per_timescale!r}")
        args = (
            *common, q, float(t0), times_arr, float(steps_per_timescale), float(settle_tol),
            int(max_steps), tpos, test_partials, train_partials, f_track,
        )  # fmt: skip
        _gpu().rk4_kernel(*args) if on_gpu else rk4_kernel(*args, stop_flag.FLAG, _bins())
    elif integrator == "dopri5":
        if not (np.isfinite(rtol) and rtol > 0 and np.isfinite(atol) and atol >= 0):
            raise ValueError(f"rtol/atol: need rtol > 0 and atol ≥ 0, got {rtol!r}, {atol!r}")
        stop_flag.clear_halt()
        args = (
            *common, state.rejected, q, float(t0), times_arr, float(rtol), float(atol),
            float(settle_tol), int(max_steps), tpos, test_partials, train_partials, f_track,
            stop_flag.FLAG,
        )  # fmt: skip
        _gpu().dopri5_kernel(*args) if on_gpu else dopri5_kernel(*args, _bins())
    else:
        args = (
            *common, q, float(k0), marks_out.astype(np.float64), float(eta), float(settle_tol),
            int(max_steps), tpos, test_partials, train_partials, f_track,
        )  # fmt: skip
        _gpu().gd_kernel(*args) if on_gpu else gd_kernel(*args, stop_flag.FLAG, _bins())
    return Segment(times_arr, test_partials, train_partials, f_track, tr, marks_out)


def _bins() -> int:
    """Workers of the CPU kernels: one per numba thread (the results do not depend on it)."""
    return int(numba.get_num_threads())


def _gpu():
    """The CUDA twins (imported on first use: numba.cuda is only loaded for device = "cuda")."""
    from . import integrate_cuda

    return integrate_cuda


def keep_state_on(device: str) -> Any:
    """Context for a driver's run: with ``device = "cuda"`` the task state stays on the GPU
    between calls of :func:`advance` (:func:`fastdyn.models.msfr.integrate_cuda.resident_state`); the
    driver calls :func:`state_to_host` before reading the state arrays. A no-op on the CPU."""
    return _gpu().resident_state() if device == "cuda" else contextlib.nullcontext()


def state_to_host() -> None:
    """Bring GPU-resident task state back into its host arrays (a no-op unless the CUDA twins
    ran inside :func:`keep_state_on`)."""
    mod = sys.modules.get(f"{__package__}.integrate_cuda")
    if mod is not None:
        mod.state_to_host()


def _integrate(
    integrator: str, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, **kw
) -> ODEResult:
    n = np.asarray(lam).reshape(-1).shape[0]
    state = TaskState.fresh(
        *(
            _f64(nm, a, n)
            for nm, a in zip(("v0x", "v0y", "w0x", "w0y"), (v0x, v0y, w0x, w0y), strict=True)
        )
    )
    seg = advance(integrator, lam, psi, rate, wtest, state, times, **kw)
    return ODEResult(
        seg.times,
        seg.test_partials,
        seg.train_partials,
        seg.f_track,
        seg.track,
        seg.out_steps,
        state,
    )


def integrate_rk4(
    lam: Any, psi: Any, rate: Any, wtest: Any, v0x: Any, v0y: Any, w0x: Any, w0y: Any, times: Any,
    *, t0: float = 0.0, steps_per_timescale: float = DEFAULT_STEPS_PER_TIMESCALE,
    settle_tol: float = DEFAULT_SETTLE_TOL, max_steps: int = DEFAULT_MAX_STEPS,
    query: bool = True, track: Any = None,
) -> ODEResult:  # fmt: skip
    """Per-task fixed-step RK4 from (v0, w0) at t0 to the output ``times``
    (h_s = 1/(steps_per_timescale · σ_s), sub-stepped to land on each time)."""
    return _integrate(
        "rk4", lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, t0=t0,
        steps_per_timescale=steps_per_timescale, settle_tol=settle_tol, max_steps=max_steps,
        query=query, track=track,
    )  # fmt: skip


def integrate_dopri5(
    lam: Any, psi: Any, rate: Any, wtest: Any, v0x: Any, v0y: Any, w0x: Any, w0y: Any, times: Any,
    *, t0: float = 0.0, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
    settle_tol: float = DEFAULT_SETTLE_TOL, max_steps: int = DEFAULT_MAX_STEPS,
    query: bool = True, track: Any = None,
) -> ODEResult:  # fmt: skip
    """Per-task adaptive Dormand–Prince 5(4) from (v0, w0) at t0 to the output ``times``."""
    return _integrate(
        "dopri5", lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, t0=t0, rtol=rtol, atol=atol,
        settle_tol=settle_tol, max_steps=max_steps, query=query, track=track,
    )  # fmt: skip


def integrate_gd(
    lam: Any, psi: Any, rate: Any, wtest: Any, v0x: Any, v0y: Any, w0x: Any, w0y: Any, times: Any,
    *, eta: float, settle_tol: float = DEFAULT_SETTLE_TOL, max_steps: int = DEFAULT_MAX_STEPS,
    query: bool = True, track: Any = None,
) -> ODEResult:  # fmt: skip
    """Discrete gradient descent with learning rate ``eta`` from step 0, recorded at the steps
    k_j = round(t_j/η) (result.times = η·k_j, result.out_steps = k_j)."""
    return _integrate(
        "gd", lam, psi, rate, wtest, v0x, v0y, w0x, w0y, times, eta=eta, settle_tol=settle_tol,
        max_steps=max_steps, query=query, track=track,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# driver-facing state over all represented tasks (used by the MSFR setup, models/msfr/setup.py)
# ----------------------------------------------------------------------------------------------


class State:
    """The integrator state of all D represented tasks across segments, plus each chunk's clock."""

    def __init__(self, tasks: TaskState):
        self.tasks = tasks
        self.t_at: dict[int, float] = {}
        self.k_at: dict[int, int] = {}

    @classmethod
    def create(cls, chunks: Any, d: int) -> State:
        """From an iterable of task chunks (attributes first, n, v0x, v0y, w0x, w0y)."""
        y = np.zeros((4, int(d)))
        for ch in chunks:
            a, b = ch.first, ch.first + ch.n
            y[0, a:b], y[1, a:b], y[2, a:b], y[3, a:b] = ch.v0x, ch.v0y, ch.w0x, ch.w0y
        return cls(TaskState.fresh(y[0], y[1], y[2], y[3]))

    def summary(self) -> dict[str, int]:
        """Task counts per status plus total accepted/rejected steps."""
        out = {k.replace(" ", "_"): v for k, v in self.tasks.counts().items()}
        out["steps"] = int(self.tasks.steps.sum())
        out["rejected"] = int(self.tasks.rejected.sum())
        return out


def advance_chunk(
    solver: Any,
    integrator: str,
    ch: Any,
    state: State,
    times: np.ndarray,
    steps: np.ndarray | None,
    track_local: np.ndarray,
    test_partials: np.ndarray,
    train_partials: np.ndarray,
    f_track: np.ndarray,
    query: bool = True,
    device: str = "cpu",
) -> None:
    """Advance chunk ``ch`` of ``state`` through one segment of output ``times`` (gd: step indices
    ``steps``), adding into the given partials and writing ``f_track``. ``solver`` has attributes
    rtol, atol, steps_per_timescale, lr, settle_tol (config [solver]); ``device``: "cpu" or
    "cuda"."""
    view = state.tasks.view(ch.first, ch.first + ch.n)
    kw: dict[str, Any] = dict(
        query=query,
        device=device,
        settle_tol=float(solver.settle_tol),
        track=track_local,
        test_partials=test_partials,
        train_partials=train_partials,
        f_track=f_track,
        max_steps=int(getattr(solver, "max_steps", DEFAULT_MAX_STEPS)),
    )
    if integrator == "gd":
        k0 = state.k_at.get(ch.first, 0)
        advance(
            "gd",
            ch.lam,
            ch.psi,
            ch.rate,
            ch.wtest,
            view,
            times,
            eta=float(solver.lr),
            out_steps=steps,
            k0=k0,
            **kw,
        )
        state.k_at[ch.first] = int(steps[-1])
    else:
        t0 = state.t_at.get(ch.first, 0.0)
        extra = (
            {"steps_per_timescale": float(solver.steps_per_timescale)}
            if integrator == "rk4"
            else {"rtol": float(solver.rtol), "atol": float(solver.atol)}
        )
        advance(integrator, ch.lam, ch.psi, ch.rate, ch.wtest, view, times, t0=t0, **extra, **kw)
    state.t_at[ch.first] = float(times[-1])
