"""The numba kernels of :mod:`fastdyn.models.msfr.integrate`: one chunk of tasks, state updated in place.

``@njit(parallel=True)`` kernels (:func:`lanes_kernel` behind :func:`rk4_kernel` and
:func:`gd_kernel`, and :func:`dopri5_kernel`)
run one parallel region per call with one worker per numba thread; the workers take work items
from an atomic counter (:func:`_take`) until none is left (dynamic scheduling):

1. the lane groups (rk4, gd: LANES tasks in lock-step, :func:`_lane_group`,
   :mod:`fastdyn.models.msfr.lanes`; dopri5: DP_LANES tasks, each with its own adaptive steps,
   :func:`~fastdyn.models.msfr.lanes_dopri5.dopri5_group`) of the chunk's first :func:`head_blocks` blocks, each storing its tasks' f at every output time in a
   buffer; the worker that finishes a block's last item adds the block's loss terms from the
   buffer in task order into its row of the partials (:func:`_finish_group`);
2. then every other block whole, by one worker, its loss terms added in task order as it goes.

Either way the additions into a block's row are those of a serial per-block kernel, in the same
order (:mod:`fastdyn.reduce`). On a power-law table the first block may hold most of the work; a
``prange`` over blocks gave it to one thread, while here its lane groups are shared out (tables
are ordered by frequency: the heavy items come first), and the later blocks are taken by
whichever thread is free, also when the machine is loaded and a thread is held up.

Which thread integrates a task changes nothing in its arithmetic, and the sums do not depend on
which thread did what, so the results are bit-identical for any thread count and schedule.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..._jit import PARALLEL, SERIAL
from ...core.task_status import STATUS_FROZEN, STATUS_RUNNING
from ...reduce import BLOCK
from .lanes import (
    _NW,
    _OALIVE,
    _OF,
    _OHH,
    _OHNOM,
    _OLAM,
    _ON,
    _ONST,
    _ORATE,
    _ORPREV,
    _OTHR,
    _OWT,
    _OY0,
    _OY1,
    _OY2,
    _OY3,
    LANES,
    _lanes_advance,
    _lanes_rhs,
    _lanes_rhs_rk4,
    load_params,
)
from .lanes_dopri5 import DP_LANES, DP_NW, dopri5_group
from .ode import task_loss
from .task_rules import ceil, fixed_start, interval_status, interval_steps, settle_threshold

# ----------------------------------------------------------------------------------------------
# serial kernels: one lane group
# ----------------------------------------------------------------------------------------------

#: the GPU's dopri5 (one thread per task) polls the stop flag every this many steps of a task
STOP_POLL = 1024

_INLINE = dict(SERIAL, inline="always")


@njit(**_INLINE)
def _interval_steps(W, limit, dt, fmax, is_gd, eta):
    """Steps of every lane over an output interval of length dt (rows _N, _HH; ``limit[l]``:
    lane l stops at the step budget): rk4 ceil(dt/h_nom) steps of dt/n, gd dt steps of η, at
    most fmax − steps so far; lanes not alive (or dt ≤ 0) take none and keep their step size.
    Branch-free over the lanes (selects), so the loop and its divisions vectorise; every alive
    lane's values are the same operations as one lane at a time."""
    for l in range(LANES):
        live = (W[_OALIVE + l] > 0.5) & (dt > 0.0)
        nf, hh, over = interval_steps(dt, W[_OHNOM + l], W[_ONST + l], fmax, is_gd, eta, ceil)
        limit[l] = live & over
        W[_ON + l] = nf if live else 0.0
        W[_OHH + l] = hh if live else W[_OHH + l]


