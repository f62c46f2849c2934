"""The model's scaling law in time, for ``fastdyn fit`` (a :class:`fastdyn.models.ScalingTheory`).

Task s is learned (f_s = K/2, K = 1) at t_s = ln((1 − f0)/f0) / r_s = ln((1 − f0)/f0) s^a / r0,
so by time t the tasks s < s_c(t) = (r0 t / ln((1 − f0)/f0))^(1/a) are learned and the test loss
is the weight of the others, L ≈ Σ_(s > s_c) P(s)/2 ∝ s_c^(1−α) ∝ t^-(α−1)/a (α > 1, a > 0).
With n tasks that holds while s_c ≪ n: L ~ s_c^(1−α) − n^(1−α) is steeper after it, so an
automatic fit window ends where s_c reaches ``fraction`` · n.
"""

from __future__ import annotations

import math
from typing import Any

from fastdyn.models import Cutoff, Theory, stored_value


def learning_time(s: float, r0: float, a: float, f0: float) -> float:
    """t_s = ln((1 − f0)/f0) s^a / r0: when task s reaches half its target."""
    return math.log((1.0 - f0) / f0) * s**a / r0


def _task(run: Any) -> dict[str, float]:
    get = lambda k, d: float(stored_value(run, f"task.{k}", d))  # noqa: E731
    return {"n": get("n_tasks", 3000), "r0": get("r0", 1.0), "a": get("a", 1.0),
            "alpha": get("alpha", 1.5), "f0": get("f0", 1e-3)}  # fmt: skip


class LogisticScaling:
    """L ∝ t^-(α−1)/a before the cutoff (module docstring); no model-size or data scans."""

    resources = ("time",)

    def exponent(self, run: Any, x: str, regime: str = "small") -> Theory | None:
        t = _task(run)
        if x != "time" or t["alpha"] <= 1 or t["a"] <= 0:
            return None
        p = (t["alpha"] - 1) / t["a"]
        return Theory(p, f"logistic: (alpha-1)/a with alpha={t['alpha']:g}, a={t['a']:g}")

    def resource(self, run: Any, x: str) -> float:
        raise ValueError(f"{run.path}: the logistic model has no {x} to scan over")

    def cutoff(self, run: Any, fraction: float) -> Cutoff | None:
        t = _task(run)
        if t["a"] <= 0:
            return None
        s = max(math.ceil(fraction * t["n"]), 1)
        tc = learning_time(s, t["r0"], t["a"], t["f0"])
        return Cutoff(
            tc,
            f"learned-task cutoff t_c = {tc:g}",
            f"t_c = {tc:g}: task s = {s} ({fraction:g} of the {t['n']:g} tasks) is half learned "
            "there; the finite task count steepens the loss after it",
        )

    def time_theory(self, run: Any, window: tuple[float, float]) -> Theory | None:
        return self.exponent(run, "time")

    def frontier_theory(self, runs: Any, model_sizes: Any, notes: list[str]) -> Theory | None:
        return None


SCALING = LogisticScaling()
