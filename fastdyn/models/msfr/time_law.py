"""Which time law an MSFR run's own config predicts over a fitted window (L ∝ t^-p).

- power laws (P ∝ s^-α, Λ_s = Λ0 s^-γ, ψ_s ∝ s^-β): the law of the regime of the tasks that emerge
  inside the window, p = η/κ_t with η = α + 2γ − 1 and κ_t = α + β + γ (Λ_s ≪ 1) or α + β + 3γ
  (Λ_s ≫ 1) (docs/theory.md; :meth:`MsfrScaling.time_theory`);
- a task table or a named family: the local law p = η_w/κ_w over the tasks that emerge inside the
  window (:func:`local_laws.local_laws`, as ``fastdyn theory exponents --config`` computes it);
- otherwise (α + 2γ ≤ 1, κ_t ≤ 0, a table that cannot be read): no law, and why.

Returned as a plain dict (``exponent``: float or None, ``kind``: "regime law" | "local law" |
"none", ``regime``: "small" | "large" | "mixed" | "equal" (every task has the same Λ_s: both laws
agree) | "", ``text``: one line, ``tasks``: (s_lo, s_hi) or None, ``lam``: (Λ_lo, Λ_hi) or None),
read by :func:`fastdyn.analysis.predicted_law.predicted_time_law`.
"""

from __future__ import annotations

import math
from typing import Any

from .._spec import stored_value
from . import scaling

__all__ = ["time_law"]

_NAMES = {"small": "Λ_s ≪ 1", "large": "Λ_s ≫ 1"}


def _law(exponent, kind, regime, text, tasks=None, lam=None) -> dict[str, Any]:
    return {"exponent": exponent, "kind": kind, "regime": regime, "text": text, "tasks": tasks,
            "lam": lam}  # fmt: skip


def _none(why: str) -> dict[str, Any]:
    return _law(None, "none", "", f"no law applies: {why}")


def _is_family(run: Any) -> bool:
    laws = (stored_value(run, f"task.{k}_law", "power") for k in ("frequency", "strength"))
    return stored_value(run, "task.table") is not None or any(v != "power" for v in laws)


def time_law(laws: Any, run: Any, window: tuple[float, float]) -> dict[str, Any]:
    """The time law ``run``'s stored config predicts over the fitted ``window`` = (t_lo, t_hi);
    ``laws`` is the :class:`~fastdyn.models.msfr.fit_laws.MsfrScaling`."""
    if _is_family(run):
        return _local(run, window)
    return _regime(laws, run, window)


def _regime(laws: Any, run: Any, window: tuple[float, float]) -> dict[str, Any]:
    raw = [stored_value(run, f"task.{k}", d) for k, d in (("alpha", None), ("beta", 0.0),
                                                          ("gamma", 0.0))]  # fmt: skip
    if raw[0] is None:
        return _none("the config has no task.alpha")
    try:
        a, b, g = (float(v) for v in raw)
        scaling.exponents(a, b, g)
    except (TypeError, ValueError) as e:
        return _none(str(e))
    wr = laws.window_regime(run, *window)
    th = laws.time_theory(run, window)
    if th is None or wr is None:
        return _none(f"the {_NAMES[wr.law] if wr else ''} time law needs κ_t > 0 (α + β + 3γ = "
                     f"{a + b + 3 * g:g})")  # fmt: skip
    equal = wr.lam_hi <= wr.lam_lo * (1 + 1e-12)
    regime = "equal" if equal else wr.regime
    kappa = "α+β+3γ" if wr.law == "large" else "α+β+γ"
    text = f"η/κ_t = (α+2γ−1)/({kappa}) with α={a:g}, β={b:g}, γ={g:g}"
    if regime == "mixed":
        text += f" (mixed window: the {_NAMES[wr.law]} law at its middle task)"
    return _law(th.exponent, "regime law", regime, text, (wr.s_lo, wr.s_hi), (wr.lam_lo, wr.lam_hi))


def _local(run: Any, window: tuple[float, float]) -> dict[str, Any]:
    """η_w/κ_w over the tasks emerging in the window (counted with the closed-form t_s)."""
    from ...config.load import from_dict
    from ...config.schema import ConfigError
    from ...problems.msfr import MsfrProblem
    from .local_laws import local_laws, tail_and_cutoff

    try:
        cfg = from_dict(dict(run.config))
        prob = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    except (ConfigError, OSError, ValueError) as e:
        return _none(f"cannot rebuild the task distribution ({str(e).splitlines()[0]})")
    scale = float(cfg.init.scale)
    blk, s_lo = tail_and_cutoff(prob, scale, window[0])
    _, s_hi = tail_and_cutoff(prob, scale, window[1])
    d = min(int(prob.d), prob.n_tasks)
    s_lo, s_hi = max(1, min(s_lo, d - 1)), min(max(s_hi, 2), d)
    if not s_lo < s_hi:
        return _none(f"fewer than two tasks emerge in the window (tasks {s_lo}..{s_hi})")
    ll = local_laws(prob, s_lo, s_hi, scale, blk=blk)
    if not (math.isfinite(ll.time) and ll.kappa_w > 0):
        return _none(f"no local law over tasks {s_lo}..{s_hi} (κ_w = {ll.kappa_w:.3g})")
    equal = ll.lam_hi <= ll.lam_lo * (1 + 1e-12)
    text = f"local η_w/κ_w = {ll.eta_w:.4g}/{ll.kappa_w:.4g} over tasks {ll.s_lo}..{ll.s_hi}"
    if not ll.power_law:
        text += " (no single power law there: the window's tangent)"
    return _law(ll.time, "local law", "equal" if equal else ll.regime, text, (ll.s_lo, ll.s_hi),
                (ll.lam_lo, ll.lam_hi))  # fmt: skip
