"""CUDA twins of :func:`fastdyn.models.msfr.integrate_kernels.rk4_kernel`, :func:`~.gd_kernel` and
:func:`~.dopri5_kernel`.

Same arguments in the same order, same in-place updates of the task state, the per-block
partials and ``f_track``. Two launches per call:

1. one thread per task runs that task exactly as the CPU does: rk4/gd as one lane of the CPU's
   lock-step lanes (:func:`fastdyn.models.msfr.integrate_kernels._lane_group`: the same start-up,
   frozen tasks, nominal step 1/(spt·σ_s) or η, sub-steps per output interval, settling rule,
   step limit and divergence check), dopri5 as :func:`~.lanes_dopri5.dopri5_group` does per lane
   (its own adaptive steps, the same controller). The per-task rules
   (:mod:`fastdyn.models.msfr.task_rules`), the right-hand side, rate scale, loss terms, the steps
   (``euler_step``, ``rk4_gain_step``, ``dopri5_step`` of :mod:`fastdyn.models.msfr.steps`) and the step-size control are compiled
   for the device from the CPU's own Python source (:mod:`fastdyn.models.msfr.ode`,
   :mod:`fastdyn.core.steppers`; a step's right-hand side is passed to it as on the CPU). Each
   thread writes f at every output time to ``fbuf[j, i]`` (task index fastest: a warp's stores
   are coalesced);
2. one thread per (block, output time) adds its block's loss terms in task order onto the
   partials, the CPU's order, so the reduction is fixed whatever the launch configuration.

Device memory is reused across calls: the per-task parameters (Λ, ψ, rate, w_test, tracked
positions) are copied once per host array (a weak reference tells a new array from the same
one: they must not be changed in place between calls, and fastdyn's drivers never do), and the
state, f and partial buffers are allocated once per size. The state goes to the device and back
once per call (the caller's arrays are updated on return; checkpoints read them).

On the GPU a dopri5 task that reaches ``max_steps`` sets a device flag that the other tasks poll
every STOP_POLL steps, as on the CPU; a SIGINT/SIGTERM is acted on when the call returns.
Under numba's CUDA simulator the arithmetic is the CPU's operation for operation (tests/cuda
check ≤ 1e-12 relative); on a GPU see docs/cuda.md for the measured differences.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
from numba import cuda

from ... import _cuda_memory as _mem
from ...core.steppers import dopri5_controller
from ...core.task_status import (
    STATUS_DIVERGED,
    STATUS_FROZEN,
    STATUS_RUNNING,
    STATUS_SETTLED,
    STATUS_STALLED,
    STATUS_STEP_LIMIT,
)
from ...reduce import BLOCK
from .integrate_kernels import STOP_POLL
from .ode import task_dir, task_dir_q1, task_loss, task_rhs, task_rhs_q1
from .steps import dopri5_step, error_norm, euler_step, rk4_gain_step, rk4_gain_weights
from .steps import rms4 as _rms
from .task_rules import (
    dopri5_start,
    fixed_start,
    interval_status,
    interval_steps,
    settle_threshold,
    settles,
)

_kernels: dict[str, object] = {}


def _device(fn):
    """``fn`` (an njit function) compiled as a CUDA device function from its Python source. The
    njit functions it calls are compiled for the device by numba in the same way."""
    return cuda.jit(device=True)(fn.py_func)


def _ceil(x):
    return float(math.ceil(x))


def _build():
    rhs_g, rhs_1, dir_g, dir_1 = map(_device, (task_rhs, task_rhs_q1, task_dir, task_dir_q1))
    weights, tloss, rms = map(_device, (rk4_gain_weights, task_loss, _rms))
    enorm, control = _device(error_norm), _device(dopri5_controller)
    threshold, settled = _device(settle_threshold), _device(settles)
    fstart, dstart = _device(fixed_start), _device(dopri5_start)
    substeps, after = _device(interval_steps), _device(interval_status)
    ceil = cuda.jit(device=True)(_ceil)
    euler, gain, dopri5 = map(_device, (euler_step, rk4_gain_step, dopri5_step))

    @cuda.jit(device=True)
    def rhs(p, y):
        if p[2] == 1.0:
            return rhs_1(p, y)
        return rhs_g(p, y)

    @cuda.jit(device=True)
    def direction(p, y):
        if p[2] == 1.0:
            return dir_1(p, y)
        return dir_g(p, y)

    @cuda.jit(device=True)
    def start(is_gd, p, y):
        """(k, f) for gd, (A, f) for rk4 (the lanes' rows 4–7, see fastdyn.models.msfr.lanes)."""
        if is_gd:
            return rhs(p, y)
        return direction(p, y)

    @cuda.jit(device=True)
    def step(is_gd, p, y, k1, f1, h):
        """The CPU lanes' step: steps.euler_step (gd) or steps.rk4_gain_step (rk4, k1 the
        direction A and f1 its f), compiled from their source."""
        if is_gd:
            yn, kn, fn, _ = euler(rhs, p, y, k1, h)
            return yn, kn, fn
        return gain(direction, p, y, k1, f1, weights(p[3], p[0], h))

    @cuda.jit
    def tasks(is_gd, lam, psi, rate, vx, vy, wx, wy, hnom, rprev, status, steps, q, mark0,
              marks, spt, eta, settle_tol, max_steps, tpos, fbuf, f_track):  # fmt: skip
        i = cuda.grid(1)
        if i >= lam.shape[0]:
            return
        nt = marks.shape[0]
        fmax = float(max_steps)
        p = (lam[i], psi[i], q, rate[i])
        y = (vx[i], vy[i], wx[i], wy[i])
        thr = threshold(settle_tol, 0.0, lam[i])
        nst = float(steps[i])
        rp = rprev[i]
        alive, frozen, hn = fstart(status[i] == STATUS_RUNNING, p, y, hnom[i], is_gd, spt, eta)
        if frozen:
            status[i] = STATUS_FROZEN
        k, f = start(is_gd, p, y)
        prev = mark0
        kk = tpos[i]
        for j in range(nt):
            mj = marks[j]
            dt = mj - prev
            prev = mj
            limit = False
            if alive and dt > 0.0:
                nf, hh, limit = substeps(dt, hn, nst, fmax, is_gd, eta, ceil)
                s = 0.0
                while alive and s < nf:
                    y, k, f = step(is_gd, p, y, k, f, hh)
                    r = abs(f - lam[i])
                    if settled(True, r, thr, rp):
                        alive = False
                    rp = r
                    nst += 1.0
                    s += 1.0
            alive, status[i] = after(alive, status[i], f, y, limit)
            fbuf[j, i] = f
            if kk >= 0:
                f_track[kk, j] = f
        vx[i] = y[0]
        vy[i] = y[1]
        wx[i] = y[2]
        wy[i] = y[3]
        steps[i] = int(nst)
        rprev[i] = rp
        hnom[i] = hn

    @cuda.jit
    def dopri5_tasks(lam, psi, rate, vx, vy, wx, wy, hstate, rprev, status, steps, rejected, q,
                     t0, times, rtol, atol, settle_tol, max_steps, tpos, fbuf, f_track, halt):  # fmt: skip
        """lanes_dopri5.dopri5_group per lane, one thread per task; ``halt[0]`` is the CPU's
        ``stop[1]`` (a task used up its step budget: every task gives up)."""
        i = cuda.grid(1)
        if i >= lam.shape[0]:
            return
        nt = times.shape[0]
        lm = lam[i]
        p = (lm, psi[i], q, rate[i])
        y = (vx[i], vy[i], wx[i], wy[i])
        k, f = rhs_g(p, y)
        thr = threshold(settle_tol, rtol, lm)
        alive, frozen, h = dstart(status[i] == STATUS_RUNNING, p, y, k, hstate[i])
        if frozen:
            status[i] = STATUS_FROZEN
        t = t0
        nst = steps[i]
        nrej = rejected[i]
        rp = rprev[i]
        rej_before = False
        for j in range(nt):
            tj = times[j]
            while alive and t < tj:
                if (nst + nrej) % STOP_POLL == 0 and halt[0] != 0:
                    return
                if nst >= max_steps:
                    status[i] = STATUS_STEP_LIMIT
                    halt[0] = 1
                    steps[i] = nst
                    return
                clipped = h >= tj - t
                hh = tj - t if clipped else h
                if t + hh == t:
                    status[i] = STATUS_STALLED
                    alive = False
                    break
                yn, kn, fn, e = dopri5(rhs_g, p, y, k, hh)
                err = enorm(e, y, yn, atol, rtol)
                acc, hnew = control(err, hh, rej_before)
                if acc:
                    t = tj if clipped else t + hh
                    y = yn
                    k = kn
                    f = fn
                    nst += 1
                    rej_before = False
                    h = max(hnew, h) if clipped else hnew
                    r = abs(f - lm)
                    if not (math.isfinite(f) and math.isfinite(rms(y))):
                        status[i] = STATUS_DIVERGED
                        alive = False
                    elif settled(True, r, thr, rp):
                        status[i] = STATUS_SETTLED
                        alive = False
                    rp = r
                else:
                    nrej += 1
                    rej_before = True
                    h = hnew
            fbuf[j, i] = f
        kk = tpos[i]
        if kk >= 0:
            for j in range(nt):
                f_track[kk, j] = fbuf[j, i]
        vx[i] = y[0]
        vy[i] = y[1]
        wx[i] = y[2]
        wy[i] = y[3]
        hstate[i] = h
        rprev[i] = rp
        steps[i] = nst
        rejected[i] = nrej

    @cuda.jit
    def reduce_blocks(fbuf, lam, rate, wtest, test_part, train_part):
        """Row b, time j of the partials += the loss terms of block b's tasks, in task order."""
        b, j = cuda.grid(2)
        nb, nt = test_part.shape
        if b >= nb or j >= nt:
            return
        n = lam.shape[0]
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        at = test_part[b, j]
        ar = train_part[b, j]
        for i in range(lo, hi):
            te, tr = tloss(fbuf[j, i] - lam[i], rate[i], wtest[i])
            at += te
            ar += tr
        test_part[b, j] = at
        train_part[b, j] = ar

    return {
        "tasks": tasks,
        "dopri5": dopri5_tasks,
        "reduce": reduce_blocks,
    }


def _kernel(name: str):
    if not _kernels:
        _kernels.update(_build())
    return _kernels[name]


_SPACE = "integrate"


def _param(name: str, host: np.ndarray):
    return _mem.resident(_SPACE, name, host)


def _buffer(name: str, shape: tuple[int, ...], dtype=np.float64):
    return _mem.buffer(_SPACE, name, shape, dtype)


def _to_device(name: str, host: np.ndarray):
    return _mem.to_device(_SPACE, name, host)


def _owner(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (numpy keeps a view's ``base`` pointing at it)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class _Mirror:
    """Device copies of one chunk's task-state arrays (views into the run's state arrays), kept
    for a whole run inside :func:`resident_state`. ``dirty``: the device copy is newer than the
    host arrays (nothing has copied back since the last kernel)."""

    def __init__(self, host_state: tuple):
        self.host = list(host_state)  # strong references: the run's state lives as long anyway
        self.dev = [cuda.to_device(np.ascontiguousarray(a)) for a in host_state]
        self.dirty = False

    def same(self, host_state: tuple) -> bool:
        return all(_owner(h) is _owner(a) for h, a in zip(self.host, host_state, strict=True))

    def to_host(self) -> None:
        for h, d in zip(self.host, self.dev, strict=True):
            if h.flags.c_contiguous:
                d.copy_to_host(h)
            else:
                h[...] = d.copy_to_host()
        self.dirty = False


#: inside resident_state(): key = the state views' (address, shape, strides)
_mirrors: dict[tuple, _Mirror] = {}
_keep = [0]  # depth of resident_state()


def _key(host_state: tuple) -> tuple:
    return tuple((a.__array_interface__["data"][0], a.shape, a.strides) for a in host_state)


def _state_in(host_state: tuple) -> list:
    """Device copies of the state. Inside :func:`resident_state` the chunk's mirror, which keeps
    the values between calls (copied from the host only when the host is as new); otherwise
    reusable buffers filled from the host."""
    if _keep[0] == 0:
        return [_to_device(f"state{k}", a) for k, a in enumerate(host_state)]
    key = _key(host_state)
    m = _mirrors.pop(key, None)  # re-inserted below: the most recently used last
    if m is not None and not m.same(host_state):
        if m.dirty:
            m.to_host()
        m = None
    if m is None:
        _make_room(sum(a.nbytes for a in host_state))
        m = _Mirror(host_state)
    elif not m.dirty:
        for h, d in zip(host_state, m.dev, strict=True):
            d.copy_to_device(np.ascontiguousarray(h))
    _mirrors[key] = m
    return m.dev


#: device bytes the resident task states may take (None: half the device memory free when the
#: first mirror is made; tests set it small). Beyond it the least recently used chunk's state
#: goes back to the host (copied if the device holds newer values), so a run with more tasks
#: than the GPU holds still runs, copying those chunks in and out as outside resident_state.
RESIDENT_BYTES: int | None = None
_budget: list[int] = []


def _make_room(need: int) -> None:
    if RESIDENT_BYTES is not None:
        cap = RESIDENT_BYTES
    else:
        if not _budget:
            try:
                free = float(cuda.current_context().get_memory_info()[0])
            except Exception:  # noqa: BLE001 — no memory figures
                free = math.inf
            _budget.append(int(free) // 2 if math.isfinite(free) else 1 << 62)  # simulator: inf
        cap = _budget[0]
    used = sum(sum(d.nbytes for d in m.dev) for m in _mirrors.values())
    while _mirrors and used + need > cap:
        old = _mirrors.pop(next(iter(_mirrors)))
        if old.dirty:
            old.to_host()
        used -= sum(d.nbytes for d in old.dev)


def _state_out(host_state: tuple, d_state: list) -> None:
    if _keep[0] > 0:
        _mirrors[_key(host_state)].dirty = True  # copied back by state_to_host()
        return
    for h, d in zip(host_state, d_state, strict=True):
        if h.flags.c_contiguous:
            d.copy_to_host(h)
        else:
            h[...] = d.copy_to_host()


def state_to_host() -> None:
    """Copy every device-resident task state that the kernels changed back into its host arrays."""
    for m in _mirrors.values():
        if m.dirty:
            m.to_host()


@contextmanager
def resident_state():
    """Keep the integrators' task state on the device between calls (a driver's whole run).
    The driver calls :func:`state_to_host` before it reads the host arrays (checkpoints,
    summaries); leaving copies back and frees the device copies. Outside it every call copies the
    state to the device and back."""
    _keep[0] += 1
    try:
        yield
    finally:
        _keep[0] -= 1
        try:
            state_to_host()
        finally:
            if _keep[0] == 0:
                _mirrors.clear()


def _tpos(tpos: np.ndarray):
    """Device copy of the tracked positions (−1, or the task's row in f_track): one per host
    array, which fastdyn.models.msfr.integrate reuses from segment to segment."""
    return _mem.resident(_SPACE, f"tpos{id(tpos)}", tpos)


def _reduce(d_f, d_lam, d_rate, d_wt, test_part, train_part) -> None:
    nb, nt = test_part.shape
    d_tp = _to_device("test_part", test_part)
    d_rp = _to_device("train_part", train_part)
    grid = (max(1, math.ceil(nb / 8)), max(1, math.ceil(nt / 32)))
    _kernel("reduce")[grid, (8, 32)](d_f, d_lam, d_rate, d_wt, d_tp, d_rp)
    d_tp.copy_to_host(test_part)
    d_rp.copy_to_host(train_part)


def _inputs(host_state: tuple, params: tuple, tpos, marks, f_track) -> tuple:
    """Device arrays of one call: the state, (Λ, ψ, rate, w_test, tracked positions), the output
    marks, the f buffer (times × tasks) and f_track."""
    lam, psi, rate, wtest = params
    d_params = tuple(
        _param(k, a) for k, a in (("lam", lam), ("psi", psi), ("rate", rate), ("wtest", wtest))
    )
    d_marks = cuda.to_device(np.ascontiguousarray(marks))
    d_f = _buffer("f", (marks.shape[0], lam.shape[0]))
    return (
        _state_in(host_state),
        (*d_params, _tpos(tpos)),
        d_marks,
        d_f,
        _to_device("f_track", f_track),
    )


def _launch1(n: int) -> tuple[int, int]:
    tpb = 128
    return max(1, math.ceil(n / tpb)), tpb


def _run(is_gd, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, mark0,
         marks, spt, eta, settle_tol, max_steps, tpos, test_part, train_part, f_track):  # fmt: skip
    host_state = (vx, vy, wx, wy, hnom, rprev, status, steps)
    d_state, (d_lam, d_psi, d_rate, d_wt, d_tpos), d_marks, d_f, d_ft = _inputs(
        host_state, (lam, psi, rate, wtest), tpos, marks, f_track
    )
    grid, tpb = _launch1(lam.shape[0])
    _kernel("tasks")[grid, tpb](
        is_gd, d_lam, d_psi, d_rate, *d_state, float(q), float(mark0), d_marks, float(spt),
        float(eta), float(settle_tol), int(max_steps), d_tpos, d_f, d_ft,
    )  # fmt: skip
    _reduce(d_f, d_lam, d_rate, d_wt, test_part, train_part)
    _state_out(host_state, d_state)
    d_ft.copy_to_host(f_track)


def rk4_kernel(lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, t0, times,
               spt, settle_tol, max_steps, tpos, test_part, train_part, f_track):  # fmt: skip
    """GPU twin of :func:`fastdyn.models.msfr.integrate_kernels.rk4_kernel` (same arguments, same
    results)."""
    _run(False, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, t0, times,
         spt, 0.0, settle_tol, max_steps, tpos, test_part, train_part, f_track)  # fmt: skip


def gd_kernel(lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, k0, kout, eta,
              settle_tol, max_steps, tpos, test_part, train_part, f_track):  # fmt: skip
    """GPU twin of :func:`fastdyn.models.msfr.integrate_kernels.gd_kernel` (same arguments, same
    results)."""
    _run(True, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, k0, kout,
         0.0, eta, settle_tol, max_steps, tpos, test_part, train_part, f_track)  # fmt: skip


def dopri5_kernel(lam, psi, rate, wtest, vx, vy, wx, wy, hstate, rprev, status, steps, rejected,
                  q, t0, times, rtol, atol, settle_tol, max_steps, tpos, test_part, train_part,
                  f_track, stop):  # fmt: skip
    """GPU twin of :func:`fastdyn.models.msfr.integrate_kernels.dopri5_kernel` (same arguments but the
    worker count; ``stop[1]`` is set when a task used up its step budget, as on the CPU)."""
    host_state = (vx, vy, wx, wy, hstate, rprev, status, steps, rejected)
    d_state, (d_lam, d_psi, d_rate, d_wt, d_tpos), d_times, d_f, d_ft = _inputs(
        host_state, (lam, psi, rate, wtest), tpos, times, f_track
    )
    d_halt = cuda.to_device(np.zeros(1, dtype=np.int64))
    grid, tpb = _launch1(lam.shape[0])
    _kernel("dopri5")[grid, tpb](
        d_lam, d_psi, d_rate, *d_state, float(q), float(t0), d_times, float(rtol), float(atol),
        float(settle_tol), int(max_steps), d_tpos, d_f, d_ft, d_halt,
    )  # fmt: skip
    halted = int(d_halt.copy_to_host()[0]) != 0
    if not halted:  # on a halt the outputs are incomplete (the CPU leaves them so too)
        _reduce(d_f, d_lam, d_rate, d_wt, test_part, train_part)
        d_ft.copy_to_host(f_track)
    _state_out(host_state, d_state)
    if halted:
        stop[1] = 1


__all__ = ["dopri5_kernel", "gd_kernel", "resident_state", "rk4_kernel", "state_to_host"]
