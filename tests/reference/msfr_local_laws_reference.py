"""Naive numpy local exponents of MSFR task families, typed in from docs/task-tables.md and
docs/theory.md (imports no fastdyn code).

Every task's P(s), Λ_s, ψ_s is a full array; the unlearned tail T(s) = Σ_(s'>s) P Λ²/2 is a
reversed cumulative sum (smallest terms first); t_s = ln(Λ_s/f0(0) − 1) / (2 P κ_s Λ_s) with
κ_s = ψ_s (1 + Λ_s²), f0(0) = κ_s σ0² (0 where Λ_s ≤ 2 f0(0), ∞ where P = 0). A task emerges when
0 < t_s < ∞. Local slopes are least-squares fits of the logs against ln s at up to 96 log-spaced
tasks from the first to the last emerging task of the window, keeping the emerging ones.
"""

from __future__ import annotations

import numpy as np


def family(n, *, alpha=2.0, frequency_law="power", frequency_decay=100.0, strength_law="power",
           strength0=1.0, gamma=0.0, strength_decay=100.0, strength_break=100.0, gamma2=1.0,
           psi0=100.0, beta=0.0, psi_min=1):  # fmt: skip
    """(P, Λ, ψ) of tasks s = 1..n as full float arrays (no lognormal: it needs fastdyn's RNG)."""
    s = np.arange(1, n + 1, dtype=float)
    w = s**-alpha if frequency_law == "power" else np.exp(-(s - 1) / frequency_decay)
    if strength_law == "power":
        lam = strength0 * s**-gamma
    elif strength_law == "exponential":
        lam = strength0 * np.exp(-(s - 1) / strength_decay)
    else:  # broken-power, continuous at the break
        lam = strength0 * np.where(
            s <= strength_break, s**-gamma, strength_break ** (gamma2 - gamma) * s**-gamma2
        )
    psi = np.maximum(psi_min, np.floor(psi0 * s**-beta + 0.5))
    return w / w.sum(), lam, psi


def emergence_times(P, lam, psi, sigma0):
    """t_s for every task (0: starts at or past half-rise; inf: never trained)."""
    kappa = psi * (1 + lam**2)
    f00 = kappa * sigma0**2
    ts = np.zeros_like(lam)
    up = lam > 2 * f00
    ts[up] = np.log(lam[up] / f00[up] - 1) / (2 * P[up] * kappa[up] * lam[up])
    ts[P == 0] = np.inf
    return ts


def tail(P, lam):
    """T(s) = Σ_(s'>s) P Λ²/2 for s = 1..n (index s − 1)."""
    terms = 0.5 * P * lam**2
    after = np.cumsum(terms[::-1])[::-1]  # after[i] = Σ_(j ≥ i)
    return np.append(after[1:], 0.0)


def learned(ts, t, strict=False):
    """#{s : 0 < t_s ≤ t} (or < t with ``strict``)."""
    return int(np.sum((ts > 0) & ((ts < t) if strict else (ts <= t))))


def local_exponents(P, lam, psi, s_lo, s_hi, sigma0, n_samples=96):
    """Local slopes over the emerging tasks of s_lo..s_hi: ``first``, ``last``, ``n_emerging``,
    ``eta_w`` (−slope of ln T), ``kappa_w`` (slope of ln t_s), ``time`` = eta_w / kappa_w."""
    ts = emergence_times(P, lam, psi, sigma0)
    s_all = np.arange(1, P.size + 1)
    win = (s_all >= s_lo) & (s_all <= s_hi)
    em = win & (ts > 0) & np.isfinite(ts)
    first, last = int(s_all[em][0]), int(s_all[em][-1])
    s = np.unique(np.round(np.geomspace(first, last, n_samples)).astype(int))
    s = s[(ts[s - 1] > 0) & np.isfinite(ts[s - 1])]
    x = np.log(s)
    T = tail(P, lam)[s - 1]
    eta = -np.polyfit(x, np.log(T), 1)[0]
    kappa = np.polyfit(x, np.log(ts[s - 1]), 1)[0]
    return {"first": first, "last": last, "n_emerging": int(em.sum()), "eta_w": eta,
            "kappa_w": kappa, "time": eta / kappa}  # fmt: skip
