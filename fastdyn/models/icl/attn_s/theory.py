"""Population theory of rank-R ATTN_S (docs/theory.md, ICL): the rank-one scalar ODE (paper Eq. 21),
plateau losses, PCR predictors and plateau durations. Time in units of τ."""

from __future__ import annotations

import numpy as np

from ..attn_m.theory import loss_star, pcr_predictor, plateau_losses, shrink

__all__ = [
    "loss_star",
    "pcr_predictor",
    "plateau_losses",
    "rank_one_rhs",
    "rank_one_ode",
    "plateau_duration_s",
    "plateau_steps",
]


def rank_one_rhs(v: float, lam: float, trace: float, N: float, kappa: float = 1.0) -> float:
    """Eq. 21 on the ansatz v = |k| = |q|, k ∥ q ∥ e (eigenvalue λ):
    τ v̇ = κ λ² v² − κ² λ³ (1 + (1 + trΛ/λ)/N) v⁵ (κ = N/ρ; κ = 1 is the paper's equation)."""
    c = 1.0 + (1.0 + trace / lam) / N
    return kappa * lam * lam * v * v - kappa * kappa * lam**3 * c * v**5


def rank_one_ode(
    t: np.ndarray,
    v0: float,
    lam: float,
    trace: float,
    N: float,
    kappa: float = 1.0,
    rtol: float = 1e-12,
    atol: float = 1e-15,
) -> np.ndarray:
    """v(t) solving Eq. 21 from v(0) = v0 (DOP853, rtol 1e-12), on the increasing times ``t``;
    NaN from where the solver stops (a trajectory that blows up: no solution there)."""
    from scipy.integrate import (
        solve_ivp,
    )  # here, not at import: a run that needs no Eq. 21 skips scipy

    t = np.asarray(t, dtype=np.float64)
    sol = solve_ivp(
        lambda _t, y: [rank_one_rhs(y[0], lam, trace, N, kappa)],
        (0.0, float(t[-1])), [v0], method="DOP853", t_eval=t, rtol=rtol, atol=atol,
    )  # fmt: skip
    return _reached(sol, t.size)


def _reached(sol, n: int) -> np.ndarray:
    """The first component of ``sol`` at its ``n`` requested times, NaN where it did not get."""
    out = np.full(n, np.nan)
    y = np.asarray(sol.y, dtype=np.float64)
    if y.ndim == 2 and y.shape[1]:
        out[: y.shape[1]] = y[0]
    return out


def rank_one_fixed_point(lam: float, trace: float, N: float, kappa: float = 1.0) -> float:
    """v* with κλ²v² = κ²λ³ c v⁵: v*³ = 1/(κ λ c)."""
    c = 1.0 + (1.0 + trace / lam) / N
    return float((1.0 / (kappa * lam * c)) ** (1.0 / 3.0))


def plateau_duration_s(lam: float, v0: float, kappa: float = 1.0) -> float:
    """≈ τ/(κ λ² v_0): the blow-up time of τ v̇ = κλ²v² (power law in 1/v_0)."""
    return 1.0 / (kappa * lam * lam * v0)


def plateau_steps(eigvals: np.ndarray, R: int = 1) -> list[int]:
    """The m at which long plateaus occur for rank R: multiples of R (D = 8, R = 2: 0, 2, 4, 6)."""
    D = len(eigvals)
    return [m for m in range(D) if m % R == 0]


__all__ += ["rank_one_fixed_point", "shrink"]


# ---------------------------------------------------------------- Eq. 21 beside a run


