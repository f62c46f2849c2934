"""MSFR's scaling laws beside a fit (spec msfr.md §6): the ``ScalingTheory`` hook of its entries.

``fastdyn fit`` and ``fastdyn plot --kind scaling|frontier`` ask the run's model for the theory
exponent of the resource they fit (time t, model size D, data N, compute C = t·D), in the regime
of the tasks the fit sees, and for the learned-task cutoff t_c where an auto time window ends:

- exponents p in L ∝ x^-p from (α, β, γ) of the stored task law (:func:`scaling.exponents`);
- time fits take the regime (Λ_s ≪ 1, Λ_s ≫ 1 or mixed) of the tasks that emerge inside the fit
  window (:func:`scaling.window_regime`), compute frontiers that of the tasks s within the model
  sizes; the model-size and data laws are the same in both;
- t_c is where s_c(t) reaches ``fraction`` of the represented tasks D
  (:func:`scaling.emergence_times`): with finite N_s the loss is ~ s_c^-η − N_s^-η, steeper
  than the law after it.

Runs are read duck-typed (``run.config``, ``run.attrs``, ``run.path``), so this module imports no
file reader.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._spec import Cutoff, NoLaw, Theory, stored_number, stored_value
from . import scaling
from .regime_laws import (
    abg,
    emergence,
    exponent,
    model_size,
    regime_theory,
    strength,
    task_law_name,
)
from .time_law import time_law

__all__ = ["MsfrScaling", "SCALING", "time_law"]

_KEY = {"model_size": "task.model_size", "n_samples": "task.n_samples"}

#: a table or family's cutoff sorts the emergence times of every represented task: up to this D
FAMILY_CUTOFF_MAX = 1 << 25


def _family_cutoff(run: Any, fraction: float) -> Cutoff | None:
    """t_c of a table or family run: s_c(t) reaches ``fraction`` of its emerging tasks s ≤ D."""
    from .local_laws import emergence_upto
    from .time_law import stored_problem

    try:
        prob, sigma0 = stored_problem(run.config)
    except ValueError:
        return None
    D = min(int(model_size(run)), prob.n_tasks)
    if D > FAMILY_CUTOFF_MAX:
        return None
    ts = emergence_upto(prob, sigma0, D)
    ts = np.sort(ts[(ts > 0) & np.isfinite(ts)])
    if ts.size == 0:
        return None
    k = max(int(math.ceil(fraction * ts.size)), 1)
    tc = float(ts[k - 1])
    return Cutoff(
        tc,
        f"learned-task cutoff t_c = {tc:g}",
        f"t_c = {tc:g}: the learned-task cutoff s_c(t) reaches {k} of the {ts.size} tasks that "
        f"emerge among the D = {D} represented (cutoff fraction {fraction:g}); the loss leaves "
        "the tasks' law after it as the last of them emerge",
    )


class MsfrScaling:
    """The :class:`fastdyn.models.ScalingTheory` of MSFR runs (module docstring)."""

    resources = ("time", "model_size", "n_samples", "compute")

    def exponent(self, run: Any, x: str, regime: str = "small") -> Theory | None:
        """:func:`~fastdyn.models.msfr.regime_laws.exponent`."""
        return exponent(run, x, regime)

    def resource(self, run: Any, x: str) -> float:
        """The run's config value of ``x`` ("model_size": D, "n_samples": N)."""
        v = model_size(run) if x == "model_size" else stored_number(stored_value(run, _KEY[x]))
        if not (math.isfinite(v) and v > 0):
            raise ValueError(
                f"{run.path}: {_KEY[x]} is not a finite positive number in the stored config"
            )
        return v

    def cutoff(self, run: Any, fraction: float) -> Cutoff | None:
        """t_c where s_c(t) reaches ``fraction`` of the represented tasks D (of a table or family:
        of the represented tasks that emerge)."""
        if task_law_name(run.config) is not None:
            return _family_cutoff(run, fraction)
        if abg(run) is None:
            return None
        ts = np.sort(emergence(run))
        k = max(int(math.ceil(fraction * ts.size)), 1)
        tc = float(ts[k - 1])
        D = int(model_size(run))
        return Cutoff(
            tc,
            f"learned-task cutoff t_c = {tc:g}",
            f"t_c = {tc:g}: the learned-task cutoff s_c(t) reaches {k} of the D = {D} represented "
            f"tasks there (cutoff fraction {fraction:g}); the finite task count steepens the loss "
            "after it",
        )

    def window_regime(self, run: Any, t_lo: float, t_hi: float) -> scaling.WindowRegime | None:
        """The regime of the tasks that emerge in [t_lo, t_hi]."""
        if abg(run) is None:
            return None
        return scaling.window_regime(t_lo, t_hi, emergence(run), *strength(run))

    def time_theory(self, run: Any, window: tuple[float, float]) -> Theory | NoLaw:
        """The time law of the tasks that emerge in the fitted ``window``: the regime's power law,
        a table's or family's local law, or why none applies (:func:`time_law.time_law`)."""
        n = run.attrs.get("n_represented")
        return time_law(run.config, window, None if n is None else int(n)).theory()

    def time_law(self, run: Any, window: tuple[float, float]) -> dict[str, Any]:
        """The time law the run's config predicts over ``window`` (the validation map's
        columns): :func:`time_law.time_law` as a dict, ``kind`` "regime law" | "local law" |
        "none", ``regime`` "equal" where every task has one Λ_s (power laws with γ = 0: both
        regimes' laws agree there), ``tasks`` (s_lo, s_hi) the tasks emerging in the window."""
        n = run.attrs.get("n_represented")
        law = time_law(run.config, window, None if n is None else int(n))
        kind = {"power": "regime law", "local": "local law"}.get(law.kind, "none")
        regime = law.regime
        if kind == "regime law" and float(stored_value(run, "task.gamma", 0.0)) == 0.0:
            regime = "equal"
        text = f"{law.source}; {law.text}" if kind != "none" else f"no law applies: {law.text}"
        return {
            "exponent": None if kind == "none" else law.exponent,
            "kind": kind,
            "regime": regime,
            "text": text,
            "tasks": (law.s_lo, law.s_hi) if law.s_hi else None,
        }

    def frontier_theory(
        self, runs: Sequence[Any], model_sizes: np.ndarray, notes: list[str]
    ) -> Theory | NoLaw | None:
        """The compute law of runs that differ in model size, in the regime of the tasks
        s = min D..max D (D* ≈ s_c(t) there); None unless every run has the same law."""
        th = [self.exponent(r, "compute") for r in runs]
        if any(t is None for t in th):
            return None
        no = [t for t in th if isinstance(t, NoLaw)]
        if no:
            return no[0]
        if len({(t.exponent, t.d_star) for t in th}) > 1:  # type: ignore[union-attr]
            notes.append(
                "runs have different alpha/beta/gamma: no single theory exponent for compute"
            )
            return None
        lg = {strength(r) for r in runs}
        if len(lg) > 1:
            notes.append("runs have different strength0/gamma: the compute law is the Λ_s ≪ 1 one")
            return th[0]
        lam0, g = lg.pop()
        s_lo, s_hi = int(np.min(model_sizes)), int(np.max(model_sizes))
        lam = sorted((lam0 * s_lo**-g, lam0 * s_hi**-g))
        reg = scaling.regime_of(*lam)
        mid = math.sqrt(s_lo * s_hi)
        law = reg if reg != "mixed" else ("large" if lam0 * mid**-g >= 1 else "small")
        wr = scaling.WindowRegime(reg, law, s_lo, s_hi, lam[0], lam[1], math.nan, s_hi - s_lo + 1)
        return regime_theory(runs[0], "compute", wr, "are the model sizes")


SCALING = MsfrScaling()
