"""Scalar (per task) building blocks of the MSFR theory kernels (spec msfr.md sections 4 and 5).

Everything here is a serial ``@njit`` function of one task's scalars; :mod:`.theory` holds the
parallel kernels and the Python wrappers. Notation (spec section 2): task strength Λ, context
length ψ, train weight ``rate`` = #/N, u = (1, Λ), e = (1, 0), H = ψ u uᵀ + e eᵀ, f = vᵀ H w,
residual r = f − Λ. Time t is gradient-flow time (learning rate × steps).

Riccati closed form (spec section 4), for H⁰ = κ ûûᵀ with κ = ψ(1 + Λ²), a = rate·κ,
g = ûᵀv0, h = ûᵀw0, P0 = (g + h)², σ = (g² − h²)²:

    R = sqrt(4Λ² + κ²σ),  P± = (2Λ ± R)/κ,  K = (P0 − P+)/(P0 − P−),  E(t) = K exp(−a R t)
    f(t) = [Λ(P+ + P− E²) + κσE] / [(1 − E)(P+ − P− E)]
    r(t) = f − Λ = (R²/κ) E / [(1 − E)(P+ − P− E)]          (no cancellation near f = Λ)

E is never formed when |E| > 1: with ℓ = log|K| − a R t we use E = ±e^ℓ for ℓ ≤ 0 and
y = 1/E = ±e^−ℓ for ℓ > 0 (numerator and denominator divided by E²), so no term overflows.
P± are computed without cancellation (P+ P− = −σ).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..._jit import SERIAL
from .._fastexp import (  # noqa: F401  (re-exported: theory, tests, bench use them here)
    exp_nonpos,
    log_pos,
    log_upper,
)

# ---------------------------------------------------------------------------------------------
# per-task setup of the closed forms
# ---------------------------------------------------------------------------------------------

LEADING = 0
FIRST_ORDER = 1
EXACT = 2


@njit(**SERIAL)
def closed_form_setup(level, lam, psi, v0x, v0y, w0x, w0y):
    """Parameters of the Riccati form used at ``level`` (LEADING or FIRST_ORDER) for one task.

    Returns (lam_eff, kappa_eff, c_minus, g, h): the + mode obeys the Riccati equation of spec
    section 4 with strength lam_eff, curvature kappa_eff (rate a = rate·kappa_eff), projections
    g, h of v0, w0 on its direction, and f = f_Riccati + c_minus.

    LEADING (ε = 0, H⁰ = κ ûûᵀ): lam_eff = Λ, kappa_eff = κ = ψ(1 + Λ²), c_minus = 0, g = ûᵀv0.

    FIRST_ORDER (ε = 1/ψ, δ = ε/(1 + Λ²)²): H/ψ = uuᵀ + ε eeᵀ has, to first order in ε, the top
    eigenpair λ+ = (1 + Λ²)(1 + δ), x+ = û − δΛ û⊥, and the bottom one ψλ− = Λ²/(1 + Λ²) (an O(1)
    curvature, because ψ = 1/ε), x− = û⊥ + δΛ û. The + mode is the Riccati form with
    kappa_eff = κ(1 + δ) (the spec's rate shift a → a(1 + δ)) and g = x+ᵀv0, h = x+ᵀw0 (for
    balanced init along û, κ_eff g h = κσ0²(1 + δ) = v0ᵀHw0: the spec's start shift). The − mode
    moves on the clock λ−τ = O(ε log(1/σ0)) and is frozen at its initial value
    c_minus = (Λ²/(1 + Λ²)) (x−ᵀv0)(x−ᵀw0), which the + mode sees as a shifted target
    lam_eff = Λ − c_minus. Error: O(ε²) + O(ε σ0² log(1/σ0)); for balanced init along û,
    c_minus = O(ε² σ0²) and the form reduces to the logistic with both shifts (error O(ε²)).
    """
    n = math.sqrt(1.0 + lam * lam)
    kappa = psi * (1.0 + lam * lam)
    # û = (1, Λ)/n, û⊥ = (−Λ, 1)/n
    gv = (v0x + lam * v0y) / n
    gw = (w0x + lam * w0y) / n
    if level == LEADING:
        return lam, kappa, 0.0, gv, gw
    hv = (v0y - lam * v0x) / n
    hw = (w0y - lam * w0x) / n
    delta = 1.0 / (psi * (1.0 + lam * lam) * (1.0 + lam * lam))
    dl = delta * lam
    g = gv - dl * hv
    h = gw - dl * hw
    gm = hv + dl * gv
    hm = hw + dl * gw
    c_minus = lam * lam / (1.0 + lam * lam) * gm * hm
    return lam - c_minus, kappa * (1.0 + delta), c_minus, g, h


@njit(**SERIAL)
def riccati_setup(lam, kappa, g, h):
    """Constants of the Riccati solution for strength ``lam``, curvature ``kappa`` and g, h.

    Returns (pp, pm, rr, sig, log_k, s_k, mirror):  P+, P−, R, σ, log|K|, sign K, and ±1.
    When P0 = (g + h)² is exactly 0 the P-form is singular; the model is then solved in the
    mirrored variables (h → −h, Λ → −Λ, f → −f), signalled by mirror = −1 (f and r are
    negated by :func:`riccati_eval`). g = h = 0 is the saddle f ≡ 0: returned as log|K| = +inf,
    P+ = P− = 0, which :func:`riccati_eval` maps to f = 0.
    """
    mirror = 1.0
    if g + h == 0.0 and g - h != 0.0:
        mirror = -1.0
        h = -h
        lam = -lam
    sp = g + h
    p0 = sp * sp
    sig = (sp * (g - h)) ** 2
    rr = math.sqrt(4.0 * lam * lam + kappa * kappa * sig)
    if lam >= 0.0:
        s = 2.0 * lam + rr
        pp = s / kappa
        pm = -kappa * sig / s if s > 0.0 else 0.0
    else:
        s = rr - 2.0 * lam
        pm = -s / kappa
        pp = kappa * sig / s
    num = p0 - pp
    den = p0 - pm  # ≥ 0
    if num == 0.0:
        return pp, pm, rr, sig, -np.inf, 1.0, mirror
    s_k = 1.0 if num > 0.0 else -1.0
    if den == 0.0:
        return pp, pm, rr, sig, np.inf, s_k, mirror
    return pp, pm, rr, sig, math.log(abs(num)) - math.log(den), s_k, mirror


@njit(**SERIAL)
def riccati_eval(ell, lam, kappa, pp, pm, rr, sig, s_k, mirror):
    """(f, r) of the Riccati form at ℓ = log|K| − a R t (see the module docstring).

    ``lam`` is the un-mirrored strength. Both f (accurate when f is small) and r = f − Λ
    (accurate when f is close to Λ) come from exact forms, neither by subtraction.
    """
    lm = lam * mirror
    if ell <= 0.0:
        e = s_k * math.exp(ell)
        d = (1.0 - e) * (pp - pm * e)
        if d == 0.0 and e == 0.0:  # e underflowed with P+ = 0 (σ = 0, Λ < 0): f → 0, r → R²/(κ|P−|)
            return 0.0, mirror * (rr * rr / kappa) / -pm
        f = (lm * (pp + pm * e * e) + kappa * sig * e) / d
        r = (rr * rr / kappa) * e / d
    else:
        y = s_k * math.exp(-ell)
        d = (y - 1.0) * (pp * y - pm)
        if d == 0.0:  # the saddle g = h = 0 (or P0 = 0 with σ = 0): f stays 0
            return 0.0, -lam
        f = (lm * (pp * y * y + pm) + kappa * sig * y) / d
        r = (rr * rr / kappa) * y / d
    return mirror * f, mirror * r


@njit(**SERIAL)
def riccati_half_rise(lam, kappa, rate_kappa, pp, pm, rr, sig, log_k, s_k, mirror):
    """Emergence time: the first t with f(t) = Λ/2 (0 if f(0) ≥ Λ/2, inf if never; nan if Λ ≤ 0).

    f = Λ/2 ⇔ κΛP− E² + (2κ²σ + 4Λ²) E + κΛP+ = 0, whose negative root is
    E* = −2κΛP+ / (B + sqrt(B² + 4κ²Λ²σ)), B = 2κ²σ + 4Λ²; then t_s = (log|K| − log|E*|)/(aR).
    For σ = 0 (balanced) E* = −1 and t_s = ln(Λ/f(0) − 1)/(2aΛ), the spec's formula.
    """
    if lam <= 0.0 or mirror < 0.0:
        return np.nan
    b = 2.0 * kappa * kappa * sig + 4.0 * lam * lam
    e_star = 2.0 * kappa * lam * pp / (b + math.sqrt(b * b + 4.0 * kappa * kappa * lam * lam * sig))
    if s_k > 0.0 or log_k <= math.log(e_star):
        return 0.0
    if rate_kappa * rr == 0.0:
        return np.inf
    return (log_k - math.log(e_star)) / (rate_kappa * rr)


# ---------------------------------------------------------------------------------------------
# exact finite-ψ reduction: one scalar ODE in the clock τ per task
# ---------------------------------------------------------------------------------------------


@njit(**SERIAL)
def exact_setup(lam, psi, v0x, v0y, w0x, w0y):
    """Eigen-decomposition constants of the exact reduction (spec section 5).

    H/ψ = uuᵀ + ε eeᵀ = Σ± λ± x± x±ᵀ with λ+ = [T + sqrt((1 + ε − Λ²)² + 4Λ²)]/2, T = 1 + Λ² + ε
    (the discriminant T² − 4εΛ² written as a sum of squares), λ− = εΛ²/λ+, x+ ∝ (λ+ − Λ², Λ).
    Returns (lp, lm, ap, bp, am, bm) with F(τ) = ap e^{−2λ+τ} − bp e^{2λ+τ} + am e^{−2λ−τ}
    − bm e^{2λ−τ}, i.e. a± = ψλ± p±(0)²/4, b± = ψλ± q±(0)²/4, p = xᵀ(v0 + w0), q = xᵀ(v0 − w0).
    """
    eps = 1.0 / psi
    tr = 1.0 + lam * lam + eps
    disc = math.sqrt((1.0 + eps - lam * lam) ** 2 + 4.0 * lam * lam)
    lp = 0.5 * (tr + disc)
    lm = eps * lam * lam / lp
    xa = lp - lam * lam
    xb = lam
    nrm = math.sqrt(xa * xa + xb * xb)
    xa /= nrm
    xb /= nrm
    sx = v0x + w0x
    sy = v0y + w0y
    dx = v0x - w0x
    dy = v0y - w0y
    pp = xa * sx + xb * sy
    qp = xa * dx + xb * dy
    pm = -xb * sx + xa * sy
    qm = -xb * dx + xa * dy
    return (
        lp,
        lm,
        0.25 * psi * lp * pp * pp,
        0.25 * psi * lp * qp * qp,
        0.25 * psi * lm * pm * pm,
        0.25 * psi * lm * qm * qm,
    )


@njit(**SERIAL)
def _exact_f(tau, lp, lm, ap, bp, am, bm):
    """F(τ) of the exact reduction. Two exps, not four: e^{2λτ} = 1/e^{−2λτ} (when one
    overflows the other underflows, and 1/0 = inf, 1/inf = 0, as the exp would give)."""
    ep = math.exp(-2.0 * lp * tau)
    em = math.exp(-2.0 * lm * tau)
    return ap * ep - bp / ep + am * em - bm / em


# Dormand–Prince 5(4) tableau (autonomous form, so the nodes c_i are not needed)
_A21 = 1.0 / 5.0
_A31, _A32 = 3.0 / 40.0, 9.0 / 40.0
_A41, _A42, _A43 = 44.0 / 45.0, -56.0 / 15.0, 32.0 / 9.0
_A51, _A52, _A53, _A54 = 19372.0 / 6561.0, -25360.0 / 2187.0, 64448.0 / 6561.0, -212.0 / 729.0
_A61, _A62, _A63 = 9017.0 / 3168.0, -355.0 / 33.0, 46732.0 / 5247.0
_A64, _A65 = 49.0 / 176.0, -5103.0 / 18656.0
_B1, _B3, _B4 = 35.0 / 384.0, 500.0 / 1113.0, 125.0 / 192.0
_B5, _B6 = -2187.0 / 6784.0, 11.0 / 84.0
_E1, _E3, _E4 = 71.0 / 57600.0, -71.0 / 16695.0, 71.0 / 1920.0
_E5, _E6, _E7 = -17253.0 / 339200.0, 22.0 / 525.0, -1.0 / 40.0

#: per-task step budget of the exact reduction; a task that needs more gets NaN
MAX_STEPS = 200_000


@njit(**SERIAL)
def _exact_rate(tau, ex):
    """dτ/dt = c·(F(τ) − Λ) of the exact reduction, ``ex`` = (c, Λ, λ+, λ−, a+, b+, a−, b−)."""
    c, lam, lp, lm, ap, bp, am, bm = ex
    return c * (_exact_f(tau, lp, lm, ap, bp, am, bm) - lam)


@njit(**SERIAL)
def _exact_df(tau, lp, lm, ap, bp, am, bm):
    """dF/dτ of the exact reduction (< 0 unless the state is zero)."""
    ep = math.exp(-2.0 * lp * tau)
    em = math.exp(-2.0 * lm * tau)
    return -2.0 * (lp * (ap * ep + bp / ep) + lm * (am * em + bm / em))


#: |F − Λ| ≤ this × (|Λ| + |F(0)|) switches the exact reduction to its linearised tail
TAIL_SWITCH = 1e-7


@njit(**SERIAL)
def exact_curve(times, lam, psi, rate, v0x, v0y, w0x, w0y, rtol, out):
    """f(t_k) of the exact reduction for one task, written to ``out[k]`` (times non-decreasing, ≥ 0).

    dτ/dt = rate·ψ·(F(τ) − Λ), τ(0) = 0, f = F(τ), integrated by Dormand–Prince 5(4) with the
    error of τ measured against atol = rtol/λ+ + rtol|τ| (δf ≈ 2λ+Λ δτ, so this is a relative
    tolerance on f of order rtol per step), landing exactly on every output time. F(t) is
    monotone (τ is, and F is strictly decreasing in τ), so once |F − Λ| ≤ 1e-13(|Λ| + |F(0)|)
    the state is frozen: later values differ from the true ones by at most that bound, and the
    stiff approach to equilibrium (rate ≈ 2aΛ, which an explicit method would have to step
    through at its stability limit until the last output time) is solved analytically: once
    |F − Λ| ≤ 1e-7 (|Λ| + |F(0)|), τ∞ (F(τ∞) = Λ) is found by Newton's method and
    τ(t) = τ∞ + (τ1 − τ∞) e^{μ(t − t1)}, μ = rate·ψ·F'(τ∞) < 0; the neglected quadratic term
    changes f by O((F − Λ)²/Λ) ≤ 1e-14 (|Λ| + |F(0)|). Returns the steps taken (−1 if
    MAX_STEPS was exceeded or the state became NaN, the remaining outputs then NaN).
    """
    lp, lm, ap, bp, am, bm = exact_setup(lam, psi, v0x, v0y, w0x, w0y)
    nt = times.shape[0]
    tau = 0.0
    fc = _exact_f(tau, lp, lm, ap, bp, am, bm)
    c = rate * psi
    thr = TAIL_SWITCH * (abs(lam) + abs(fc))
    frozen = c == 0.0
    k1 = c * (fc - lam)
    ex = (c, lam, lp, lm, ap, bp, am, bm)  # what dτ/dt needs: _exact_rate(τ, ex)
    # initial step: a small fraction of the time τ needs to move by 1/λ+ and of 1/|∂G/∂τ|
    dgd = c * 2.0 * lp * (abs(fc) + abs(lam)) + 1e-300
    h = 0.01 / (lp * abs(k1) + dgd)
    t = 0.0
    steps = 0
    atol = rtol / lp
    j = np.int64(0)  # not a literal 0: _exact_tail would compile once for it and once for int64
    while j < nt:
        tk = times[j]
        if not frozen and abs(fc - lam) <= thr:
            _exact_tail(times, j, t, tau, c, lam, lp, lm, ap, bp, am, bm, out)
            return steps
        while not frozen and t < tk and abs(fc - lam) > thr:
            if steps >= MAX_STEPS:
                for jj in range(j, nt):
                    out[jj] = np.nan
                return -1
            hs = min(h, tk - t)
            k2 = _exact_rate(tau + hs * _A21 * k1, ex)
            k3 = _exact_rate(tau + hs * (_A31 * k1 + _A32 * k2), ex)
            k4 = _exact_rate(tau + hs * (_A41 * k1 + _A42 * k2 + _A43 * k3), ex)
            k5 = _exact_rate(tau + hs * (_A51 * k1 + _A52 * k2 + _A53 * k3 + _A54 * k4), ex)
            k6 = _exact_rate(
                tau + hs * (_A61 * k1 + _A62 * k2 + _A63 * k3 + _A64 * k4 + _A65 * k5), ex
            )
            tn = tau + hs * (_B1 * k1 + _B3 * k3 + _B4 * k4 + _B5 * k5 + _B6 * k6)
            fn = _exact_f(tn, lp, lm, ap, bp, am, bm)
            k7 = c * (fn - lam)
            err = hs * abs(_E1 * k1 + _E3 * k3 + _E4 * k4 + _E5 * k5 + _E6 * k6 + _E7 * k7)
            sc = atol + rtol * max(abs(tau), abs(tn))
            q = err / sc
            steps += 1
            if q <= 1.0:
                t = tk if hs == tk - t else t + hs
                tau = tn
                fc = fn
                k1 = k7
                fac = 5.0 if q == 0.0 else min(5.0, max(0.2, 0.9 * q**-0.2))
                if hs == h or fac < 1.0:
                    h = hs * fac
            else:
                h = hs * max(0.2, 0.9 * q**-0.2)
        if frozen or t >= tk:
            out[j] = fc
            j += 1
        elif not abs(fc - lam) <= thr:
            # neither at t_k nor converged: F or the threshold is NaN (parameters far outside
            # float range, e.g. Λ = 1e300 or ψ = 1e-300); without this the loop never ends
            for jj in range(j, nt):
                out[jj] = np.nan
            return -1
    return steps


@njit(**SERIAL)
def _exact_tail(times, j0, t1, tau1, c, lam, lp, lm, ap, bp, am, bm, out):
    """Linearised approach to equilibrium from (t1, τ1) for the outputs j ≥ j0 (see exact_curve)."""
    ts = tau1
    for _ in range(6):  # Newton on F(τ) = Λ: quadratic from |F − Λ| ≤ 1e-7
        ts = ts - (_exact_f(ts, lp, lm, ap, bp, am, bm) - lam) / _exact_df(
            ts, lp, lm, ap, bp, am, bm
        )
    mu = c * _exact_df(ts, lp, lm, ap, bp, am, bm)
    for j in range(j0, times.shape[0]):
        tau = ts + (tau1 - ts) * math.exp(mu * (times[j] - t1))
        out[j] = _exact_f(tau, lp, lm, ap, bp, am, bm)
