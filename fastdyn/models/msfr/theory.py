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
each summed serially in task order, so the result is bit-identical for any thread count; the
driver adds the rows in order with :func:`fastdyn.reduce.accumulate_blocks`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..._jit import PARALLEL, SERIAL
from ...reduce import BLOCK, accumulate_blocks, n_blocks
from ._closed_form import (
    EXACT,
    FIRST_ORDER,
    LEADING,
    closed_form_setup,
    exact_curve,
    exp_nonpos,
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
LEVELS: dict[str, int] = {"leading": LEADING, "first_order": FIRST_ORDER, "exact": EXACT}

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


#: logistic fast path: below x = c·t = 2^-10 the exp is replaced by a short series
_X_SERIES = 2.0**-10
#: after learning, contributions (weight × r²) below this absolute value are dropped
_DROP_BELOW = 1e-300


@njit(**SERIAL)
def _logistic_loss(times, u0, c, lam, wt, rate, acc_t, acc_r, scr):
    """acc += (wt, rate)·r_k² for the logistic r = −Λ z/(1 + z), z = e^{u0 − c t_k}.

    The time grid (non-decreasing) splits into three index ranges per task, found by binary
    search, so that most (task, time) pairs need no exp:

    - x = c t ≤ min(2^-10, u0) (before emergence): with m0 = e^{−u0}, s0 = 1/(1 + m0) and
      q = s0 m0 (e^x − 1) ∈ [0, 2^-10], r² = Λ² s0² (1 + q)^−2, evaluated as
      Λ² s0² (1 − 2q + 3q² − 4q³ + 5q⁴ − 6q⁵) with e^x − 1 to x⁵/120 (truncation ≤ 7q⁶ ≤ 1e-17
      relative): no exp, no division, vectorised.
    - then, while max(wt, rate)·Λ² e^{2u} ≥ 1e-300: r = −Λ (1 or m)/(1 + m), m = e^{−|u|},
      u = u0 − c t, with the branch-free :func:`exp_nonpos` (vectorised).
    - beyond: both contributions are below 1e-300 (absolute) and dropped; computing them
      would only cost subnormal arithmetic, which is slow.
    """
    nt = times.shape[0]
    wmax = max(wt, rate) * lam * lam
    if wmax == 0.0:
        return
    if c > 0.0:
        u_lo = 0.5 * (math.log(_DROP_BELOW) - math.log(wmax))
        k1 = np.searchsorted(times, min(_X_SERIES, u0) / c, side="right")
        k2 = np.searchsorted(times, (u0 - min(u_lo, 0.0)) / c, side="right")
    else:
        k1 = nt
        k2 = nt
    m0 = math.exp(-u0)
    s0 = 1.0 / (1.0 + m0)
    sm = s0 * m0
    lam2 = lam * lam * s0 * s0
    at = wt * lam2
    ar = rate * lam2
    for k in range(k1):
        x = c * times[k]
        q = sm * (x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0))))))
        g = 1.0 + q * (-2.0 + q * (3.0 + q * (-4.0 + q * (5.0 - 6.0 * q))))
        acc_t[k] += at * g
        acc_r[k] += ar * g
    # u ≥ 0 (before the half-rise): r = −Λ/(1 + e^−u); u < 0: r = −Λ e^u/(1 + e^u)
    kh = max(k1, min(k2, np.searchsorted(times, u0 / c, side="right"))) if c > 0.0 else k2
    # the exps first, out of place into the scratch row (a loop shape LLVM vectorises)
    _exp_affine(times, k1, kh, c, -u0, scr)
    _exp_affine(times, kh, k2, -c, u0, scr)
    for k in range(k1, kh):
        d = lam / (1.0 + scr[k])
        d2 = d * d
        acc_t[k] += wt * d2
        acc_r[k] += rate * d2
    for k in range(kh, k2):
        m = scr[k]
        d = lam * m / (1.0 + m)
        d2 = d * d
        acc_t[k] += wt * d2
        acc_r[k] += rate * d2


@njit(**SERIAL)
def _exp_affine(times, k0, k1, c, b, out):
    """out[k] = e^{c·t_k + b} for k0 ≤ k < k1 (all exponents ≤ 0), vectorised."""
    for k in range(k0, k1):
        out[k] = exp_nonpos(c * times[k] + b)


@njit(**SERIAL)
def _task_loss(level, times, lam, psi, rate, wt, v0x, v0y, w0x, w0y, rtol, acc_t, acc_r, scr):
    """acc_t[k] += wt·r_k², acc_r[k] += rate·r_k² for one task (r = f − Λ; halved by the caller)."""
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
    if sig == 0.0 and mir > 0.0 and sk < 0.0 and lam_e > 0.0 and logk < np.inf:
        _logistic_loss(times, logk, c, lam_e, wt, rate, acc_t, acc_r, scr)
        return
    for k in range(nt):
        f, r = riccati_eval(logk - c * times[k], lam_e, kap, pp, pm, rr, sig, sk, mir)
        d2 = r * r
        acc_t[k] += wt * d2
        acc_r[k] += rate * d2


