"""The lock-step lane machinery of the rk4 and gd integrators (:mod:`fastdyn.models.msfr.integrate`).

LANES tasks of a block run in lock-step with masks: each lane has its own step size and step
count, the lane bodies are branch-free (every row is stored through selects), and the step and
right-hand side are inlined at the numba IR level, so the lane loops have no calls and LLVM
vectorises them. Every _CHECK_EVERY iterations the group stops once no lane is active.

The per-lane work array W is flat, row r of lane l at W[r·LANES + l]: every access in the lane
loops is one base pointer plus a compile-time constant offset, so LLVM proves the rows disjoint
without runtime alias checks and vectorises the lane loop (with a 2-D array the row stride is a
runtime value and the loop stays scalar). Rows: 0–3 state y, 4–7 its derivative k, 8 f, then
parameters and per-lane bookkeeping. RK4 keeps the direction A of dy/dt = rate·(Λ − f)·A in rows
4–7 instead of k (:func:`fastdyn.models.msfr.steps.rk4_gain_step`) and its step's constants
(rate·h/2, rate·h/2 · Λ) in the last two rows.
"""

from __future__ import annotations

from numba import njit

from ..._jit import SERIAL, prefer_wide_vectors
from .ode import task_dir, task_dir_q1, task_rhs, task_rhs_q1
from .steps import euler_step, rk4_gain_step, rk4_gain_weights
from .task_rules import settles

_INLINE = dict(SERIAL, inline="always")

#: tasks per lock-step lane group (divides BLOCK): two chains of 16 (two 512-bit vectors each) in
#: the RK4 loop body; 16 lanes were 10–17 % slower per step with the factored RK4 (bench/RESULTS.md)
LANES: int = 32
#: the second chain's first lane in _lanes_iteration_gain
_HALF = LANES // 2
#: how many lock-step iterations between checks whether any lane is still active
_CHECK_EVERY = 16

# row indices of W (see the module docstring)
_Y0, _K0, _F = 0, 4, 8
# Λ, ψ, q, rate in consecutive rows (load_params)
_LAM, _PSI, _Q, _RATE, _HH, _N, _ALIVE, _RPREV, _THR, _NST, _HNOM, _WT = range(9, 21)
_G2, _G2L = 21, 22
_NW = 23
# offsets r·LANES of the rows used in the lane loops
_OY0, _OY1, _OY2, _OY3 = (r * LANES for r in range(_Y0, _Y0 + 4))
_OK0, _OK1, _OK2, _OK3 = (r * LANES for r in range(_K0, _K0 + 4))
_OF, _OLAM, _OPSI, _OQ, _ORATE = _F * LANES, _LAM * LANES, _PSI * LANES, _Q * LANES, _RATE * LANES
_OHH, _ON, _OALIVE, _ORPREV, _OTHR = (r * LANES for r in (_HH, _N, _ALIVE, _RPREV, _THR))
_ONST, _OHNOM, _OWT = _NST * LANES, _HNOM * LANES, _WT * LANES
_OG2, _OG2L = _G2 * LANES, _G2L * LANES


@njit(**_INLINE)
def load_params(W, nl, olam, g0, m, lam, psi, q, rate):
    """A lane group's start: W cleared, then the parameters (Λ, ψ, q, rate: the rows from
    ``olam`` on, ``nl`` lanes a row) of tasks g0 … g0+m−1 into lanes 0 … m−1; the other lanes
    keep ψ = 1 (a padding lane's arithmetic stays finite)."""
    W[:] = 0.0
    for l in range(nl):
        W[olam + nl + l] = 1.0
    for l in range(m):
        i = g0 + l
        W[olam + l] = lam[i]
        W[olam + nl + l] = psi[i]
        W[olam + 2 * nl + l] = q
        W[olam + 3 * nl + l] = rate[i]


@njit(**_INLINE)
def _lanes_rhs_with(W, rhs):
    """(rows 4–7, row f) = rhs(p, y) of every lane: k and f for gd, the direction A and f for
    rk4 (``rhs`` = task_dir)."""
    for l in range(LANES):
        p = (W[_OLAM + l], W[_OPSI + l], W[_OQ + l], W[_ORATE + l])
        k, f = rhs(p, (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l]))
        W[_OK0 + l] = k[0]
        W[_OK1 + l] = k[1]
        W[_OK2 + l] = k[2]
        W[_OK3 + l] = k[3]
        W[_OF + l] = f