def balanced_v0(v: float, sigma: float) -> float:
    """The balanced v_0 (v = |k| = |q|) whose small-weight blow-up time equals that of a head with
    value weight v and aligned key/query component σ = (k_d + sgn(v) q_d)/2 along e_d.

    For small weights (G ≈ κλ² e_d e_dᵀ on this direction) the head obeys τ v̇ = κλ² σ²,
    τ σ̇ = κλ² |v| σ (the anti-aligned part (k_d − sgn(v) q_d)/2 decays), which conserves
    c = v² − σ². The time to blow up from (|v|, σ) is T = ∫_{|v|}^∞ dv/(κλ²(v² − c)):
    T = ln((|v| + √c)/(|v| − √c))/(2√c κλ²) for c > 0, (π/2 − atan(|v|/√−c))/(√−c κλ²) for c < 0,
    1/(κλ²|v|) for c = 0; the balanced head with the same T has v_0 = 1/(κλ² T) (0 if T = ∞),
    which does not depend on κλ²."""
    v0, c = abs(v), v * v - sigma * sigma
    if sigma == 0.0:  # nothing along e_d: never learns it
        return 0.0
    if abs(c) <= 1e-14 * v0 * v0:
        return v0
    rc = np.sqrt(abs(c))
    # c > 0: ln((v0 + √c)/(v0 − √c))/(2√c) with v0 − √c = σ²/(v0 + √c) (no cancellation when σ ≪ v)
    T = np.log((v0 + rc) / abs(sigma)) / rc if c > 0 else (np.pi / 2 - np.arctan(v0 / rc)) / rc
    return float(1.0 / T)


def half_rise_time(v0: float, lam: float, trace: float, N: float, kappa: float = 1.0) -> float:
    """Time for Eq. 21 to carry v from v0 to the half point κv³ = ½ κv*³ (e_dᵀΓe_d at half its
    final value 1/(λc)): ∫_{v0}^{v½} τ dv/(κλ²v² − κ²λ³c v⁵) (∞ for v0 = 0)."""
    from scipy.integrate import quad

    vh = rank_one_fixed_point(lam, trace, N, kappa) * 0.5 ** (1.0 / 3.0)
    if v0 <= 0.0:
        return float("inf")
    if v0 >= vh:
        return 0.0
    return float(quad(lambda x: 1.0 / rank_one_rhs(x, lam, trace, N, kappa), v0, vh, limit=200)[0])


def eq21_chain(
    v: np.ndarray,
    k: np.ndarray,
    q: np.ndarray,
    eigvals: np.ndarray,
    N: float,
    kappa: float = 1.0,
) -> dict[str, np.ndarray]:
    """Eq. 21 for the D plateaus of a rank-one ATTN_S run from its initial heads, one direction at
    a time in decreasing-eigenvalue order (v (H,), k, q (H, D): value weights and key/query
    components in the eigenbasis, model units; ``eigvals`` decreasing).

    Direction d is learned by the unused head with the largest :func:`balanced_v0` at the start
    t_s(d) of its plateau (the half-rise time of direction d−1; t_s(1) = 0), and from t_s(d) on
    that head follows Eq. 21 from v_0 = balanced_v0: e_dᵀΓe_d = κ v(t − t_s)³ (paper units; the
    ansatz Γ = v k qᵀ = v³ e_d e_dᵀ). Its half-rise time is t_½(d) = t_s(d) + the plateau duration
    :func:`half_rise_time`. Between drops the other heads are not at rest: they grow under the
    small-weight flow τ v̇ = kᵀGq, τ k̇ = vGq, τ q̇ = vGk with G = κ Σ λ_e² e_e e_eᵀ over the
    directions e not yet learned (learned ones switched off at their t_½); this is what sets the
    next head's v_0 (e.g. Fig. 3, direction 2: v_0 = 0.024 at t_s, against 0.0062 from the init
    alone, which would put the drop at t = 57 instead of the run's 41).

    The chain does not hold for a direction whose head had passed half-rise before its plateau
    began (duration 0), nor for the direction(s) being learned while that head rose (two heads
    grew on them together: with Fig. 3's heads unrotated, the head of direction 2 rises during
    direction 1's plateau, and direction 1 drops 27 % before its predicted time): both are flagged
    in ``shared``. A head has risen once its balanced v_0 along a direction not yet learned
    reaches that direction's half-rise value v½ (κv½³ = ½ κv*³).

    Returns ``head`` (D,), ``v0`` (D,), ``start`` (D,) = t_s, ``drop`` (D,) = t_½,
    ``duration`` (D,) = t_½ − t_s and ``shared`` (D,) bool."""
    from scipy.integrate import solve_ivp

    lam = np.asarray(eigvals, dtype=np.float64)
    D = lam.size
    trace = float(lam.sum())
    state = {i: np.concatenate([[v[i]], k[i], q[i]]).astype(np.float64) for i in range(len(v))}
    g = kappa * lam * lam
    out = {n: np.zeros(D) for n in ("head", "v0", "start", "drop", "duration")}
    out["shared"] = np.zeros(D, dtype=bool)
    v_half = np.array([rank_one_fixed_point(x, trace, N, kappa) for x in lam]) * 0.5 ** (1 / 3)
    rose: dict[int, int] = {}  # head → the direction during whose plateau it passed half-rise
    t = 0.0

    def small(_t, y, g):
        vv, kk, qq = y[0], y[1 : D + 1], y[D + 1 :]
        return np.concatenate([[kk @ (g * qq)], vv * g * qq, vv * g * kk])

    def big(_t, y, _g):  # leave the small-weight regime: stop there (the head is then frozen)
        return abs(y[0]) - 1.0

    big.terminal = True
    for d in range(D):
        if not state:
            out["head"][d:], out["v0"][d:], out["duration"][d:] = -1, 0.0, np.inf
            out["start"][d:] = out["drop"][d:] = np.inf
            break
        cand = {
            i: balanced_v0(y[0], 0.5 * (y[1 + d] + np.sign(y[0]) * y[1 + D + d]))
            for i, y in state.items()
        }
        i = max(cand, key=cand.get)
        dur = half_rise_time(cand[i], lam[d], trace, N, kappa)
        out["head"][d], out["v0"][d], out["start"][d], out["duration"][d] = i, cand[i], t, dur
        out["drop"][d] = t + dur
        if dur == 0.0:  # risen before its plateau: learned together with the one it rose during
            out["shared"][d] = True
            if i in rose:
                out["shared"][rose[i]] = True
        del state[i]
        if np.isfinite(dur) and dur > 0 and d < D - 1:
            for j, y in state.items():
                sol = solve_ivp(
                    small, (0.0, dur), y, method="DOP853", rtol=1e-10, atol=1e-18, events=big,
                    args=(g.copy(),),
                )  # fmt: skip
                state[j] = y = sol.y[:, -1]
                if j not in rose and any(
                    balanced_v0(y[0], 0.5 * (y[1 + e] + np.sign(y[0]) * y[1 + D + e])) >= v_half[e]
                    for e in range(d + 1, D)
                ):
                    rose[j] = d
        g = g.copy()
        g[d] = 0.0
        t += dur
    return out


