"""MSFR theory kernels: closed forms, the exact finite-ψ reduction, emergence times, fused losses.

Per task s (spec msfr.md section 2; one entry per task in flat float64 arrays): strength
``lam`` = Λ_s, context length ``psi`` = ψ_s, train weight ``rate`` = #_s/N (0: never trained,
f stays f(0)), test weight ``wtest`` = P(s), and the initial state ``v0x, v0y, w0x, w0y`` in the
task's [x, y] block. u = (1, Λ), e = (1, 0), H = ψ uuᵀ + eeᵀ, f = vᵀHw, gradient flow
dv/dt = −rate (f − Λ) H w, dw/dt = −rate (f − Λ) H v; t is gradient-flow time (η·step).

Levels (``level``):

- ``"leading"`` — the paper's f⁰: the ε = 0 model H⁰ = κ ûûᵀ (κ = ψ(1 + Λ²), a = rate·κ), solved
  exactly for any initialisation by the Riccati closed form of spec section 4, evaluated in log
  space (no overflow for t ∈ [0, 1e12], a ∈ [1e-12, 1e6], init scale down to 1e-30). Balanced
  init (v0 = w0, σ = 0) is the logistic f = Λ/(1 + (Λ/f(0) − 1) e^{−2aΛt}), the fast path.
  Error vs the full model: O(ε), ε = 1/ψ (plus O(σ0²) from the − mode for unbalanced init).
- ``"first_order"`` — f⁰ + ε f¹ in resummed form: the same Riccati form with the rate and start
  shifted by δ = ε/(1 + Λ²)² (a → a(1 + δ), first-order eigenvector, and the small − mode frozen
  at its initial value, see :func:`._closed_form.closed_form_setup`). Error O(ε²) (+ O(ε σ0²
  log 1/σ0) for unbalanced init). The spec's explicit linearisation is
  :func:`first_order_balanced`.
- ``"exact"`` — the exact finite-ψ reduction: one scalar ODE dτ/dt = rate·ψ·(F(τ) − Λ) per task,
  integrated by an adaptive Dormand–Prince 5(4) landing on every output time (rtol 1e-12 on τ;
  matches the 4-dim v/w ODE to ~1e-10 relative to Λ).

Losses: L_test = Σ_s wtest_s (f_s − Λ_s)²/2 and L_train = Σ_s rate_s (f_s − Λ_s)²/2 (the
constant loss of tasks beyond the model size D is added by the driver, not here).

Determinism: :func:`loss_partials` writes one row of partial sums per block of ``BLOCK`` tasks,
each summed in an order fixed by the block alone (task order, or per tile position and then a
fixed tree for the series lanes), so the result is bit-identical for any thread count; the
driver adds the rows in order with :func:`fastdyn.reduce.accumulate_blocks`. The series lanes
are contracted into FMAs, so their bits depend on whether the host has FMA (as the integrators'
lanes do), not on the thread count.
"""

from __future__ import annotations

import math

import numpy as np
from numba import literal_unroll, njit, prange

from ..._jit import PARALLEL, SERIAL, prefer_wide_vectors
from ...reduce import BLOCK, accumulate_blocks, n_blocks
from ._args import (  # noqa: F401
    LEVELS,
    _level_code,
    _tasks,
    _times,
    block_is_valid,
    check_counts,
    partials_args,
)
from ._closed_form import (
    EXACT,
    closed_form_setup,
    exact_curve,
    exp_nonpos,
    log_pos,
    log_upper,
    riccati_eval,
    riccati_half_rise,
    riccati_setup,
)

__all__ = [
    "LEVELS",
    "EXACT_RTOL",
    "f_curves",
    "loss_partials",
    "loss_curves",
    "emergence_times",
    "first_order_balanced",
]

#: theory levels by config name → kernel code

#: default relative tolerance of the exact reduction's τ integration
EXACT_RTOL: float = 1e-12

# ---------------------------------------------------------------------------------------------
# serial per-task kernels
# ---------------------------------------------------------------------------------------------


@njit(**SERIAL)
def _task_curve(level, times, lam, psi, rate, v0x, v0y, w0x, w0y, rtol, out):
    """f(t_k) of one task at ``level`` into ``out``."""
    if level == EXACT:
        exact_curve(times, lam, psi, rate, v0x, v0y, w0x, w0y, rtol, out)
        return
    lam_e, kap, cm, g, h = closed_form_setup(level, lam, psi, v0x, v0y, w0x, w0y)
    pp, pm, rr, sig, logk, sk, mir = riccati_setup(lam_e, kap, g, h)
    c = rate * kap * rr
    for k in range(times.shape[0]):
        f, r = riccati_eval(logk - c * times[k], lam_e, kap, pp, pm, rr, sig, sk, mir)
        out[k] = f + cm


def _series_matrix(deg):
    """C[j, m] = (−1)^m (m+1)! S(j, m) / j!: the Taylor coefficients in x of
    (1 + p(e^x − 1))^−2 = Σ_j x^j Σ_m C[j, m] p^m (S: Stirling numbers of the second kind)."""
    from fractions import Fraction
    from math import factorial

    st = [[0] * (deg + 1) for _ in range(deg + 1)]
    st[0][0] = 1
    for j in range(1, deg + 1):
        for m in range(1, j + 1):
            st[j][m] = m * st[j - 1][m] + st[j - 1][m - 1]
    c = np.zeros((deg + 1, deg + 1))
    for j in range(deg + 1):
        for m in range(j + 1):
            c[j, m] = float(Fraction((-1) ** m * factorial(m + 1) * st[j][m], factorial(j)))
    return c


