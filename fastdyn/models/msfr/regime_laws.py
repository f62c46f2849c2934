"""The closed-form power laws of a stored MSFR run (docs/theory.md): what its task law says.

Read from the stored config, duck-typed (``run.config``, ``run.attrs``): the task law's name when
the tasks follow a table or a named family (:func:`task_law_name`), else (α, β, γ), (Λ0, γ), the
model size D and the emergence times t_s of the represented tasks; the exponent p of L ∝ x^-p of
a resource x in a regime (:func:`exponent`) and a window's account of its regime
(:func:`regime_theory`). Both :mod:`.time_law` and :mod:`.fit_laws` read them (this module
imports neither).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from .._spec import NoLaw, Theory, stored_number, stored_value
from . import scaling


def task_law_name(config: Mapping[str, Any]) -> str | None:
    """ "task.table FILE" or "task.strength_law = 'exponential'" for a config whose tasks follow a
    table or a named family, None for the built-in power laws."""
    run = _Stored(config)
    table = stored_value(run, "task.table")
    if table is not None:
        return f"task.table {table}"
    parts = [f"task.{k}_law = {stored_value(run, f'task.{k}_law')!r}" for k in ("frequency", "strength")
             if stored_value(run, f"task.{k}_law", "power") != "power"]  # fmt: skip
    return ", ".join(parts) or None


class _Stored:
    """A stored config (and the resolved model size) as the run-like object the hooks read."""

    def __init__(self, config: Mapping[str, Any], n_represented: int | None = None) -> None:
        self.config = config
        self.attrs = {} if n_represented is None else {"n_represented": n_represented}
        self.path = None


_FIELD = {"time": "time", "model_size": "model_size", "n_samples": "data", "compute": "compute"}
_KAPPA = {"small": "alpha+beta+gamma", "large": "alpha+beta+3gamma"}
_EXPR = {
    "time": "eta/kappa_t",
    "model_size": "eta",
    "n_samples": "eta/alpha",
    "compute": "eta/(kappa_t+1)",
}


def abg(run: Any) -> tuple[float, float, float] | None:
    """(α, β, γ) of the run's power-law task law, None without one (a table or named family has
    none: its stored α, γ are not what its tasks follow)."""
    if task_law_name(run.config) is not None:
        return None
    vals = [
        stored_value(run, f"task.{k}", d)
        for k, d in (("alpha", None), ("beta", 0.0), ("gamma", 0.0))
    ]
    if vals[0] is None:
        return None
    try:
        return float(vals[0]), float(vals[1]), float(vals[2])
    except (TypeError, ValueError):
        return None


def strength(run: Any) -> tuple[float, float]:
    """(Λ0, γ) of Λ_s = Λ0 s^-γ."""
    return float(stored_value(run, "task.strength0", 1.0)), float(
        stored_value(run, "task.gamma", 0.0)
    )


def model_size(run: Any) -> float:
    """Resolved model size D (``n_represented``, or task.model_size capped by task.n_tasks)."""
    if "n_represented" in run.attrs:
        return float(run.attrs["n_represented"])
    d = stored_value(run, "task.model_size")
    n = stored_number(stored_value(run, "task.n_tasks"))
    if d is None or d == "all":
        return n
    d = stored_number(d)
    return min(d, n) if math.isfinite(n) else d


@lru_cache(maxsize=8)
def _emergence(n_tasks: int, D: int, kw: tuple[tuple[str, Any], ...]) -> np.ndarray:
    ts = scaling.emergence_times(n_tasks=n_tasks, **dict(kw))[:D]
    ts.setflags(write=False)
    return ts


def emergence(run: Any) -> np.ndarray:
    """Emergence times t_s of the represented tasks s = 1..D (index s − 1).

    P(s) = s^-α / Z(N_s) over all N_s tasks, restricted to s ≤ D; for finite n_samples the
    expected frequencies stand in for the sampled counts.
    """
    get = lambda k, d: stored_value(run, k, d)  # noqa: E731
    kw = (
        ("alpha", float(get("task.alpha", 2.0))),
        ("beta", float(get("task.beta", 0.0))),
        ("gamma", float(get("task.gamma", 0.0))),
        ("strength0", float(get("task.strength0", 1.0))),
        ("psi0", float(get("task.psi0", 100.0))),
        ("psi_min", int(get("task.psi_min", 1))),
        ("init_scale", float(get("init.scale", 1e-3))),
    )
    return _emergence(int(stored_number(get("task.n_tasks", 10_000))), int(model_size(run)), kw)


def exponent(run: Any, x: str, regime: str = "small") -> Theory | None:
    """p of L ∝ x^-p in ``regime`` ("small": Λ_s ≪ 1, "large": Λ_s ≫ 1), None outside the
    laws' domain (α + 2γ ≤ 1, ...) or without a task law; a :class:`NoLaw` for a task table or
    named family (its local exponents: ``fastdyn theory exponents --config``)."""
    name = task_law_name(run.config)
    if name is not None:
        return NoLaw(f"no closed-form {x.replace('_', ' ')} law for {name}; `fastdyn theory "
                     "exponents --config` gives its local exponents over a window of tasks")  # fmt: skip
    law = abg(run)
    if law is None:
        return None
    try:
        ex = scaling.exponents(*law, regime=regime)
    except ValueError:
        return None
    a, b, g = law
    if x in ("time", "compute"):
        where = f", {scaling.REGIME_NAMES[regime]}: kappa_t = {_KAPPA[regime]}"
    else:
        where = " (the same for Λ_s ≪ 1 and Λ_s ≫ 1)"
    src = f"MSFR law (docs/theory.md){where}: {_EXPR[x]} with alpha={a:g}, beta={b:g}, gamma={g:g}"
    rg = regime if x in ("time", "compute") else ""
    return Theory(getattr(ex, _FIELD[x]), src, ex.d_star if x == "compute" else None, rg)


def regime_theory(run: Any, x: str, wr: scaling.WindowRegime, what: str) -> Theory | None:
    """The theory of ``wr.law`` for ``x`` with a one-line account of the regime."""
    th = exponent(run, x, wr.law)
    law = abg(run)
    if not isinstance(th, Theory) or law is None:
        return th
    lam0, g = strength(run)
    sx = scaling.crossover(lam0, g)
    cross = "no crossover (gamma = 0)" if sx is None else f"crossover s× = Λ0^(1/gamma) = {sx:.4g}"
    other = "small" if wr.law == "large" else "large"
    try:
        p_other = f"p = {getattr(scaling.exponents(*law, regime=other), _FIELD[x]):.5f}"
    except ValueError:
        p_other = "none"
    tasks = f"tasks s = {wr.s_lo}..{wr.s_hi} {what}, Λ_s = {wr.lam_lo:.3g}..{wr.lam_hi:.3g}"
    if wr.lam_hi <= wr.lam_lo * (1 + 1e-12):  # one Λ for every task: no regime to choose
        head = f"tasks s = {wr.s_lo}..{wr.s_hi} {what}, all with Λ_s = {wr.lam_lo:.3g}: both laws agree here"
        return Theory(th.exponent, th.source, th.d_star, wr.regime, head)
    if wr.regime == "mixed":
        head = (f"mixed: {tasks} span Λ_s = 1 ({cross}); neither law holds exactly, nearest "
                f"{scaling.REGIME_NAMES[wr.law]}")  # fmt: skip
    else:
        head = f"{scaling.REGIME_NAMES[wr.regime]}: {tasks} ({cross})"
    text = f"{head}; the {scaling.REGIME_NAMES[other]} law would be {p_other}"
    if x == "time" and math.isfinite(wr.kappa_w) and wr.kappa_w > 0:
        eta = scaling.exponents(*law).eta
        text += f"; t_s ∝ s^{wr.kappa_w:.3f} there (logs included): eta/{wr.kappa_w:.3f} = {eta / wr.kappa_w:.5f}"
    return Theory(th.exponent, th.source, th.d_star, wr.regime, text)