def eq21_gamma_eig(
    chain: dict[str, np.ndarray],
    eigvals: np.ndarray,
    N: float,
    time: np.ndarray,
    kappa: float = 1.0,
) -> np.ndarray:
    """e_dᵀΓe_d (paper units) predicted by :func:`eq21_chain` on the increasing ``time`` (T, D):
    κ v³ with v the Eq. 21 trajectory through v(t_s(d)) = v_0(d) — integrated forward from t_s,
    and backward for t < t_s (the balanced head that would be there; → 0 as t → −∞)."""
    from scipy.integrate import solve_ivp

    lam = np.asarray(eigvals, dtype=np.float64)
    time = np.asarray(time, dtype=np.float64)
    trace = float(lam.sum())
    out = np.zeros((time.size, lam.size))
    for d in range(lam.size):
        v0, ts_ = float(chain["v0"][d]), float(chain["start"][d])
        if not (v0 > 0 and np.isfinite(ts_)):
            continue
        after = time >= ts_
        if after.any():
            out[after, d] = rank_one_ode(time[after] - ts_, v0, lam[d], trace, N, kappa) ** 3
        if (~after).any():  # backward: the same equation in reversed time
            back = (ts_ - time[~after])[::-1]
            sol = solve_ivp(
                lambda _s, y, d=d: [-rank_one_rhs(y[0], lam[d], trace, N, kappa)],
                (0.0, float(back[-1])), [v0], method="DOP853", t_eval=back, rtol=1e-12, atol=1e-15,
            )  # fmt: skip
            # v0 above the fixed point has no small-v past (it blows up backward): NaN there
            out[np.flatnonzero(~after)[::-1], d] = _reached(sol, back.size) ** 3
    return kappa * out


__all__ += ["balanced_v0", "half_rise_time", "eq21_chain", "eq21_gamma_eig"]