#: degree of the pre-emergence polynomial of the logistic fast path
_DEG = 18
#: it is used for x = c·t ≤ R/16, R = sqrt(u0² + π²) its radius of convergence
_X_FRAC = 1.0 / 16.0
_SERIES_C = _series_matrix(_DEG)
#: 1/i (i = 0 … _DEG + 2; entry 0 unused), for :func:`_series_degree`
_INV = np.array([0.0] + [1.0 / i for i in range(1, _DEG + 3)])
#: tasks per tile of the vectorised series coefficients (the tile stays in L1)
_TILE = 64
#: after learning, contributions (weight × r²) below this absolute value are dropped
_DROP_BELOW = 1e-300
_LOG_DROP = math.log(_DROP_BELOW)
_TINY = 2.2250738585072014e-308  # smallest normal double: log_pos needs normal arguments
#: exponents per batch of the exp ranges (256 KiB; at least one task's, i.e. T)
EXP_BATCH = 1 << 15


@njit(**SERIAL)
def _walk_right(times, x, k):
    """searchsorted(times, x, side="right") by walking from the guess k (consecutive tasks of a
    power law move their boundaries by a grid point or so: O(1) there, O(T) at worst)."""
    nt = times.shape[0]
    while k < nt and times[k] <= x:
        k += 1
    while k > 0 and times[k - 1] > x:
        k -= 1
    return k


@njit(**SERIAL, inline="always")
def _exp_range(tasks, q, k1s, khs, k2s):
    """(j, k1, kh, k2): the task tasks[q] of an exp batch and its range of output times
    [k1, k2), the half-rise at kh (see :func:`_exp_terms`)."""
    j = tasks[q]
    return j, k1s[j], khs[j], k2s[j]


@njit(**SERIAL)
def _exp_terms(times, tasks, qa, qb, k1s, khs, k2s, f_c, f_u0, f_lam, f_wt, f_rt, ex, acc_t, acc_r):
    """The exp ranges of fast tasks tasks[qa] … tasks[qb − 1] (see _block_loss; in task order,
    each with a non-empty range): every exponent of the batch into
    ``ex`` first, then their exps in one long loop (which vectorises; per task the ranges are a
    few output times long), then the terms task by task, so each acc[k] gets its additions in
    task order. With u = u0 − c t: before the half-rise (u ≥ 0) r = −Λ/(1 + e^−u), after it
    r = −Λ e^u/(1 + e^u)."""
    prefer_wide_vectors()
    e = 0
    for q in range(qa, qb):
        j, k1, kh, k2 = _exp_range(tasks, q, k1s, khs, k2s)
        c = f_c[j]
        u0 = f_u0[j]
        o = e - k1
        for k in range(k1, kh):
            ex[o + k] = c * times[k] - u0
        for k in range(kh, k2):
            ex[o + k] = -c * times[k] + u0
        e += k2 - k1
    for i in range(e):
        ex[i] = exp_nonpos(ex[i])
    e = 0
    for q in range(qa, qb):
        j, k1, kh, k2 = _exp_range(tasks, q, k1s, khs, k2s)
        lm = f_lam[j]
        wt = f_wt[j]
        rt = f_rt[j]
        o = e - k1
        for k in range(k1, kh):
            d = lm / (1.0 + ex[o + k])
            d2 = d * d
            acc_t[k] += wt * d2
            acc_r[k] += rt * d2
        for k in range(kh, k2):
            m = ex[o + k]
            d = lm * m / (1.0 + m)
            d2 = d * d
            acc_t[k] += wt * d2
            acc_r[k] += rt * d2
        e += k2 - k1


@njit(**SERIAL)
def _general_task_loss(
    level, times, lam, psi, rate, wt, v0x, v0y, w0x, w0y, rtol, acc_t, acc_r, scr
):
    """acc_t[k] += wt·r_k², acc_r[k] += rate·r_k² for one task (r = f − Λ; halved by the caller),
    without the logistic fast path."""
    nt = times.shape[0]
    if level == EXACT:
        exact_curve(times, lam, psi, rate, v0x, v0y, w0x, w0y, rtol, scr)
        for k in range(nt):
            d = scr[k] - lam
            d2 = d * d
            acc_t[k] += wt * d2
            acc_r[k] += rate * d2
        return
    lam_e, kap, cm, g, h = closed_form_setup(level, lam, psi, v0x, v0y, w0x, w0y)
    pp, pm, rr, sig, logk, sk, mir = riccati_setup(lam_e, kap, g, h)
    c = rate * kap * rr
    for k in range(nt):
        f, r = riccati_eval(logk - c * times[k], lam_e, kap, pp, pm, rr, sig, sk, mir)
        d2 = r * r
        acc_t[k] += wt * d2
        acc_r[k] += rate * d2


#: rows of :func:`_fast_setup`'s table (row r at r·BLOCK: constant offsets, so LLVM proves the
#: rows disjoint and vectorises the loop that fills them)
_NROW = 11
_R_OK, _R_LAM, _R_C, _R_WT, _R_RT, _R_U0, _R_SM, _R_L2, _R_T1, _R_TH, _R_T2 = (
    r * BLOCK for r in range(_NROW)
)


