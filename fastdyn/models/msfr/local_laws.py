"""Local scaling exponents of any MSFR task distribution (a table, a named family or the power law).

The laws of docs/theory.md need P(s) ∝ s^-α, Λ_s ∝ s^-γ, ψ_s ∝ s^-β. For any other distribution
the same derivation holds *locally*: at time t the tasks s ≤ s_c(t) are learned (t_s ≤ t) and the
loss is the unlearned tail T(s_c) = Σ_{s > s_c} P(s) Λ_s² / 2, so over a window of tasks
[s_lo, s_hi]

    η_w = −d ln T / d ln s      (model-size law: L(D) = T(D) ∝ D^-η_w)
    κ_w =  d ln t_s / d ln s    (t_s the leading-order half-rise time of docs/theory.md, MSFR, logs included)
    α_w = −d ln P / d ln s      (data law: the never-sampled tasks s with N P(s) ≲ 1)

and the implied local laws are L ∝ t^-(η_w/κ_w), D^-η_w, N^-(η_w/α_w), C^-(η_w/(κ_w+1)). The
slopes are least-squares fits of the logs against ln s at log-spaced tasks of the window, all over
the same tasks: those of the window that emerge (0 < t_s < ∞). A task with Λ_s ≤ 2 f0(0) starts at
or past half-rise and never emerges (t_s = 0), one with P(s) = 0 is never trained (t_s = ∞): they
are counted and named (:class:`Emerging`), not fitted. They are
also fitted on the window's lower and upper halves: when those differ (exponential strengths, a
break inside the window) there is no single power law, and the numbers are only the window's
tangent, predicting L between its ends (:attr:`LocalLaws.t_lo` … :attr:`LocalLaws.t_hi`,
:attr:`LocalLaws.loss_lo` … :attr:`LocalLaws.loss_hi`). The regime (Λ_s ≪ 1, ≫ 1 or mixed) is
that of the window's Λ_s, as for the power laws.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ...reduce import BLOCK
from .scaling import exponents, regime_of

#: relative change of a slope between the window's halves above which it is "no single power law"
CURVED = 0.1


@dataclass(frozen=True)
class Emerging:
    """Which tasks of a window s_lo … s_hi emerge (0 < t_s < ∞).

    ``first`` … ``last`` the first and last that do (0 when none), ``n`` how many; ``n_past`` start
    at or past half-rise (Λ_s ≤ 2 f0(0), t_s = 0) and ``n_unseen`` have P(s) = 0 (t_s = ∞)."""

    s_lo: int
    s_hi: int
    first: int
    last: int
    n: int
    n_past: int
    n_unseen: int

    @property
    def text(self) -> str:
        """One line: the tasks that emerge and the ones that do not, with why."""
        win = f"{self.s_lo} … {self.s_hi}"
        if self.n == self.s_hi - self.s_lo + 1:
            return f"all tasks {win} emerge"
        if self.n == 0:
            head = f"no task of {win} emerges"
        elif self.n == self.last - self.first + 1:
            head = f"tasks {self.first} … {self.last} of {win} emerge"
        else:
            head = f"{self.n} of tasks {win} emerge (the first {self.first}, the last {self.last})"
        why = []
        if self.n_past:
            tail = self.n and self.n_past == self.s_hi - self.last
            where = f"tasks {self.last + 1} … {self.s_hi}" if tail else f"{self.n_past} of them"
            why.append(f"{where} start at or past half-rise (Λ_s ≤ 2 f0(0)) and never emerge")
        if self.n_unseen:
            why.append(f"{self.n_unseen} of them have P(s) = 0 and are never trained")
        return "; ".join([head, *why])


def emerging_tasks(
    problem, s_lo: int, s_hi: int, init_scale: float, step: int = 1 << 18
) -> Emerging:
    """The tasks of s_lo … s_hi that emerge (:func:`emergence`), counted in one streamed pass."""
    first = last = n = n_past = n_unseen = 0
    for a in range(s_lo - 1, s_hi, step):
        k = min(step, s_hi - a)
        P = problem.weights(a, k) / problem.z
        lam, psi = problem.lam_psi(a, k)
        ts = emergence(P, lam, psi.astype(float), init_scale)
        em = np.flatnonzero((ts > 0) & np.isfinite(ts))
        if em.size:
            first = first or a + 1 + int(em[0])
            last = a + 1 + int(em[-1])
        n += int(em.size)
        n_past += int(np.sum(ts == 0))
        n_unseen += int(np.sum(~np.isfinite(ts)))
    return Emerging(s_lo, s_hi, first, last, n, n_past, n_unseen)


@dataclass(frozen=True)
class LocalLaws:
    """Local slopes over the emerging tasks s_lo … s_hi of a window and the laws they imply
    (L ∝ x^-p); ``emerging`` says which tasks of the window asked for emerge."""

    s_lo: int
    s_hi: int
    alpha_w: float
    beta_w: float
    gamma_w: float
    eta_w: float
    kappa_w: float
    time: float
    model_size: float
    data: float
    compute: float
    halves: dict  # {"eta_w": (lower, upper), "kappa_w": (...), "time": (...)}
    power_law: bool
    regime: str
    lam_lo: float
    lam_hi: float
    t_lo: float
    t_hi: float
    loss_lo: float
    loss_hi: float
    regime_law: dict | None  # exponents(α_w, β_w, γ_w) in the window's regime, or None
    regime_law_error: str | None
    emerging: Emerging

    def to_dict(self) -> dict:
        d = asdict(self)
        d["emerging"]["text"] = self.emerging.text
        return d


def sample_tasks(s_lo: int, s_hi: int, n: int = 96) -> np.ndarray:
    """Up to ``n`` distinct log-spaced task indices from s_lo to s_hi (both included)."""
    return np.unique(np.round(np.geomspace(s_lo, s_hi, n)).astype(np.int64))


def values_at(problem, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P(s), Λ_s, ψ_s) at the task indices ``s`` (1-based), reading the blocks that hold them."""
    P, lam, psi = (np.empty(s.size) for _ in range(3))
    blocks = (s - 1) // BLOCK
    for b in np.unique(blocks).tolist():
        first = b * BLOCK
        n = min(BLOCK, problem.n_tasks - first)
        w = problem.weights(first, n)
        lk, pk = problem.lam_psi(first, n)
        m = blocks == b
        i = s[m] - 1 - first
        P[m] = w[i] / problem.z
        lam[m] = lk[i]
        psi[m] = pk[i]
    return P, lam, psi