@njit(**SERIAL)
def _lane_group(
    is_gd,
    g0,
    m,
    lo,
    lam,
    psi,
    rate,
    wtest,
    vx,
    vy,
    wx,
    wy,
    hnom,
    rprev,
    status,
    steps,
    q,
    mark0,
    marks,
    spt,
    eta,
    settle_tol,
    max_steps,
    tpos,
    fbuf,
    f_track,
    stop,
    W,
    limit,
    direct,
    b,
    test_part,
    train_part,
):
    """Tasks g0 … g0+m−1 (m ≤ LANES) of rk4 (marks = output times, mark0 = start time) or gd
    (marks = output step indices as floats, mark0 = start step) in lock-step; f of task i at
    output j goes to ``fbuf[i − lo, j]``. Returns early, leaving the outputs incomplete, once
    ``stop[0] != 0`` (see :mod:`fastdyn.core.stop_flag`). ``W`` (_NW·LANES floats) and ``limit``
    (LANES bools) are the caller's scratch arrays. With ``direct`` the loss terms are added into
    row b of the partials instead (task order when the caller runs a block's groups in order)."""
    nt = marks.shape[0]
    fmax = float(max_steps)
    load_params(W, LANES, _OLAM, g0, m, lam, psi, q, rate)
    for l in range(m):
        i = g0 + l
        W[_OWT + l] = wtest[i]
        W[_ORPREV + l] = rprev[i]
        W[_OTHR + l] = settle_threshold(settle_tol, 0.0, lam[i])
        W[_ONST + l] = float(steps[i])
        W[_OY0 + l] = vx[i]
        W[_OY1 + l] = vy[i]
        W[_OY2 + l] = wx[i]
        W[_OY3 + l] = wy[i]
        p = (lam[i], psi[i], q, rate[i])
        y = (vx[i], vy[i], wx[i], wy[i])
        alive, frozen, W[_OHNOM + l] = fixed_start(
            status[i] == STATUS_RUNNING, p, y, hnom[i], is_gd, spt, eta
        )
        W[_OALIVE + l] = 1.0 if alive else 0.0
        if frozen:
            status[i] = STATUS_FROZEN
    if is_gd:
        _lanes_rhs(W)
    else:
        _lanes_rhs_rk4(W, q)
    prev = mark0
    for j in range(nt):
        if stop[0] != 0:
            return
        mj = marks[j]
        dt = mj - prev
        prev = mj
        if is_gd:
            _interval_steps(W, limit, dt, fmax, True, eta)
        else:
            _interval_steps(W, limit, dt, fmax, False, eta)
        nmax = 0.0
        for l in range(LANES):
            nmax = max(nmax, W[_ON + l])
        if nmax > 0.0:
            _lanes_advance(is_gd, W, int(nmax), q, stop)
        for l in range(m):
            i = g0 + l
            f = W[_OF + l]
            y = (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l])
            alive, status[i] = interval_status(W[_OALIVE + l] > 0.5, status[i], f, y, limit[l])
            W[_OALIVE + l] = 1.0 if alive else 0.0
            if direct:
                te, tr = task_loss(f - W[_OLAM + l], W[_ORATE + l], W[_OWT + l])
                test_part[b, j] += te
                train_part[b, j] += tr
            else:
                fbuf[i - lo, j] = f
            k = tpos[i]
            if k >= 0:
                f_track[k, j] = f
    for l in range(m):
        i = g0 + l
        vx[i] = W[_OY0 + l]
        vy[i] = W[_OY1 + l]
        wx[i] = W[_OY2 + l]
        wy[i] = W[_OY3 + l]
        steps[i] = np.int64(W[_ONST + l])
        rprev[i] = W[_ORPREV + l]
        hnom[i] = W[_OHNOM + l]


# ----------------------------------------------------------------------------------------------
# parallel kernels: the first blocks split into work items, the others whole, taken dynamically
# ----------------------------------------------------------------------------------------------


@intrinsic
def _take(typingctx, counter, idx):
    """``counter[idx] += 1`` as one atomic operation; returns the value before (an int64 counter
    shared by the threads of a ``prange``: each call hands out the next work item, or counts one
    more finished item)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None
    sig = types.int64(counter, types.intp)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        one = context.get_constant(types.int64, 1)
        # acq_rel: a worker that sees a block's last group done also sees the f the other
        # workers stored for it (the block is reduced by whoever finishes it, _finish_group)
        return builder.atomic_rmw("add", ptr, one, "acq_rel")

    return sig, codegen


#: task × time values of f buffered for the split first blocks: FBUF_VALUES (1 MiB) worth of
#: whole blocks, at least one block unless that would take more than FBUF_MAX (64 MiB)
FBUF_VALUES = 1 << 17
FBUF_MAX = 1 << 23
#: float64 padding (two 64-byte cache lines) on each side of a worker's scratch arrays
_PAD = 16
# the "whole block" flag and row of the per-task kernels as typed values, not literals: each
# literal would compile its own signature (the accumulators are C-contiguous for the same reason)
_SPLIT = np.bool_(False)
_WHOLE = np.bool_(True)
_ROW0 = np.int64(0)


@njit(**SERIAL)
def head_blocks(n, nt):
    """How many of the chunk's first blocks are split into lane groups / tasks (their f
    buffered): FBUF_VALUES // (BLOCK · nt), at least 1 while BLOCK · nt ≤ FBUF_MAX, at most all
    blocks."""
    nt = max(nt, 1)
    sb = FBUF_VALUES // (BLOCK * nt)
    if sb < 1 and BLOCK * nt <= FBUF_MAX:
        sb = 1
    return min((n + BLOCK - 1) // BLOCK, sb)


@njit(**_INLINE)
def _work_plan(n, nt, lanes):
    """(nb, sb, nh, fbuf, taken, done) of a parallel kernel over n tasks and nt output times: nb
    blocks, the first sb (:func:`head_blocks`) split into nh work items of ``lanes`` tasks whose
    f go to ``fbuf``; the atomic counters of items handed out and of finished items per split
    block."""
    nb = (n + BLOCK - 1) // BLOCK
    sb = head_blocks(n, nt)
    hn = min(sb * BLOCK, n)
    nh = (hn + lanes - 1) // lanes
    fbuf = np.empty((hn, nt))
    return nb, sb, nh, fbuf, np.zeros(1, dtype=np.int64), np.zeros(max(sb, 1), dtype=np.int64)


@njit(**_INLINE)
def _scratch(size):
    """A worker's float64 scratch array, padded so that no cache line is shared with another
    worker's."""
    return np.empty(size + 2 * _PAD)[_PAD : _PAD + size]


