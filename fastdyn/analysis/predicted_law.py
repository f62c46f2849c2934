"""⑥ Which time law a run's own config predicts over a fitted window (L ∝ t^-p): one place.

:func:`predicted_time_law` asks the run's model (its entry's ``scaling``): the ``time_law`` hook
when the model has one (the regime's law, or the local law of a task table or family, or a
statement that none applies), else its ``time_theory``; a model without scaling laws predicts
none.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..h5.reader import Run

__all__ = ["PredictedLaw", "predicted_time_law", "REGIME_LABELS"]

#: short labels of the regimes (docs/theory.md; table cells and figure text)
REGIME_LABELS = {
    "small": "Λ_s ≪ 1",
    "large": "Λ_s ≫ 1",
    "mixed": "mixed",
    "equal": "Λ_s equal",
    "": "—",
}


@dataclass(frozen=True)
class PredictedLaw:
    """The time exponent p a config predicts over a window, or none.

    ``kind``: "regime law", "local law" (a task table or family) or "none"; ``regime``: "small"
    (Λ_s ≪ 1) | "large" (Λ_s ≫ 1) | "mixed" | "equal" (every task has the same Λ_s: both laws
    agree) | ""; ``tasks``: the tasks (s_lo, s_hi) that emerge in the window; ``text``: one line."""

    exponent: float | None
    kind: str
    regime: str
    text: str
    tasks: tuple[int, int] | None = None
    lam: tuple[float, float] | None = None


def no_law(why: str) -> PredictedLaw:
    return PredictedLaw(None, "none", "", f"no law applies: {why}")


def predicted_time_law(run: Run, window: tuple[float, float]) -> PredictedLaw:
    """The time law ``run``'s stored config predicts over the fitted ``window`` = (t_lo, t_hi)."""
    from ..models.registry import get_model

    try:
        laws = get_model(run.model).analysis.scaling
    except KeyError:
        laws = None
    if laws is None or "time" not in laws.resources:
        return no_law(f"model {run.model!r} declares no scaling law")
    hook = getattr(laws, "time_law", None)
    if hook is not None:
        d = hook(run, window)
        return PredictedLaw(d["exponent"], d["kind"], d["regime"], d["text"],
                            d.get("tasks"), d.get("lam"))  # fmt: skip
    th = laws.time_theory(run, window)
    if th is None:
        return no_law("the model's time law does not apply to this config")
    return PredictedLaw(th.exponent, "regime law", th.regime, th.regime_text or th.source)