def emergence(P, lam, psi, init_scale: float) -> np.ndarray:
    """t_s = ln(Λ_s/f0(0) − 1) / (2 a_s Λ_s), a_s = P κ_s, κ_s = ψ_s (1 + Λ_s²), f0(0) = κ_s σ0²
    (balanced small init, docs/theory.md, MSFR); 0 for a task that starts past half-rise, inf for P = 0."""
    kappa = psi * (1 + lam**2)
    arg = lam / (kappa * init_scale**2) - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ts = np.where(arg > 1.0, np.log(np.where(arg > 1.0, arg, 2.0)), 0.0) / (2 * P * kappa * lam)
    return np.where(P > 0, ts, np.inf)


def tail_and_cutoff(problem, init_scale: float, t: float | None = None, step: int = 1 << 18):
    """Per-block Σ P Λ²/2 over all tasks (for the tail T(s)) and, given ``t``, the number of tasks
    with 0 < t_s ≤ t (the learned-task cutoff s_c(t); a task with t_s = 0 starts past half-rise
    and never emerges); one streamed pass."""
    nb = -(-problem.n_tasks // BLOCK)
    blk = np.zeros(nb)
    learned = 0
    for a in range(0, problem.n_tasks, step):
        n = min(step, problem.n_tasks - a)
        P = problem.weights(a, n) / problem.z
        lam, psi = problem.lam_psi(a, n)
        blk[a // BLOCK : a // BLOCK + -(-n // BLOCK)] = np.add.reduceat(
            0.5 * P * lam**2, np.arange(0, n, BLOCK)
        )
        if (
            t is not None
        ):  # tasks that start past half-rise (Λ_s ≤ 2 f0(0)) never emerge: not counted
            ts = emergence(P, lam, psi.astype(float), init_scale)
            learned += int(np.sum((ts <= t) & (ts > 0)))
    return blk, learned


def emergence_upto(problem, init_scale: float, upto: int, step: int = 1 << 18) -> np.ndarray:
    """t_s of tasks s = 1 … ``upto`` (index s − 1), computed per chunk."""
    out = np.empty(upto)
    for a in range(0, upto, step):
        k = min(step, upto - a)
        lam, psi = problem.lam_psi(a, k)
        out[a : a + k] = emergence(
            problem.weights(a, k) / problem.z, lam, psi.astype(float), init_scale
        )
    return out


def window_tasks(
    problem,
    init_scale: float,
    t_lo: float,
    t_hi: float,
    upto: int | None = None,
    step: int = 1 << 18,
) -> tuple[int, int]:
    """(s_lo, s_hi) = (s_c(t_lo⁻) + 1, s_c(t_hi)): the learned-task cutoff s_c(t) = #{s ≤ upto :
    0 < t_s ≤ t} just before ``t_lo`` plus one and at ``t_hi``, so that for t_s increasing in s
    the tasks that emerge inside [t_lo, t_hi] are s_lo … s_hi (none when s_hi < s_lo); ``upto``
    the represented tasks D (default all). One streamed pass."""  # fmt: skip
    n = problem.n_tasks if upto is None else min(int(upto), problem.n_tasks)
    below = upto_hi = 0
    for a in range(0, n, step):
        k = min(step, n - a)
        P = problem.weights(a, k) / problem.z
        lam, psi = problem.lam_psi(a, k)
        ts = emergence(P, lam, psi.astype(float), init_scale)
        below += int(np.sum((ts > 0) & (ts < t_lo)))
        upto_hi += int(np.sum((ts > 0) & (ts <= t_hi)))
    return below + 1, upto_hi


def tail_at(problem, blk: np.ndarray, s: np.ndarray) -> np.ndarray:
    """T(s) = Σ_{s' > s} P(s') Λ_s'² / 2 at each task index in ``s``."""
    after = np.concatenate([np.cumsum(blk[::-1])[::-1][1:], [0.0]])  # blocks after block b
    out = np.empty(s.size)
    for j, sj in enumerate(s.tolist()):
        b = (sj - 1) // BLOCK
        first = b * BLOCK
        n = min(BLOCK, problem.n_tasks - first)
        P = problem.weights(first, n) / problem.z
        lam, _ = problem.lam_psi(first, n)
        k = sj - first  # tasks first+1 … sj are ≤ s
        out[j] = after[b] + float(np.sum(0.5 * P[k:] * lam[k:] ** 2))
    return out


def _slope(x, y):
    m = np.isfinite(y)
    if m.sum() < 2 or np.ptp(x[m]) == 0:
        return math.nan
    return float(np.polyfit(x[m], y[m], 1)[0])


def local_laws(
    problem, s_lo: int, s_hi: int, init_scale: float, n: int = 96, blk=None
) -> LocalLaws:
    """The local slopes and laws over the tasks of s_lo … s_hi of ``problem`` (an MsfrProblem)
    that emerge; ValueError when fewer than two do."""
    if not 1 <= s_lo < s_hi <= problem.n_tasks:
        raise ValueError(
            f"the window needs 1 ≤ s_lo < s_hi ≤ n_tasks = {problem.n_tasks}, got {s_lo}:{s_hi}"
        )
    em = emerging_tasks(problem, s_lo, s_hi, init_scale)
    if em.n < 2:
        raise ValueError(f"{em.text}: no local law (it needs two emerging tasks)")
    s = sample_tasks(em.first, em.last, n)
    P, lam, psi = values_at(problem, s)
    ts = emergence(P, lam, psi, init_scale)
    keep = (ts > 0) & np.isfinite(ts)  # every slope over the same (emerging) tasks
    s, P, lam, psi, ts = s[keep], P[keep], lam[keep], psi[keep], ts[keep]
    if s.size < 2:
        raise ValueError(f"{em.text}: fewer than two of its sampled tasks emerge; no local law")
    if blk is None:
        blk, _ = tail_and_cutoff(problem, init_scale)
    T = tail_at(problem, blk, s)
    x = np.log(s.astype(float))
    with np.errstate(divide="ignore"):
        logs = {
            "P": np.log(P),
            "lam": np.log(lam),
            "psi": np.log(psi),
            "T": np.log(T),
            "t": np.log(ts),
        }
    sl = {k: _slope(x, v) for k, v in logs.items()}
    alpha_w, gamma_w, beta_w = -sl["P"], -sl["lam"], -sl["psi"]
    eta_w, kappa_w = -sl["T"], sl["t"]
    mid = 0.5 * (x[0] + x[-1])
    halves = {}
    for name, key, sign in (("eta_w", "T", -1), ("kappa_w", "t", 1)):
        lo, hi = (sign * _slope(x[m], logs[key][m]) for m in (x <= mid, x >= mid))
        halves[name] = (lo, hi)
    halves["time"] = tuple(e / k for e, k in zip(halves["eta_w"], halves["kappa_w"], strict=True))
    power_law = all(abs(a - b) <= CURVED * max(abs(a), abs(b)) for a, b in halves.values())
    regime = regime_of(float(lam.min()), float(lam.max()))
    law = regime
    if regime == "mixed":
        law = "large" if float(np.interp(mid, x, lam)) >= 1.0 else "small"
    try:
        rl, err = exponents(alpha_w, beta_w, gamma_w, law).to_dict(), None
    except ValueError as e:
        rl, err = None, str(e)
    return LocalLaws(
        int(s[0]), int(s[-1]), alpha_w, beta_w, gamma_w, eta_w, kappa_w,
        eta_w / kappa_w, eta_w, eta_w / alpha_w, eta_w / (kappa_w + 1), halves, power_law,
        regime, float(lam.min()), float(lam.max()),
        float(ts.min()), float(ts.max()),
        float(T[0]), float(T[-1]), rl, err, em,
    )  # fmt: skip