@njit(**SERIAL)
def _lanes_rhs(W):
    """k = rhs(y) and f of every lane at the start of a gd call (no contraction, as its steps)."""
    prefer_wide_vectors()
    _lanes_rhs_with(W, task_rhs)


@njit(**SERIAL, fastmath={"contract"})
def _lanes_rhs_rk4(W, q):
    """The direction A(y) and f of every lane at the start of an rk4 call, with the arithmetic of
    its steps (:func:`_lanes_rk4` contracts into FMAs, so this does too, with the same
    direction): a call that starts from a saved state sees the bits a continuing step would
    make."""
    prefer_wide_vectors()
    if q == 1.0:
        _lanes_rhs_with(W, task_dir_q1)
    else:
        _lanes_rhs_with(W, task_dir)


@njit(**_INLINE)
def _lane_load(W, l):
    """(p, y, k, h) of lane l."""
    p = (W[_OLAM + l], W[_OPSI + l], W[_OQ + l], W[_ORATE + l])
    y = (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l])
    k = (W[_OK0 + l], W[_OK1 + l], W[_OK2 + l], W[_OK3 + l])
    return p, y, k, W[_OHH + l]


@njit(**_INLINE)
def _lane_commit(W, l, sf, y, k, yn, kn, fn):
    """Branch-free end of one lock-step iteration of lane l: the step (yn, kn, fn) from (y, k) is
    kept iff the lane is alive and has done fewer than W[_N] steps (sf = iteration index); then
    the settling rule and the step count. Every row is stored unconditionally through selects."""
    act = (W[_OALIVE + l] > 0.5) & (sf < W[_ON + l])
    W[_OY0 + l] = yn[0] if act else y[0]
    W[_OY1 + l] = yn[1] if act else y[1]
    W[_OY2 + l] = yn[2] if act else y[2]
    W[_OY3 + l] = yn[3] if act else y[3]
    W[_OK0 + l] = kn[0] if act else k[0]
    W[_OK1 + l] = kn[1] if act else k[1]
    W[_OK2 + l] = kn[2] if act else k[2]
    W[_OK3 + l] = kn[3] if act else k[3]
    W[_OF + l] = fn if act else W[_OF + l]
    r = abs(fn - W[_OLAM + l])
    rp = W[_ORPREV + l]
    settle = settles(act, r, W[_OTHR + l], rp)
    W[_ORPREV + l] = r if act else rp
    W[_OALIVE + l] = 0.0 if settle else W[_OALIVE + l]
    W[_ONST + l] = W[_ONST + l] + (1.0 if act else 0.0)


@njit(**_INLINE)
def _lane_load_gain(W, l):
    """(p, y, A, f, w) of lane l for :func:`fastdyn.models.msfr.steps.rk4_gain_step`."""
    p = (W[_OLAM + l], W[_OPSI + l], W[_OQ + l], W[_ORATE + l])
    y = (W[_OY0 + l], W[_OY1 + l], W[_OY2 + l], W[_OY3 + l])
    a = (W[_OK0 + l], W[_OK1 + l], W[_OK2 + l], W[_OK3 + l])
    return p, y, a, W[_OF + l], (W[_OG2 + l], W[_OG2L + l])


@njit(**_INLINE)
def _lanes_busy(W, sf):
    busy = False
    for l in range(LANES):
        if W[_OALIVE + l] > 0.5 and sf < W[_ON + l]:
            busy = True
    return busy


@njit(**_INLINE)
def _lanes_iteration(W, sf, step, rhs):
    """One lock-step iteration (index ``sf``) of the LANES lanes of W, one lane after another
    (the loop over the lanes vectorises)."""
    for l in range(LANES):
        p, y, k, h = _lane_load(W, l)
        yn, kn, fn, _ = step(rhs, p, y, k, h)
        _lane_commit(W, l, sf, y, k, yn, kn, fn)