@njit(**SERIAL)
def _block_losses(b, a, e, lo, lam, rate, wtest, fbuf, test_part, train_part):
    """Row b of the partials += the loss terms of tasks a … e−1 (f in ``fbuf[i − lo]``), added in
    task order, output time by output time."""
    nt = fbuf.shape[1]
    for i in range(a, e):
        for j in range(nt):
            te, tr = task_loss(fbuf[i - lo, j] - lam[i], rate[i], wtest[i])
            test_part[b, j] += te
            train_part[b, j] += tr


@njit(**_INLINE)
def _next_item(taken, nb, sb, nh, lanes):
    """The next work item of :func:`_work_plan`'s plan, from the atomic counter: (−1, 0) when
    none is left, (0, g0) the lane group of a split block that starts at task g0, (1, b) the
    whole block b."""
    x = _take(taken, 0)
    if x >= nh + nb - sb:
        return -1, 0
    if x < nh:
        return 0, x * lanes
    return 1, sb + x - nh


@njit(**SERIAL)
def _finish_group(done, g0, lanes, n, lam, rate, wtest, fbuf, acc, test_part, train_part):
    """Count the lane group at g0 (``lanes`` tasks) as one more finished work item of its split
    block; the worker that finishes the block's last one adds the block's loss terms (the f of
    all its tasks are stored)."""
    b = g0 // BLOCK
    items = (min(b * BLOCK + BLOCK, n) - b * BLOCK + lanes - 1) // lanes
    if _take(done, b) == items - 1:
        a = b * BLOCK
        _row_in(acc, b, test_part, train_part)
        _block_losses(0, a, min(a + BLOCK, n), 0, lam, rate, wtest, fbuf, acc[0:1], acc[1:2])
        _row_out(acc, b, test_part, train_part)


@njit(**SERIAL)
def _row_in(acc, b, test_part, train_part):
    """Row b of the partials into the worker's accumulator (the block is summed there: rows of
    neighbouring blocks share cache lines, and another worker may be adding into those)."""
    for j in range(acc.shape[1]):
        acc[0, j] = test_part[b, j]
        acc[1, j] = train_part[b, j]


@njit(**SERIAL)
def _row_out(acc, b, test_part, train_part):
    """The worker's accumulator back into row b of the partials."""
    for j in range(acc.shape[1]):
        test_part[b, j] = acc[0, j]
        train_part[b, j] = acc[1, j]


# The parallel kernels: one parallel region per call (a ``prange`` over ``bins`` workers, the
# number of numba threads, given by the caller because ``numba.get_num_threads`` inside a kernel
# makes it uncacheable; on a loaded machine every region's barrier waits for the slowest thread to
# be scheduled again). Work items from the atomic counter, in order: the lane groups / tasks of
# the first ``head_blocks`` blocks (f buffered; whoever finishes a block's last item reduces it,
# :func:`_finish_group`), then the other blocks whole, each by one worker with its loss terms
# added directly in task order. Everything runs inline (a parallel kernel that calls another
# parallel function cannot be cached).


