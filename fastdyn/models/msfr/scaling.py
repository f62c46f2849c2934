"""MSFR scaling-law theory (spec msfr.md sections 4 and 6): exponents, prefactors, task cutoff.

Exponents (N_s -> infinity, small balanced init, logs ignored, valid for alpha + 2 gamma > 1),
with eta = alpha + 2 gamma - 1, all as L ∝ x^-p:

    time t          p = eta / kappa_t
    model size D    p = eta
    data N          p = eta / alpha
    compute C = tD  p = eta / (kappa_t + 1),   and D*(C) ∝ C^(+1 / (kappa_t + 1))

Regimes (derivation, docs/theory.md). Task s emerges at t_s = ln(Λ_s/f0(0) - 1) / (2 a_s Λ_s)
with a_s Λ_s = P(s) ψ_s (1 + Λ_s²) Λ_s ∝ s^-(alpha+beta+gamma) (1 + Λ_s²). The loss at t is the
tail of the unlearned tasks, L ≈ sum_{s > s_c(t)} P(s) Λ_s² / 2 ∝ s_c^-eta, and s_c(t) inverts
t_s ∝ s^kappa_t:

    Λ_s ≪ 1  (1 + Λ_s² ≈ 1):    kappa_t = alpha + beta + gamma
    Λ_s ≫ 1  (1 + Λ_s² ≈ Λ_s²): kappa_t = alpha + beta + 3 gamma

The model-size and data laws do not involve the rate, so they are the same in both regimes; the
compute law (D* ≈ s_c(t), C = t D* ∝ D*^(kappa_t + 1)) takes the regime's kappa_t. Λ_s = 1 at the
crossover s× = Λ0^(1/gamma); a task counts as Λ_s ≫ 1 when Λ_s ≥ 2 and Λ_s ≪ 1 when Λ_s ≤ 1/2
(1 + Λ_s² within 25 % of Λ_s², resp. of 1: the local kappa_t lies within 0.4 |gamma| of the law).
At gamma = 0 both regimes give the same laws.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import special

__all__ = [
    "Exponents",
    "exponents",
    "REGIMES",
    "REGIME_NAMES",
    "regime_exponents",
    "crossover",
    "regime_of",
    "window_regime",
    "WindowRegime",
    "normaliser",
    "loss_vs_model_size",
    "loss_vs_data",
    "emergence_times",
    "learned_task_cutoff",
    "cutoff_time",
]


@dataclass(frozen=True)
class Exponents:
    """Theory exponents; loss exponents are p in L ∝ x^-p, ``d_star`` is q in D* ∝ C^+q.

    ``regime`` is "small" (Λ_s ≪ 1) or "large" (Λ_s ≫ 1); ``kappa_t`` is that regime's."""

    alpha: float
    beta: float
    gamma: float
    eta: float
    kappa_t: float
    time: float
    model_size: float
    data: float
    compute: float
    d_star: float
    regime: str = "small"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _real(name: str, v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {name}={v!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {name}={v!r}")
    return f


def exponents(
    alpha: float, beta: float = 0.0, gamma: float = 0.0, regime: str = "small"
) -> Exponents:
    """Scaling exponents of spec section 6 in ``regime`` "small" (Λ_s ≪ 1, kappa_t = alpha +
    beta + gamma, the default) or "large" (Λ_s ≫ 1, kappa_t = alpha + beta + 3 gamma).

    Raises ValueError unless alpha > 0 and alpha + 2 gamma > 1 (else the tail loss diverges) and
    kappa_t > 0 (else the time law is undefined).
    """
    a, b, g = _real("alpha", alpha), _real("beta", beta), _real("gamma", gamma)
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {', '.join(REGIMES)}, got {regime!r}")
    if a <= 0:
        raise ValueError(f"alpha must be > 0, got alpha={a:g}")
    eta = a + 2 * g - 1
    if eta <= 0:
        raise ValueError(
            f"the scaling laws need alpha + 2*gamma > 1, got alpha + 2*gamma = {a + 2 * g:g}"
        )
    kt = a + b + (3 * g if regime == "large" else g)
    if kt <= 0:
        expr = "alpha + beta + 3*gamma" if regime == "large" else "alpha + beta + gamma"
        raise ValueError(
            f"the time law needs kappa_t = {expr} > 0 ({REGIME_NAMES[regime]} regime), got {kt:g}"
        )
    return Exponents(a, b, g, eta, kt, eta / kt, eta, eta / a, eta / (kt + 1), 1 / (kt + 1), regime)


#: regime keys and their names: "small" is Λ_s ≪ 1, "large" is Λ_s ≫ 1
REGIMES = ("small", "large")
REGIME_NAMES = {"small": "Λ_s ≪ 1", "large": "Λ_s ≫ 1"}
#: Λ_s ≥ LARGE_AT counts as Λ_s ≫ 1, Λ_s ≤ 1 / LARGE_AT as Λ_s ≪ 1 (module docstring)
LARGE_AT = 2.0


def regime_exponents(alpha: float, beta: float = 0.0, gamma: float = 0.0) -> dict[str, Any]:
    """Both regimes' :class:`Exponents`: ``{"small": ..., "large": ... or the ValueError's text}``
    (the large regime's time law may not exist where the small one does). Raises the small
    regime's ValueError."""
    out: dict[str, Any] = {"small": exponents(alpha, beta, gamma, "small")}
    try:
        out["large"] = exponents(alpha, beta, gamma, "large")
    except ValueError as e:
        out["large"] = str(e)
    return out


def crossover(strength0: float, gamma: float) -> float | None:
    """s× = Λ0^(1/gamma), where Λ_s = Λ0 s^-gamma equals 1 (None for gamma = 0: no crossover)."""
    g = _real("gamma", gamma)
    if g == 0:
        return None
    with np.errstate(over="ignore"):
        return float(np.float64(_real("strength0", strength0)) ** (1.0 / g))


def regime_of(lam_lo: float, lam_hi: float) -> str:
    """ "large", "small" or "mixed" for tasks whose Λ_s spans [lam_lo, lam_hi]."""
    if lam_lo >= LARGE_AT:
        return "large"
    if lam_hi <= 1.0 / LARGE_AT:
        return "small"
    return "mixed"


@dataclass(frozen=True)
class WindowRegime:
    """The tasks that emerge inside a time window and their regime.

    ``regime`` is "large", "small" or "mixed"; ``law`` the regime whose laws apply ("mixed": the
    one at the window's middle emerging task); ``s_lo..s_hi`` the tasks with t_s in the window
    (or the one at the cutoff s_c when none does), ``lam_lo..lam_hi`` their Λ_s; ``kappa_w`` the
    least-squares slope of ln t_s against ln s over them (logs included; nan for one task).
    """

    regime: str
    law: str
    s_lo: int
    s_hi: int
    lam_lo: float
    lam_hi: float
    kappa_w: float
    n_emerging: int


def window_regime(
    t_lo: float, t_hi: float, ts: np.ndarray, strength0: float, gamma: float
) -> WindowRegime:
    """Regime of the tasks emerging in [t_lo, t_hi], given ``ts`` = :func:`emergence_times`
    (index s - 1) of the represented tasks."""
    ts = np.asarray(ts, dtype=float)
    s_all = np.arange(1, ts.size + 1, dtype=float)
    m = (ts >= t_lo) & (ts <= t_hi) & np.isfinite(ts)
    if not m.any():  # none emerges in the window: the task at the cutoff s_c(t_hi)
        k = int(np.sum(ts <= t_hi))
        m = s_all == float(min(max(k, 1), ts.size))
    s = s_all[m]
    lam = strength0 * s**-gamma
    lam_lo, lam_hi = float(lam.min()), float(lam.max())
    kappa_w = math.nan
    if s.size >= 2 and s[-1] > s[0] and np.all(ts[m] > 0):
        kappa_w = float(np.polyfit(np.log(s), np.log(ts[m]), 1)[0])
    regime = regime_of(lam_lo, lam_hi)
    if regime == "mixed":
        mid = float(np.exp(0.5 * (np.log(s[0]) + np.log(s[-1]))))
        law = "large" if strength0 * mid**-gamma >= 1.0 else "small"
    else:
        law = regime
    return WindowRegime(regime, law, int(s[0]), int(s[-1]), lam_lo, lam_hi, kappa_w, int(m.sum()))


def normaliser(alpha: float, n_tasks: float = math.inf) -> float:
    """Z = sum_{s <= n_tasks} s^-alpha (the Riemann zeta(alpha) for n_tasks = inf, alpha > 1)."""
    a = _real("alpha", alpha)
    if math.isinf(n_tasks):
        if a <= 1:
            raise ValueError(f"Z diverges for n_tasks = inf unless alpha > 1, got alpha={a:g}")
        return float(special.zeta(a))
    n = int(n_tasks)
    if n < 1 or n != n_tasks:
        raise ValueError(f"n_tasks must be a positive integer or inf, got n_tasks={n_tasks!r}")
    if n <= 100_000 or a <= 1:
        return float(np.sum(np.arange(1, n + 1, dtype=float) ** -a))
    return float(special.zeta(a) - special.zeta(a, n + 1))


def loss_vs_model_size(
    D: Any, alpha: float, gamma: float = 0.0, strength0: float = 1.0, n_tasks: float = math.inf
) -> np.ndarray:
    """L(D) ≈ Λ0² D^-eta / (2 Z eta) (the unrepresented tail sum_{s>D} P(s) Λ_s² / 2)."""
    e = exponents(alpha, 0.0, gamma).eta
    Z = normaliser(alpha, n_tasks)
    return strength0**2 * np.asarray(D, dtype=float) ** -e / (2 * Z * e)


def loss_vs_data(
    N: Any, alpha: float, gamma: float = 0.0, strength0: float = 1.0, n_tasks: float = math.inf
) -> np.ndarray:
    """L(N) ≈ Λ0² Γ(eta/alpha) (N/Z)^(-eta/alpha) / (2 Z alpha) (tasks never sampled, t -> inf)."""
    ex = exponents(alpha, 0.0, gamma)
    Z = normaliser(alpha, n_tasks)
    N = np.asarray(N, dtype=float)
    return strength0**2 * special.gamma(ex.data) * (N / Z) ** (-ex.data) / (2 * Z * ex.alpha)


def emergence_times(
    n_tasks: int = 10_000,
    alpha: float = 2.0,
    beta: float = 0.0,
    gamma: float = 0.0,
    strength0: float = 1.0,
    psi0: float = 100.0,
    psi_min: int = 1,
    init_scale: float = 1e-3,
    frequencies: Any = None,
) -> np.ndarray:
    """Half-rise times t_s = ln(Λ_s / f0(0) - 1) / (2 a_s Λ_s), s = 1..n_tasks (spec section 4).

    Λ_s = Λ0 s^-gamma, ψ_s = max(psi_min, round(ψ0 s^-beta)) (round half up), κ_s = ψ_s (1+Λ_s²),
    f0(0) = κ_s σ0², a_s = P(s) κ_s with P(s) = s^-alpha / Z, or ``frequencies`` (#_s / N for
    finite data; a task with frequency 0 never emerges: t_s = inf). A task that starts at or past
    half-rise (f0(0) >= Λ_s / 2) gets t_s = 0.
    """
    n = int(n_tasks)
    if n < 1 or n != n_tasks:
        raise ValueError(f"n_tasks must be a positive integer, got n_tasks={n_tasks!r}")
    for name, v in (("strength0", strength0), ("psi0", psi0), ("init_scale", init_scale)):
        if not _real(name, v) > 0:
            raise ValueError(f"{name} must be > 0, got {name}={v!r}")
    s = np.arange(1, n + 1, dtype=float)
    lam = strength0 * s**-gamma
    psi = np.maximum(psi_min, np.floor(psi0 * s**-beta + 0.5))
    kappa = psi * (1 + lam**2)
    if frequencies is None:
        P = s**-alpha
        P /= P.sum()
    else:
        P = np.asarray(frequencies, dtype=float)
        if P.shape != (n,) or np.any(P < 0) or not np.all(np.isfinite(P)):
            raise ValueError(f"frequencies must be {n} finite values >= 0")
    f00 = kappa * init_scale**2
    with np.errstate(divide="ignore", invalid="ignore"):
        arg = lam / f00 - 1.0
        ts = np.where(arg > 1.0, np.log(np.where(arg > 1.0, arg, 2.0)), 0.0) / (2 * P * kappa * lam)
    ts = np.where(P > 0, ts, np.inf)
    return ts


def learned_task_cutoff(t: Any, **model: Any) -> np.ndarray:
    """s_c(t) = #{s : t_s <= t}, the number of tasks past half-rise at time t (keywords as in
    :func:`emergence_times`)."""
    ts = np.sort(emergence_times(**model))
    return np.searchsorted(ts, np.asarray(t, dtype=float), side="right")


def cutoff_time(fraction: float = 1.0, **model: Any) -> float:
    """Earliest t with s_c(t) >= fraction * n_tasks (inf if never): where a fit window must end."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got fraction={fraction!r}")
    ts = np.sort(emergence_times(**model))
    k = max(int(math.ceil(fraction * ts.size)), 1)
    return float(ts[k - 1])