@njit(**_INLINE)
def _lanes_iteration_gain(W, sf, step, dirf):
    """One lock-step RK4 iteration (index ``sf``) in the factored form (``step`` = rk4_gain_step,
    ``dirf`` the task's direction), the lanes taken as two independent chains in one loop body
    (lanes l and l + LANES/2): LLVM vectorises the body across l, so the stage chains of four
    512-bit vectors (two per chain; k1 → k2 → k3 → k4, each a handful of dependent operations)
    overlap. Each lane's arithmetic is that of one lane alone, so the outputs do not depend on
    LANES. With the textbook RK4 two chains of one vector were best; the factored step is shorter
    and latency-bound, and two chains of two vectors (LANES = 32) are 10–17 % faster on fixed
    steps and on a settling power-law table, at the same compile time (bench/RESULTS.md)."""
    for l in range(_HALF):
        pa, ya, aa, fa, wa = _lane_load_gain(W, l)
        pb, yb, ab, fb, wb = _lane_load_gain(W, l + _HALF)
        yna, ana, fna = step(dirf, pa, ya, aa, fa, wa)
        ynb, anb, fnb = step(dirf, pb, yb, ab, fb, wb)
        _lane_commit(W, l, sf, ya, aa, yna, ana, fna)
        _lane_commit(W, l + _HALF, sf, yb, ab, ynb, anb, fnb)


@njit(**_INLINE)
def _lanes_run(W, nmax, step, rhs, stop, iteration):
    """Up to ``nmax`` lock-step iterations ``step(rhs, …)`` of the LANES lanes of W (lane l: step
    size W[_HH, l], at most W[_N, l] steps, settling after each), each by ``iteration``.
    ``iteration``, ``step`` and ``rhs`` are inlined at the numba IR level: the lane loop has no
    calls and vectorises. Returns early once
    ``stop[0] != 0`` (polled every _CHECK_EVERY iterations)."""
    for s0 in range(0, nmax, _CHECK_EVERY):
        s1 = min(s0 + _CHECK_EVERY, nmax)
        for s in range(s0, s1):
            iteration(W, float(s), step, rhs)
        if not _lanes_busy(W, float(s1)) or stop[0] != 0:
            break


@njit(**SERIAL)
def _lanes_gd(W, nmax, q, stop):
    """gd lanes: Euler steps with h = η (one gradient-descent step each)."""
    prefer_wide_vectors()
    if q == 1.0:
        _lanes_run(W, nmax, euler_step, task_rhs_q1, stop, _lanes_iteration)
    else:
        _lanes_run(W, nmax, euler_step, task_rhs, stop, _lanes_iteration)


@njit(**SERIAL, fastmath={"contract"})
def _lanes_rk4(W, nmax, q, stop):
    """RK4 lanes in the factored form (rows 4–7 hold the direction A; the step's constants are
    set here from each lane's step size and rate); with q = 1 the specialised direction (the
    same one :func:`_lanes_rhs_rk4` picks at the start of a call)."""
    prefer_wide_vectors()
    for l in range(LANES):
        w = rk4_gain_weights(W[_ORATE + l], W[_OLAM + l], W[_OHH + l])
        W[_OG2 + l] = w[0]
        W[_OG2L + l] = w[1]
    if q == 1.0:
        _lanes_run(W, nmax, rk4_gain_step, task_dir_q1, stop, _lanes_iteration_gain)
    else:
        _lanes_run(W, nmax, rk4_gain_step, task_dir, stop, _lanes_iteration_gain)


@njit(**SERIAL)
def _lanes_advance(is_gd, W, nmax, q, stop):
    """Up to ``nmax`` lock-step iterations: lane l takes a step (gd: Euler with h = η; else RK4)
    of size W[_HH, l] while it is alive and has done fewer than W[_N, l] steps of this interval;
    settling is checked after each step. Branch-free lane bodies, so the lane loops vectorise.
    ``q`` is the query weight shared by every lane (padding lanes included: they are never
    alive)."""
    if is_gd:
        _lanes_gd(W, nmax, q, stop)
    else:
        _lanes_rk4(W, nmax, q, stop)
