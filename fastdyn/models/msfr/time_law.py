"""The time law an MSFR config predicts over a window of times: :func:`time_law`.

Three answers (docs/theory.md):

- ``"power"``: P(s) ∝ s^-α, Λ_s = Λ0 s^-γ, ψ_s ∝ s^-β (the built-in task laws): p = η/κ_t with
  η = α + 2γ − 1 and κ_t the regime's (α + β + γ for Λ_s ≪ 1, α + β + 3γ for Λ_s ≫ 1), the regime
  that of the tasks that emerge inside the window (mixed: the nearer one, said so);
- ``"local"``: a task table or a named family (``task.table``, ``task.frequency_law``,
  ``task.strength_law``): the local law p = η_w/κ_w over the tasks that emerge inside the window,
  s_lo = s_c(t_lo) … s_hi = s_c(t_hi), as ``fastdyn theory exponents --config`` computes it
  (:func:`fastdyn.models.msfr.local_laws.local_laws`: η_w the slope of the unlearned tail
  T(s) = Σ_(s'>s) P Λ²/2, κ_w that of the half-rise times t_s); when the window's halves give
  time exponents more than 10 % apart there is no single power law and p is the window's tangent;
- ``"none"``: no law applies (outside α + 2γ > 1, fewer than two tasks emerge inside the window,
  a table that cannot be read here); ``text`` says why.

The emergence times are those of balanced small initialisation at the expected frequencies P(s)
(spec of the closed form, docs/theory.md), as for the power laws.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .._spec import NoLaw, Theory
from .regime_laws import _Stored, abg, emergence, regime_theory, strength, task_law_name

__all__ = ["TimeLaw", "time_law", "task_law_name", "stored_problem"]

_REGIME = {"small": "Λ_s ≪ 1", "large": "Λ_s ≫ 1",
           "mixed": "mixed: Λ_s neither all ≤ 1/2 nor all ≥ 2"}  # fmt: skip


@dataclass(frozen=True)
class TimeLaw:
    """The time exponent p (L ∝ t^-p) a config predicts over a window of times.

    ``kind``: "power" (the regime's closed form), "local" (a table's or family's local law) or
    "none" (``exponent`` NaN; ``text`` says why). ``regime``: "small", "large", "mixed" or "".
    ``source``: the formula with its numbers, one line; ``text``: which tasks emerge in the window
    and what that makes of the law, one line. ``s_lo`` … ``s_hi``: those tasks (0, 0 if unknown).
    ``single``: one power law holds across the window (power: not mixed; local: the time
    exponents of the window's halves agree within 10 %)."""

    kind: str
    exponent: float
    regime: str
    source: str
    text: str
    s_lo: int = 0
    s_hi: int = 0
    single: bool = False

    def theory(self) -> Theory | NoLaw:
        """The :class:`~fastdyn.models.Theory` shown beside a fit, or the :class:`NoLaw` why."""
        if self.kind == "none":
            return NoLaw(self.text)
        return Theory(self.exponent, self.source, None, self.regime, self.text)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _none(text: str) -> TimeLaw:
    return TimeLaw("none", math.nan, "", "", text)


def time_law(
    config: Mapping[str, Any], window: tuple[float, float], n_represented: int | None = None
) -> TimeLaw:
    """The time law the MSFR ``config`` (a stored config: ``run.config``, nested dicts) predicts
    for a fit of its loss over times ``window`` = (t_lo, t_hi) (module docstring).

    ``n_represented``: the run's resolved model size D (its ``n_represented`` attribute); default
    from ``task.model_size`` and ``task.n_tasks``. Never raises for a config it cannot read: the
    answer is then kind "none" saying why."""
    t_lo, t_hi = (float(v) for v in window)
    name = task_law_name(config)
    if name is not None:
        return _local(config, name, t_lo, t_hi, n_represented)
    return _power(_Stored(config, n_represented), t_lo, t_hi)


def _power(run: _Stored, t_lo: float, t_hi: float) -> TimeLaw:
    from . import scaling

    law = abg(run)
    if law is None:
        return _none("the stored config has no task law (task.alpha): no law computed")
    try:
        scaling.exponents(*law)
    except ValueError as e:
        return _none(f"no closed-form law: {e}")
    wr = scaling.window_regime(t_lo, t_hi, emergence(run), *strength(run))
    th = regime_theory(run, "time", wr, "emerge in the window")
    if not isinstance(th, Theory):  # this regime's time law does not exist (κ_t ≤ 0)
        try:
            scaling.exponents(*law, regime=wr.law)
        except ValueError as e:
            return _none(f"no closed-form law for the tasks of this window: {e}")
        return _none("no closed-form law for the tasks of this window")
    return TimeLaw("power", th.exponent, th.regime, th.source, th.regime_text, wr.s_lo, wr.s_hi,
                   wr.regime != "mixed")  # fmt: skip


def _local(
    config: Mapping[str, Any], name: str, t_lo: float, t_hi: float, n_represented: int | None
) -> TimeLaw:
    from .local_laws import CURVED, local_laws, window_tasks

    try:
        prob, sigma0 = stored_problem(config)
    except ValueError as e:
        return _none(f"{name}: the tasks cannot be read here ({e}); no law computed")
    D = prob.d if n_represented is None else int(n_represented)
    s_lo, s_hi = window_tasks(prob, sigma0, t_lo, t_hi, upto=D)
    if s_hi - s_lo < 1:
        some = "one task emerges" if s_hi == s_lo else "no task emerges"
        return _none(f"{name}: {some} inside t = {t_lo:.4g} … {t_hi:.4g} (a local law needs two): "
                     "no law applies to this window")  # fmt: skip
    try:
        ll = local_laws(prob, s_lo, s_hi, sigma0)
    except ValueError as e:
        return _none(f"{name}: {e}")
    em = ll.emerging
    tasks = (f"tasks s = {ll.s_lo} … {ll.s_hi} emerge in the window"
             if em.n == em.s_hi - em.s_lo + 1 else em.text)  # fmt: skip
    p0, p1 = ll.halves["time"]
    single = abs(p0 - p1) <= CURVED * max(abs(p0), abs(p1))
    shape = (f"one time law across the window (its halves give p = {p0:.4g} and {p1:.4g})" if single
             else f"no single power law: the local exponent goes from {p0:.4g} to {p1:.4g} across "
                  "the window, p is its tangent")  # fmt: skip
    text = f"{tasks}, Λ_s = {ll.lam_lo:.3g} … {ll.lam_hi:.3g} ({_REGIME[ll.regime]}); {shape}"
    source = (f"local law of {name} over the window (docs/theory.md; fastdyn theory exponents "
              f"--config): eta_w/kappa_w = {ll.eta_w:.4g}/{ll.kappa_w:.4g}")  # fmt: skip
    return TimeLaw("local", ll.time, ll.regime, source, text, ll.s_lo, ll.s_hi, single)


def stored_problem(config: Mapping[str, Any]) -> tuple[Any, float]:
    """(the :class:`~fastdyn.models.msfr.problem.MsfrProblem` of a stored config, its σ0); ValueError
    with the first line of the reason when the config or its table cannot be read here."""
    key = json.dumps(_plain(config), sort_keys=True, default=str)
    return _problem(key)


@lru_cache(maxsize=4)
def _problem(key: str) -> tuple[Any, float]:
    from ...config.load import from_dict
    from ...config.schema import ConfigError
    from .problem import MsfrProblem

    try:
        cfg = from_dict(json.loads(key))
        return MsfrProblem(cfg.task, cfg.init, cfg.seed), float(cfg.init.scale)
    except (ConfigError, OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None


def _plain(node: Any) -> Any:
    """Nested mappings → dicts (a stored config as ``from_dict`` takes it)."""
    if isinstance(node, Mapping):
        return {k: _plain(v) for k, v in node.items()}
    return node
