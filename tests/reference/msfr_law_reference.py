"""The time law an MSFR config predicts over a time window, typed in from docs/theory.md (numpy
only, nothing from fastdyn): the reference of ``fastdyn validate``'s law column.

Power laws: P(s) = s^-α / Σ s^-α, Λ_s = Λ0 s^-γ, ψ_s = max(1, ⌊ψ0 s^-β + ½⌋), κ_s = ψ_s(1 + Λ_s²),
emergence t_s = ln(Λ_s/(κ_s σ0²) − 1) / (2 P(s) κ_s Λ_s) (0 when Λ_s/(κ_s σ0²) − 1 ≤ 1). The
tasks s ≤ D with t_s inside [t_lo, t_hi] (none: the task at the cutoff s_c(t_hi)) decide the
regime: Λ_s ≥ 2 for all of them → Λ_s ≫ 1, Λ_s ≤ 1/2 for all → Λ_s ≪ 1, else mixed, whose law is
that of its middle task √(s_lo s_hi) (Λ ≥ 1 → Λ_s ≫ 1). The law is p = η/κ_t, η = α + 2γ − 1,
κ_t = α + β + γ (Λ_s ≪ 1) or α + β + 3γ (Λ_s ≫ 1).

Local law (a named family): the tasks s_lo = s_c(t_lo) … s_hi = s_c(t_hi) (s_c(t): the number of
tasks with 0 < t_s ≤ t), sampled at 96 log-spaced task indices; η_w = −slope of ln T(s) against
ln s, T(s) = Σ_{s' > s} P(s') Λ_s'²/2, κ_w = slope of ln t_s against ln s; p = η_w/κ_w.
"""

from __future__ import annotations

import math

import numpy as np


def task_values(n_tasks, alpha, beta, strength, psi0, init_scale):
    """(s, P, Λ, ψ, t_s) of every task; ``strength`` is Λ_s as an array."""
    s = np.arange(1, n_tasks + 1, dtype=float)
    P = s**-alpha / np.sum(s**-alpha)
    lam = np.asarray(strength, float)
    psi = np.maximum(1.0, np.floor(psi0 * s**-beta + 0.5))
    kappa = psi * (1.0 + lam**2)
    arg = lam / (kappa * init_scale**2) - 1.0
    t_s = np.zeros(n_tasks)
    ok = arg > 1.0
    t_s[ok] = np.log(arg[ok]) / (2.0 * P[ok] * kappa[ok] * lam[ok])
    return s, P, lam, psi, t_s


def regime_law(alpha, beta, gamma, strength0, psi0, init_scale, n_tasks, d, t_lo, t_hi):
    """(p, regime, (s_lo, s_hi)) of the power-law config over [t_lo, t_hi]; regime "small",
    "large", "mixed" or "equal" (one Λ for every task)."""
    s0 = np.arange(1, n_tasks + 1, dtype=float)
    s, _, lam, _, t_s = task_values(n_tasks, alpha, beta, strength0 * s0**-gamma, psi0,
                                    init_scale)  # fmt: skip
    s, lam, t_s = s[:d], lam[:d], t_s[:d]
    m = (t_s >= t_lo) & (t_s <= t_hi)
    if not m.any():
        k = min(max(int(np.sum(t_s <= t_hi)), 1), d)
        m = s == k
    lo, hi = lam[m].min(), lam[m].max()
    s_lo, s_hi = int(s[m][0]), int(s[m][-1])
    if lo >= 2.0:
        regime = law = "large"
    elif hi <= 0.5:
        regime = law = "small"
    else:
        regime = "mixed"
        law = "large" if strength0 * math.sqrt(s_lo * s_hi) ** -gamma >= 1.0 else "small"
    if hi <= lo * (1 + 1e-12):
        regime = "equal"
    eta = alpha + 2 * gamma - 1
    kappa_t = alpha + beta + (3 * gamma if law == "large" else gamma)
    return eta / kappa_t, regime, (s_lo, s_hi)


def local_law(alpha, beta, strength, psi0, init_scale, t_lo, t_hi):
    """(p, (s_lo, s_hi)) of the local law of tasks with strengths ``strength`` (Λ_s, s = 1..N),
    over the tasks s_lo … s_hi that emerge inside [t_lo, t_hi] (0 < t_s, t_lo ≤ t_s ≤ t_hi)."""
    n = len(strength)
    s, P, lam, _, t_s = task_values(n, alpha, beta, strength, psi0, init_scale)
    s_lo = int(np.sum((t_s > 0) & (t_s < t_lo))) + 1  # the first task emerging inside
    s_hi = max(int(np.sum((t_s > 0) & (t_s <= t_hi))), 2)
    idx = np.unique(np.round(np.geomspace(s_lo, s_hi, 96)).astype(np.int64))
    tail = np.concatenate([np.cumsum((0.5 * P * lam**2)[::-1])[::-1][1:], [0.0]])  # T(s), s=1..N
    x = np.log(idx.astype(float))
    eta_w = -np.polyfit(x, np.log(tail[idx - 1]), 1)[0]
    kappa_w = np.polyfit(x, np.log(t_s[idx - 1]), 1)[0]
    return eta_w / kappa_w, (s_lo, s_hi)