# ---------------------------------------------------------------------------------------------
# parallel kernels (prange over fixed blocks of tasks)
# ---------------------------------------------------------------------------------------------


@njit(**PARALLEL)
def _loss_partials_kernel(
    level, times, lam, psi, rate, wtest, v0x, v0y, w0x, w0y, rtol, test_p, train_p
):
    n = lam.shape[0]
    nt = times.shape[0]
    nb = test_p.shape[0]
    for b in prange(nb):
        at = test_p[b]
        ar = train_p[b]
        for k in range(nt):
            at[k] = 0.0
            ar[k] = 0.0
        scr = np.empty(nt)
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        for i in range(lo, hi):
            _task_loss(
                level,
                times,
                lam[i],
                psi[i],
                rate[i],
                wtest[i],
                v0x[i],
                v0y[i],
                w0x[i],
                w0y[i],
                rtol,
                at,
                ar,
                scr,
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


def _level_code(level: str) -> int:
    try:
        return LEVELS[level]
    except (KeyError, TypeError):
        allowed = ", ".join(repr(k) for k in LEVELS)
        raise ValueError(f"level must be one of {allowed}, got {level!r}") from None


def _times(times) -> np.ndarray:
    t = np.ascontiguousarray(times, dtype=np.float64)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"times must be a non-empty 1-d array, got shape {t.shape}")
    if not np.all(np.isfinite(t)) or t[0] < 0.0:
        raise ValueError("times must be finite and ≥ 0")
    if np.any(np.diff(t) < 0.0):
        raise ValueError("times must be non-decreasing")
    return t


def _tasks(**arrays) -> tuple[int, list[np.ndarray]]:
    out = []
    n = None
    for name, a in arrays.items():
        x = np.ascontiguousarray(a, dtype=np.float64)
        if x.ndim != 1:
            raise ValueError(f"{name} must be a 1-d per-task array, got shape {x.shape}")
        if n is None:
            n = x.shape[0]
        elif x.shape[0] != n:
            raise ValueError(f"{name} has {x.shape[0]} tasks, expected {n} (like the others)")
        out.append(x)
    names = list(arrays)
    for name, x in zip(names, out, strict=True):
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} must be finite for every task")
    if np.any(~(out[names.index("psi")] > 0.0)):
        raise ValueError("psi must be > 0 for every task")
    if np.any(~(out[names.index("rate")] >= 0.0)):
        raise ValueError("rate must be ≥ 0 for every task")
    return int(n or 0), out


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
) -> None:
    """Per-block partial sums of L_test and L_train on the time grid, fused (no n × T array).

    test_partials[b, k] = Σ_{i in block b} wtest_i (f_i(t_k) − Λ_i)²/2 and train_partials the
    same with rate_i, block b = tasks [b·BLOCK, (b+1)·BLOCK) of this chunk, summed in task order.
    Both arrays (float64, C-contiguous, shape (n_blocks(n), T)) are overwritten. Add the rows in
    order with :func:`fastdyn.reduce.accumulate_blocks`; chunks must start on a block boundary
    of the global task index for results independent of the chunking.
    """
    code = _level_code(level)
    t = _times(times)
    n, arrs = _tasks(lam=lam, psi=psi, rate=rate, v0x=v0x, v0y=v0y, w0x=w0x, w0y=w0y)
    wt = np.ascontiguousarray(wtest, dtype=np.float64)
    if wt.shape != (n,):
        raise ValueError(f"wtest must be a 1-d array of {n} tasks, got shape {wt.shape}")
    shape = (n_blocks(n), t.shape[0])
    for name, p in (("test_partials", test_partials), ("train_partials", train_partials)):
        if (
            not isinstance(p, np.ndarray)
            or p.shape != shape
            or p.dtype != np.float64
            or not p.flags.c_contiguous
            or not p.flags.writeable
        ):
            raise ValueError(
                f"{name} must be a writeable C-contiguous float64 array of shape {shape}"
            )
    lam_, psi_, rate_, v0x_, v0y_, w0x_, w0y_ = arrs
    _loss_partials_kernel(
        code, t, lam_, psi_, rate_, wt, v0x_, v0y_, w0x_, w0y_, float(rtol), test_partials,
        train_partials,
    )  # fmt: skip


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
        loss_partials(t, *sl, level, tp, rp, rtol=rtol)
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