@njit(**SERIAL)
def _fast_setup(level, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, lo, hi, tb):
    """The balanced-logistic set-up of tasks lo … hi−1 (level LEADING or FIRST_ORDER; see
    :func:`_block_loss`) into the rows of ``tb``, branch free, in one loop across the tasks that
    vectorises; returns how many are fast. Row OK is 1 for a balanced logistic (σ = 0, Λ > 0,
    0 < P0 < P+ with P0 and q = (P+ − P0)/P0 normal and finite), else 0 and that task's other
    rows are meaningless. Rows: Λ, c = rate·κ·R, wtest, rate, u0 = ln q, p = s0 m0, Λ² s0², and
    the thresholds X/c (series), u0/c (half-rise), (u0 − u_lo)/c (drop) in t (∞ when c = 0).
    With R = 2Λ and P+ = 4Λ/κ, q = (4Λ − κP0)/(κP0) = e^{u0} = 1/m0, p = 1/(1 + q) and s0 = q p:
    two divisions and one logarithm for u0, m0 and s0, and one reciprocal of c for the three
    thresholds (c below the smallest normal double taken as that double, so that 1/c is finite
    and 0 · 1/c is 0, not NaN)."""
    nf = 0
    # the block's slices, indexed from 0 (see _args._count_bad: no wraparound, no gathers)
    lam_b = lam[lo:hi]
    psi_b = psi[lo:hi]
    rate_b = rate[lo:hi]
    wt_b = wtest[lo:hi]
    vx_b = v0x[lo:hi]
    vy_b = v0y[lo:hi]
    wx_b = w0x[lo:hi]
    wy_b = w0y[lo:hi]
    for j in range(hi - lo):
        lam_e, kap, cm, g, h = closed_form_setup(
            level, lam_b[j], psi_b[j], vx_b[j], vy_b[j], wx_b[j], wy_b[j]
        )
        sp = g + h
        sig = (sp * (g - h)) ** 2
        # riccati_setup with σ = 0, Λ > 0: R = 2Λ, P+ = 4Λ/κ, P− = 0, P0 = (g + h)²; then
        # q = (P+ − P0)/P0 = e^{u0} = 1/m0, p = s0 m0 = 1/(1 + q), s0 = q p (two divisions)
        p0 = sp * sp
        kp0 = kap * p0
        q = (4.0 * lam_e - kp0) / kp0
        ok = (sig == 0.0) & (sp != 0.0) & (lam_e > 0.0)
        ok = ok & (p0 >= _TINY) & (q >= _TINY) & (q < np.inf)
        c = rate_b[j] * kap * (2.0 * lam_e)
        wt = wt_b[j]
        rt = rate_b[j]
        u0 = log_pos(q)
        pq = 1.0 / (1.0 + q)
        s0 = q * pq
        wmax = max(max(wt, rt) * (lam_e * lam_e), _DROP_BELOW)
        ulo = min(0.5 * (_LOG_DROP - log_upper(wmax)), 0.0)
        x1 = _X_FRAC * math.sqrt(u0 * u0 + math.pi * math.pi)
        x1 = x1 if u0 >= 0.0 else 0.0
        ic = 1.0 / max(c, _TINY)
        tb[_R_OK + j] = 1.0 if ok else 0.0
        tb[_R_LAM + j] = lam_e
        tb[_R_C + j] = c
        tb[_R_WT + j] = wt
        tb[_R_RT + j] = rt
        tb[_R_U0 + j] = u0
        tb[_R_SM + j] = pq
        tb[_R_L2 + j] = lam_e * lam_e * (s0 * s0)
        tb[_R_T1 + j] = x1 * ic if c > 0.0 else np.inf
        tb[_R_TH + j] = u0 * ic if c > 0.0 else np.inf
        tb[_R_T2 + j] = (u0 - ulo) * ic if c > 0.0 else np.inf
        nf += 1 if ok else 0
    return nf


#: rows of the series lanes (:func:`_series_lanes`): the sums of tile position l of the tasks
#: seen so far in one bucket, row 2j for the test weights and 2j + 1 for the train weights of
#: power x^j, then the tile's inputs p, ξ, a_test, a_train and the powers ξ^0 = 1, ξ^6, ξ^12,
#: ξ^19 that carry from one group of powers to the next; all at constant offsets in one array,
#: so LLVM proves the rows disjoint and vectorises without run-time checks
_LANE_ROWS = 2 * (_DEG + 1)
_S_P, _S_X, _S_AT, _S_AR, _S_X0, _S_X6, _S_X12, _S_X19 = (
    (_LANE_ROWS + r) * _TILE for r in range(8)
)
_S_SIZE = (_LANE_ROWS + 8) * _TILE
#: the lanes take a tile whose terms p^m stop at this m (Horner in p of degree 5 per power)
_LANE_M = 5


def _series_power_group(powers, x_in, x_out):
    """The kernel of one group of powers j ∈ ``powers`` for :func:`_series_lanes`: for each
    task of the tile, W_j = ξ^j Σ_{m ≤ 5} C[j, m] p^m times a_test and a_train added to rows 2j
    and 2j + 1, starting from ξ^{j0} in row ``x_in`` and leaving the next power in ``x_out``.
    Each power is unrolled (``literal_unroll``: its coefficients and rows are constants) and
    contracted into FMAs, so the loop across the tile vectorises."""

    @njit(**SERIAL, fastmath={"contract"})
    def group(sv, nw):
        prefer_wide_vectors()
        for j in range(nw):
            p = sv[_S_P + j]
            x = sv[_S_X + j]
            a_t = sv[_S_AT + j]
            a_r = sv[_S_AR + j]
            xp = sv[x_in + j]
            for jd in literal_unroll(powers):
                c = _SERIES_C[jd]
                g = c[0] + p * (c[1] + p * (c[2] + p * (c[3] + p * (c[4] + p * c[5]))))
                v = g * xp
                xp *= x
                sv[2 * jd * _TILE + j] += a_t * v
                sv[(2 * jd + 1) * _TILE + j] += a_r * v
            sv[x_out + j] = xp

    return group