@njit(**PARALLEL)
def lanes_kernel(
    is_gd, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, mark0, marks,
    spt, eta, settle_tol, max_steps, tpos, test_part, train_part, f_track, stop, bins,
):  # fmt: skip
    """rk4 (``is_gd`` false: marks = output times, mark0 = start time, ``spt`` steps per
    timescale) or gd (marks = output step indices as floats, mark0 = start step, step η = ``eta``)
    of one chunk in lock-step lane groups; state arrays updated in place."""
    n = lam.shape[0]
    nt = marks.shape[0]
    nb, sb, nh, fbuf, taken, done = _work_plan(n, nt, LANES)
    for _k in prange(bins):
        W = _scratch(_NW * LANES)
        acc = _scratch(2 * nt).reshape((2, nt))
        limit = np.empty(LANES + 16 * _PAD, dtype=np.bool_)[8 * _PAD : 8 * _PAD + LANES]
        while stop[0] == 0:
            kind, x = _next_item(taken, nb, sb, nh, LANES)
            if kind < 0:
                break
            if kind == 0:
                _lane_group(
                    is_gd, x, min(LANES, n - x), 0, lam, psi, rate, wtest, vx, vy, wx, wy,
                    hnom, rprev, status, steps, q, mark0, marks, spt, eta, settle_tol,
                    max_steps, tpos, fbuf, f_track, stop, W, limit, _SPLIT, x // BLOCK,
                    test_part, train_part,
                )  # fmt: skip
                _finish_group(done, x, LANES, n, lam, rate, wtest, fbuf, acc, test_part, train_part)
            else:
                b = x
                _row_in(acc, b, test_part, train_part)
                for g0 in range(b * BLOCK, min(b * BLOCK + BLOCK, n), LANES):
                    _lane_group(
                        is_gd, g0, min(LANES, n - g0), 0, lam, psi, rate, wtest, vx, vy, wx,
                        wy, hnom, rprev, status, steps, q, mark0, marks, spt, eta,
                        settle_tol, max_steps, tpos, fbuf, f_track, stop, W, limit, _WHOLE, _ROW0,
                        acc[0:1], acc[1:2],
                    )  # fmt: skip
                _row_out(acc, b, test_part, train_part)


def rk4_kernel(
    lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, t0, times, spt,
    settle_tol, max_steps, tpos, test_part, train_part, f_track, stop, bins,
) -> None:  # fmt: skip
    """Per-task fixed-step RK4 of one chunk (:func:`lanes_kernel`); state updated in place."""
    lanes_kernel(
        False, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, t0, times,
        spt, 0.0, settle_tol, max_steps, tpos, test_part, train_part, f_track, stop, bins,
    )  # fmt: skip


def gd_kernel(
    lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, k0, kout, eta,
    settle_tol, max_steps, tpos, test_part, train_part, f_track, stop, bins,
) -> None:  # fmt: skip
    """Discrete gradient descent (shared η) of one chunk (:func:`lanes_kernel`); kout = output
    step indices (float64, exact integers), k0 the step the state is at; state updated in place."""
    lanes_kernel(
        True, lam, psi, rate, wtest, vx, vy, wx, wy, hnom, rprev, status, steps, q, k0, kout,
        0.0, eta, settle_tol, max_steps, tpos, test_part, train_part, f_track, stop, bins,
    )  # fmt: skip


@njit(**PARALLEL)
def dopri5_kernel(
    lam, psi, rate, wtest, vx, vy, wx, wy, hstate, rprev, status, steps, rejected, q, t0,
    times, rtol, atol, settle_tol, max_steps, tpos, test_part, train_part, f_track, stop, bins,
):  # fmt: skip
    """Per-task adaptive Dormand–Prince 5(4) of one chunk; state arrays updated in place."""
    n = lam.shape[0]
    nt = times.shape[0]
    nb, sb, nh, fbuf, taken, done = _work_plan(n, nt, DP_LANES)
    for _k in prange(bins):
        W = _scratch(DP_NW * DP_LANES)
        J = np.empty(DP_LANES + 2 * _PAD, dtype=np.int64)[_PAD : _PAD + DP_LANES]
        gbuf = _scratch(DP_LANES * nt).reshape((DP_LANES, nt))
        acc = _scratch(2 * nt).reshape((2, nt))
        while stop[0] == 0 and stop[1] == 0:
            kind, x = _next_item(taken, nb, sb, nh, DP_LANES)
            if kind < 0:
                break
            if kind == 0:
                dopri5_group(
                    x, min(DP_LANES, n - x), _ROW0, lam, psi, rate, wtest, vx, vy, wx, wy, hstate,
                    rprev, status, steps, rejected, q, t0, times, rtol, atol, settle_tol,
                    max_steps, tpos, fbuf, f_track, stop, W, J, _SPLIT, x // BLOCK, test_part,
                    train_part,
                )  # fmt: skip
                _finish_group(done, x, DP_LANES, n, lam, rate, wtest, fbuf, acc, test_part, train_part)  # fmt: skip
            else:
                b = x
                _row_in(acc, b, test_part, train_part)
                for g0 in range(b * BLOCK, min(b * BLOCK + BLOCK, n), DP_LANES):
                    dopri5_group(
                        g0, min(DP_LANES, n - g0), g0, lam, psi, rate, wtest, vx, vy, wx, wy,
                        hstate, rprev, status, steps, rejected, q, t0, times, rtol, atol,
                        settle_tol, max_steps, tpos, gbuf, f_track, stop, W, J, _WHOLE, _ROW0,
                        acc[0:1], acc[1:2],
                    )  # fmt: skip
                _row_out(acc, b, test_part, train_part)