_lanes_0_5 = _series_power_group((0, 1, 2, 3, 4, 5), _S_X0, _S_X6)
_lanes_6_11 = _series_power_group((6, 7, 8, 9, 10, 11), _S_X6, _S_X12)
_lanes_12_18 = _series_power_group((12, 13, 14, 15, 16, 17, 18), _S_X12, _S_X19)


@njit(**SERIAL, inline="always")  # per tile: the call's overhead was ~1 ns per task
def _series_lanes(sv, nw, nrow, t_sm, t_xi, t_wt, t_rt, t_l2):
    """Adds W_j(p, ξ)·a of the tile's nw tasks (rows p, ξ, wtest, rate, Λ² s0²) to lane l of rows j <
    ``nrow`` (6, 12 or 19) of ``sv`` (see _LANE_ROWS), W_j = ξ^j Σ_{m ≤ 5} C[j, m] p^m. Every
    term p^m with m ≤ 5 is kept (the tile needs m ≤ _LANE_M) and every power up to ``nrow`` − 1
    (the tile needs j ≤ J < nrow), so the sums are at least as accurate as the general path's."""
    for j in range(nw):
        sv[_S_P + j] = t_sm[j]
        sv[_S_X + j] = t_xi[j]
        sv[_S_AT + j] = t_wt[j] * t_l2[j]
        sv[_S_AR + j] = t_rt[j] * t_l2[j]
        sv[_S_X0 + j] = 1.0
    _lanes_0_5(sv, nw)
    if nrow > 6:
        _lanes_6_11(sv, nw)
    if nrow > 12:
        _lanes_12_18(sv, nw)


@njit(**SERIAL)
def _flush_lanes(sv, nrow, mb):
    """mb[0, j] += Σ_l sv[row 2j, l], mb[1, j] += Σ_l sv[row 2j + 1, l] (j < nrow), each sum a
    fixed pairwise tree over the 64 lanes; the rows are zeroed for the next bucket."""
    for jd in range(nrow):
        for k in range(2):
            o = (2 * jd + k) * _TILE
            h = _TILE // 2
            while h >= 1:
                for l in range(h):
                    sv[o + l] += sv[o + h + l]
                h //= 2
            mb[k, jd] += sv[o]
            for l in range(_TILE):
                sv[o + l] = 0.0


@njit(**SERIAL)
def _block_loss(
    level, times, qpow, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, rtol, lo, hi, acc_t, acc_r
):
    """acc += Σ_{lo ≤ i < hi} (wtest_i, rate_i)·r_i(t_k)² for one block (halved by the caller).

    Tasks that are not balanced logistics (and every task at level EXACT) go through
    :func:`_general_task_loss`. The balanced logistic r = −Λ/(1 + m0 e^x), x = c t,
    m0 = e^{−u0} = f(0)/(Λ − f(0)) (level LEADING or FIRST_ORDER, σ = 0, 0 < f(0) < Λ) is done
    in passes over the block, the per-task set-up vectorised across tasks (with
    :func:`log_pos`), and each task's time grid split into three index ranges:

    - x ≤ X = R/16, R = sqrt(u0² + π²) (k < k1; before emergence for these grids): with
      s0 = 1/(1 + m0), p = s0 m0, r² = Λ² s0² (1 + p(e^x − 1))^−2 = Λ² s0² Σ_{j ≤ 18} G_j(p) x^j,
      the Taylor series in x (radius R: its poles are at x = u0 ± iπ; truncation ≲ 8^-19 ≈ 1e-17
      relative, all terms of one sign-pattern bounded by the majorant (1 − p(e^X − 1))^−2 ≤ 1.3,
      so rounding stays at a few ulp). The task adds G_j(p)(c t_{k1−1})^j to the moments of
      bucket k1; :func:`_fold_moments` turns a block's moments into the sums at every time in
      O(T·deg) per block, so these pairs cost O(deg²) per task, not O(T). A tile of tasks keeps
      only the powers x^j, j ≤ J, that can add more than 1e-18 (:func:`_series_degree`): slow
      tasks, whose x stays small at every output time, need a few instead of 19. A tile whose
      tasks share one bucket and need p^m only up to m = 5 (most of a power-law table) goes
      through the vectorised lanes (:func:`_series_lanes`, summed per tile position, then by a
      fixed tree per bucket, :func:`_flush_lanes`); the others add theirs task by task.
    - then, while W e^{2u} ≥ 1e-300 (u = u0 − x), W ≥ max(wt, rate)·Λ² the power of two above
      it (:func:`log_upper`: its exponent, no logarithm): r = −Λ (1 or m)/(1 + m),
      m = e^{−|u|}, with the branch-free :func:`exp_nonpos` (vectorised).
    - beyond: both contributions are below 1e-300 (absolute) and dropped; computing them
      would only cost subnormal arithmetic, which is slow.

    Every sum is taken in an order fixed by the block (task order; the lanes per tile position,
    then a fixed tree): the result depends on the block only.
    """
    nt = times.shape[0]
    nb = hi - lo
    deg = _DEG
    scr = np.empty(nt)
    if level == EXACT:
        for i in range(lo, hi):
            _general_task_loss(
                level, times, lam[i], psi[i], rate[i], wtest[i], v0x[i], v0y[i], w0x[i], w0y[i],
                rtol, acc_t, acc_r, scr,
            )  # fmt: skip
        return
    # every task's fast-path set-up, vectorised across the block; the tasks that are not
    # balanced logistics then go through _general_task_loss (in task order, first), and the
    # fast ones are compacted to the front of each row (nothing to move if all are fast)
    tb = np.empty(_NROW * BLOCK)
    nf = _fast_setup(level, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, lo, hi, tb)
    if nf < nb:
        for j in range(nb):
            if tb[_R_OK + j] == 0.0:
                i = lo + j
                _general_task_loss(
                    level, times, lam[i], psi[i], rate[i], wtest[i], v0x[i], v0y[i], w0x[i],
                    w0y[i], rtol, acc_t, acc_r, scr,
                )  # fmt: skip
        for r in range(1, _NROW):
            o = r * BLOCK
            k = 0
            for j in range(nb):
                if tb[_R_OK + j] != 0.0:
                    tb[o + k] = tb[o + j]
                    k += 1
    if nf == 0:
        return
    f_lam = tb[_R_LAM : _R_LAM + nf]
    f_c = tb[_R_C : _R_C + nf]
    f_wt = tb[_R_WT : _R_WT + nf]
    f_rt = tb[_R_RT : _R_RT + nf]
    f_u0 = tb[_R_U0 : _R_U0 + nf]
    f_sm = tb[_R_SM : _R_SM + nf]
    f_l2 = tb[_R_L2 : _R_L2 + nf]
    thr1 = tb[_R_T1 : _R_T1 + nf]
    thrh = tb[_R_TH : _R_TH + nf]
    thr2 = tb[_R_T2 : _R_T2 + nf]
    # index ranges (scalar walks) and the bucket reference x
    k1s = np.empty(nf, dtype=np.int64)
    khs = np.empty(nf, dtype=np.int64)
    k2s = np.empty(nf, dtype=np.int64)
    f_xi = np.empty(nf)
    a1 = np.int64(0)  # not a literal 0: _walk_right would compile once for it and once for int64
    ah = np.int64(0)
    a2 = np.int64(0)
    # and per tile of the series: the largest p and ξ, and the bucket if all its tasks share one
    # (else −1)
    ntile = (nf + _TILE - 1) // _TILE
    tile_p = np.empty(ntile)
    tile_x = np.empty(ntile)
    tile_b = np.empty(ntile, dtype=np.int64)
    pm = 0.0
    xm = 0.0
    bb = np.int64(0)
    e_task = np.empty(nf, dtype=np.int64)  # the tasks with an exp range, and their total length
    n_e = 0
    e_len = 0
    t_last = times[nt - 1]
    for j in range(nf):
        if thr1[j] >= t_last:  # every output time in the series (slow tasks): no walks
            a1 = ah = a2 = nt
        else:
            a1 = _walk_right(times, thr1[j], a1)
            ah = max(_walk_right(times, thrh[j], max(ah, a1)), a1)
            a2 = max(_walk_right(times, thr2[j], max(a2, ah)), ah)
        k1s[j] = a1
        khs[j] = ah
        k2s[j] = a2
        if a2 > a1:
            e_task[n_e] = j
            n_e += 1
            e_len += a2 - a1
        xi = f_c[j] * times[a1 - 1] if a1 > 0 else 0.0
        f_xi[j] = xi
        if j % _TILE == 0:
            pm = 0.0
            xm = 0.0
            bb = a1
        pm = max(pm, f_sm[j])
        xm = max(xm, xi)
        bb = bb if a1 == bb else -1
        if j % _TILE == _TILE - 1 or j == nf - 1:
            tile_p[j // _TILE] = pm
            tile_x[j // _TILE] = xm
            tile_b[j // _TILE] = bb
    # series coefficients W_j = G_j(p)·ξ^j: through the lanes for a tile of one bucket with few
    # powers of p, else vectorised across the tile (kept in L1) and added to the moments of
    # their buckets in task order (a run of tasks in one bucket is summed in registers first)
    mom = np.zeros((nt + 1, 2, deg + 1))
    pw = np.empty(_TILE)
    w = np.empty((deg + 1, _TILE))
    sv = np.zeros(_S_SIZE)
    lane_b = -1
    # not a literal 0: _flush_lanes would compile once for it and once for int64
    lane_n = np.int64(0)
    run_t = np.zeros(deg + 1)
    run_r = np.zeros(deg + 1)
    run_b = -1
    jblk = 0  # the highest power of x any tile of the block keeps
    for t0 in range(0, nf, _TILE):
        nw = min(_TILE, nf - t0)
        # the tile's slices, indexed from 0 (see _args._count_bad: no wraparound, no gathers)
        t_sm = f_sm[t0 : t0 + nw]
        t_xi = f_xi[t0 : t0 + nw]
        t_wt = f_wt[t0 : t0 + nw]
        t_rt = f_rt[t0 : t0 + nw]
        t_l2 = f_l2[t0 : t0 + nw]
        b0 = tile_b[t0 // _TILE]
        if b0 == 0:
            continue  # every task of the tile is past its series at the first output time
        # terms p^m with m > mmax are negligible: with y = p(e^ξ − 1) ≤ ymax over the tile,
        # Σ_{m > M} (m + 1) y^m ≤ (M + 2) ymax^{M+1}/(1 − ymax)² ≤ 1e-18 (F ≥ 1/(1 + ymax)²);
        # so are the powers x^j with j > jmax (:func:`_series_degree`)
        pmax = tile_p[t0 // _TILE]
        xmax = tile_x[t0 // _TILE]
        ymax = pmax * math.expm1(xmax)
        mmax = deg
        jmax = deg
        if ymax < 0.5:
            tail = 4.0 * ymax
            mmax = 0
            while mmax < deg and (mmax + 2) * tail > 1e-18:
                mmax += 1
                tail *= ymax
            jmax = _series_degree(pmax, xmax, mmax)
        # a tile of one bucket with few powers of p goes through the lanes
        if b0 > 0 and mmax <= _LANE_M:
            if b0 != lane_b:
                if lane_b > 0:
                    _flush_lanes(sv, lane_n, mom[lane_b])
                lane_b = b0
                lane_n = np.int64(0)
            nrow = 6 if jmax < 6 else (12 if jmax < 12 else deg + 1)
            lane_n = max(lane_n, nrow)
            jblk = max(jblk, nrow - 1)
            _series_lanes(sv, nw, nrow, t_sm, t_xi, t_wt, t_rt, t_l2)
            continue
        jblk = max(jblk, jmax)
        for j in range(nw):
            pw[j] = 1.0
        for jd in range(jmax + 1):
            for j in range(nw):
                w[jd, j] = 0.0
        for m in range(mmax + 1):
            for jd in range(m, jmax + 1):
                cjm = _SERIES_C[jd, m]
                for j in range(nw):
                    w[jd, j] += cjm * pw[j]
            for j in range(nw):
                pw[j] *= t_sm[j]
        for j in range(nw):
            pw[j] = t_xi[j]
        for jd in range(1, jmax + 1):
            for j in range(nw):
                w[jd, j] *= pw[j]
            for j in range(nw):
                pw[j] *= t_xi[j]
        for j in range(nw):
            b = k1s[t0 + j]
            if b == 0:
                continue
            if b != run_b:
                if run_b > 0:
                    mb = mom[run_b]
                    for jd in range(deg + 1):
                        mb[0, jd] += run_t[jd]
                        mb[1, jd] += run_r[jd]
                        run_t[jd] = 0.0
                        run_r[jd] = 0.0
                run_b = b
            at = t_wt[j] * t_l2[j]
            ar = t_rt[j] * t_l2[j]
            for jd in range(jmax + 1):
                run_t[jd] += at * w[jd, j]
                run_r[jd] += ar * w[jd, j]
    if lane_b > 0:
        _flush_lanes(sv, lane_n, mom[lane_b])
    if run_b > 0:
        mb = mom[run_b]
        for jd in range(deg + 1):
            mb[0, jd] += run_t[jd]
            mb[1, jd] += run_r[jd]
    # the exp ranges, in batches of tasks whose exponents fill at most EXP_BATCH values
    ex = np.empty(max(min(EXP_BATCH, e_len), nt))
    qa = np.int64(0)  # not a literal 0: _exp_terms would compile once for it and once for int64
    ne = 0
    for q in range(n_e):
        j = e_task[q]
        m = k2s[j] - k1s[j]
        if ne + m > ex.shape[0]:
            _exp_terms(
                times, e_task, qa, q, k1s, khs, k2s, f_c, f_u0, f_lam, f_wt, f_rt, ex, acc_t, acc_r
            )
            qa = q
            ne = 0
        ne += m
    if n_e > 0:
        _exp_terms(
            times, e_task, qa, np.int64(n_e), k1s, khs, k2s, f_c, f_u0, f_lam, f_wt, f_rt, ex,
            acc_t, acc_r,
        )  # fmt: skip
    _fold_moments(qpow, mom, acc_t, acc_r, jblk)


@njit(**SERIAL)
def _series_degree(p, xi, mmax):
    """The smallest J ≤ _DEG for which the sufficient bound below shows that the powers x^j,
    j > J, of the pre-emergence series add at most 1e-18 to F = (1 + p(e^x − 1))^−2 for every
    x ≤ ξ and every p ≤ ``p`` (the tile's maxima), with its terms p^m, 1 ≤ m ≤ ``mmax``:

        |Σ_{j>J} Σ_m C[j, m] p^m x^j| ≤ Σ_m (m+1) p^m Σ_{j>J} (mξ)^j/j!,

    as |C[j, m]| = (m+1)! S(j, m)/j! and m! S(j, m) ≤ m^j (surjections among all maps). Each m
    gets 1e-18/mmax; its exponential tail is bounded by its first term over 1 − mξ/(J+2). (The
    bound is evaluated in floating point: rigorous up to rounding, ~1e-16 of the 1e-18 budget.)
    Slow tasks, whose ξ = c·t is small at every output time, need a few powers instead of 19."""
    deg = _DEG
    lim = 1e-18 / max(mmax, 1)
    jmax = 0
    pm = 1.0
    for m in range(1, mmax + 1):
        pm *= p
        z = m * xi
        a = (m + 1) * pm
        t = z  # z^(J+1)/(J+1)! at J = 0
        jj = 0
        while jj < deg and not (z < jj + 2 and a * t <= lim * (1.0 - z * _INV[jj + 2])):
            jj += 1
            t *= z * _INV[jj + 1]
        jmax = max(jmax, jj)
    return jmax


@njit(**SERIAL)
def _ratio_powers(times, deg):
    """qpow[k, j] = (t_k / t_{k+1})^j for k < T − 1 (1 where t_{k+1} = 0), by repeated products."""
    nt = times.shape[0]
    qpow = np.ones((nt, deg + 1))
    for k in range(nt - 1):
        tn = times[k + 1]
        q = times[k] / tn if tn > 0.0 else 1.0
        for j in range(1, deg + 1):
            qpow[k, j] = qpow[k, j - 1] * q
    return qpow


@njit(**SERIAL)
def _fold_moments(qpow, mom, acc_t, acc_r, deg):
    """acc[k] += Σ_{b > k} Σ_{j ≤ deg} mom[b, ·, j] (t_k / t_{b−1})^j (see _block_loss; the moments
    of higher powers are zero).

    Bucket b holds polynomial coefficients scaled to its reference time t_{b−1}; the suffix
    sum over buckets is carried scaled to the current time, S_k = mom[k+1] + S_{k+1}·(t_k /
    t_{k+1})^j, so no power of a tiny rate is ever formed (ratios ≤ 1: nothing overflows).
    """
    nt = acc_t.shape[0]
    s = np.zeros((2, deg + 1))
    for k in range(nt - 1, -1, -1):
        m = mom[k + 1]
        q = qpow[k]
        for j in range(deg + 1):
            s[0, j] = s[0, j] * q[j] + m[0, j]
        for j in range(deg + 1):
            s[1, j] = s[1, j] * q[j] + m[1, j]
        tt = 0.0
        tr = 0.0
        for j in range(deg, -1, -1):
            tt += s[0, j]
            tr += s[1, j]
        acc_t[k] += tt
        acc_r[k] += tr


# ---------------------------------------------------------------------------------------------
# parallel kernels (prange over fixed blocks of tasks)
# ---------------------------------------------------------------------------------------------


@njit(**PARALLEL)
def _loss_partials_kernel(
    level, times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, rtol, test_p, train_p, bad
):
    """Block b: its task values checked (counts into bad[b]; a block with a bad value is left at
    zero), then its partial sums."""
    n = lam.shape[0]
    nt = times.shape[0]
    nb = test_p.shape[0]
    qpow = _ratio_powers(times, _DEG)
    for b in prange(nb):
        at = test_p[b]
        ar = train_p[b]
        for k in range(nt):
            at[k] = 0.0
            ar[k] = 0.0
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        if not block_is_valid(lam, psi, rate, v0x, v0y, w0x, w0y, lo, hi, bad[b]):
            continue
        _block_loss(
            level, times, qpow, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, rtol, lo, hi, at, ar
        )
        for k in range(nt):
            at[k] *= 0.5
            ar[k] *= 0.5


@njit(**PARALLEL)
def _f_curves_kernel(level, times, lam, psi, rate, v0x, v0y, w0x, w0y, rtol, out):
    n = lam.shape[0]
    for b in prange(n_blocks_jit(n)):
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        for i in range(lo, hi):
            _task_curve(
                level, times, lam[i], psi[i], rate[i], v0x[i], v0y[i], w0x[i], w0y[i], rtol, out[i]
            )


@njit(**PARALLEL)
def _emergence_kernel(level, lam, psi, rate, v0x, v0y, w0x, w0y, out):
    for i in prange(lam.shape[0]):
        lam_e, kap, cm, g, h = closed_form_setup(
            level, lam[i], psi[i], v0x[i], v0y[i], w0x[i], w0y[i]
        )
        pp, pm, rr, sig, logk, sk, mir = riccati_setup(lam_e, kap, g, h)
        out[i] = riccati_half_rise(lam_e, kap, rate[i] * kap, pp, pm, rr, sig, logk, sk, mir)


@njit(**SERIAL)
def n_blocks_jit(n):
    """Number of BLOCK-sized blocks covering n tasks (the jit twin of reduce.n_blocks)."""
    return (n + BLOCK - 1) // BLOCK


# ---------------------------------------------------------------------------------------------
# Python wrappers: validate, allocate, own the error messages
# ---------------------------------------------------------------------------------------------

_TASK_NAMES = ("lam", "psi", "rate", "v0x", "v0y", "w0x", "w0y")


def f_curves(
    times: np.ndarray,
    lam: np.ndarray,
    psi: np.ndarray,
    rate: np.ndarray,
    v0x: np.ndarray,
    v0y: np.ndarray,
    w0x: np.ndarray,
    w0y: np.ndarray,
    level: str = "leading",
    out: np.ndarray | None = None,
    *,
    rtol: float = EXACT_RTOL,
) -> np.ndarray:
    """Per-task f_s(t_k) (dimensionless, like Λ) for a tracked subset: ``out[i, k]``, shape (n, T).

    ``times`` (gradient-flow time) must be non-decreasing and ≥ 0; ``rtol`` is used by
    ``level="exact"`` only. ``out`` (float64, C-contiguous, (n, T)) is allocated if None.
    """
    code = _level_code(level)
    t = _times(times)
    n, arrs = _tasks(lam=lam, psi=psi, rate=rate, v0x=v0x, v0y=v0y, w0x=w0x, w0y=w0y)
    if out is None:
        out = np.empty((n, t.shape[0]), dtype=np.float64)
    elif out.shape != (n, t.shape[0]) or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float64 array of shape {(n, t.shape[0])}")
    if n:
        _f_curves_kernel(code, t, *arrs, float(rtol), out)
    return out


def loss_partials(
    times: np.ndarray,
    lam: np.ndarray,
    psi: np.ndarray,
    rate: np.ndarray,
    wtest: np.ndarray,
    v0x: np.ndarray,
    v0y: np.ndarray,
    w0x: np.ndarray,
    w0y: np.ndarray,
    level: str,
    test_partials: np.ndarray,
    train_partials: np.ndarray,
    *,
    rtol: float = EXACT_RTOL,
    device: str = "cpu",
) -> None:
    """Per-block partial sums of L_test and L_train on the time grid, fused (no n × T array).
    ``device = "cuda"`` runs the GPU twin (:mod:`fastdyn.models.msfr.theory_cuda`).

    test_partials[b, k] = Σ_{i in block b} wtest_i (f_i(t_k) − Λ_i)²/2 and train_partials the
    same with rate_i, block b = tasks [b·BLOCK, (b+1)·BLOCK) of this chunk, summed in task order.
    Both arrays (float64, C-contiguous, shape (n_blocks(n), T)) are overwritten. Add the rows in
    order with :func:`fastdyn.reduce.accumulate_blocks`; chunks must start on a block boundary
    of the global task index for results independent of the chunking. The task values are
    checked block by block inside the kernel, while they are in cache (a separate pass cost 15 %
    of a 16-time run); after the ValueError for a bad value the arrays' contents are unspecified.
    """
    on_gpu = device == "cuda"  # the GPU twin (fastdyn.drive.device): the values checked here
    code, t, arrs, wt = partials_args(
        times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, level, test_partials, train_partials,
        check_values=on_gpu,
    )  # fmt: skip
    if on_gpu:
        from . import theory_cuda

        theory_cuda.checked_partials(code, t, arrs, wt, test_partials, train_partials)
        return
    lam_, psi_, rate_, v0x_, v0y_, w0x_, w0y_ = arrs
    bad = np.zeros((test_partials.shape[0], 7, 3), dtype=np.int64)
    _loss_partials_kernel(
        code, t, lam_, psi_, rate_, wt, v0x_, v0y_, w0x_, w0y_, float(rtol), test_partials,
        train_partials, bad,
    )  # fmt: skip
    check_counts(bad.sum(axis=0))


def loss_curves(
    times: np.ndarray,
    lam: np.ndarray,
    psi: np.ndarray,
    rate: np.ndarray,
    wtest: np.ndarray,
    v0x: np.ndarray,
    v0y: np.ndarray,
    w0x: np.ndarray,
    w0y: np.ndarray,
    level: str = "leading",
    *,
    chunk: int = 256 * BLOCK,
    rtol: float = EXACT_RTOL,
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """(L_test(t_k), L_train(t_k)) summed over all given tasks, in chunks of ``chunk`` tasks.

    A convenience over :func:`loss_partials` (what the driver does, without the tasks beyond
    D); ``chunk`` must be a multiple of BLOCK, and the result does not depend on it.
    """
    if chunk <= 0 or chunk % BLOCK:
        raise ValueError(f"chunk must be a positive multiple of {BLOCK}, got {chunk}")
    t = _times(times)
    cols = [
        np.ascontiguousarray(a, dtype=np.float64)
        for a in (lam, psi, rate, wtest, v0x, v0y, w0x, w0y)
    ]
    n = cols[0].shape[0]
    lt = np.zeros(t.shape[0])
    lr = np.zeros(t.shape[0])
    for lo in range(0, n, chunk):
        sl = [c[lo : lo + chunk] for c in cols]
        m = sl[0].shape[0]
        tp = np.empty((n_blocks(m), t.shape[0]))
        rp = np.empty_like(tp)
        loss_partials(t, *sl, level, tp, rp, rtol=rtol, device=device)
        accumulate_blocks(lt, tp)
        accumulate_blocks(lr, rp)
    return lt, lr


def emergence_times(
    lam: np.ndarray,
    psi: np.ndarray,
    rate: np.ndarray,
    v0x: np.ndarray,
    v0y: np.ndarray,
    w0x: np.ndarray,
    w0y: np.ndarray,
    level: str = "leading",
) -> np.ndarray:
    """Half-rise ("emergence") times t_s (gradient-flow time): the first t with f_s(t) = Λ_s/2.

    From the Riccati form at ``level`` ("leading" or "first_order"); balanced init gives the
    spec's t_s = ln(Λ/f(0) − 1)/(2aΛ). 0 where f(0) ≥ Λ/2 already, inf where rate = 0 (never
    trained), NaN where Λ ≤ 0 or the start is the mirrored/saddle case (f never reaches Λ/2).
    """
    code = _level_code(level)
    if code == EXACT:
        raise ValueError("emergence_times supports level 'leading' or 'first_order'")
    n, arrs = _tasks(lam=lam, psi=psi, rate=rate, v0x=v0x, v0y=v0y, w0x=w0x, w0y=w0y)
    out = np.empty(n)
    if n:
        _emergence_kernel(code, *arrs, out)
    return out


def first_order_balanced(
    times: np.ndarray, lam: np.ndarray, psi: np.ndarray, rate: np.ndarray, init_scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """The spec's explicit f⁰ and f¹ (section 5) for balanced init v0 = w0 = σ0 û, shape (n, T).

        f⁰(t) = Λ/(1 + (Λ/f⁰(0) − 1) e^{−2aΛt}),  f⁰(0) = κσ0²,  a = rate·ψ(1 + Λ²)
        f¹(t) = f⁰(1 − f⁰/Λ)(2aΛt + Λ/(Λ − f⁰(0)))/(1 + Λ²)²

    f ≈ f⁰ + ε f¹ with ε = 1/ψ has error O(ε²): the linearisation in δ = ε/(1 + Λ²)² of the
    logistic whose rate and start are both scaled by (1 + δ). Plain numpy (an analysis helper,
    not a hot path).
    """
    t = _times(times)[None, :]
    lam = np.asarray(lam, dtype=np.float64)[:, None]
    psi = np.asarray(psi, dtype=np.float64)[:, None]
    rate = np.asarray(rate, dtype=np.float64)[:, None]
    kap = psi * (1.0 + lam * lam)
    a = rate * kap
    f00 = kap * float(init_scale) ** 2
    x = 2.0 * a * lam * t
    u = np.log(lam / f00 - 1.0) - x
    f0 = lam / (1.0 + np.exp(np.minimum(u, 700.0)))
    f1 = f0 * (1.0 - f0 / lam) * (x + lam / (lam - f00)) / (1.0 + lam * lam) ** 2
    return f0, f1
