"""⑥ Fits of runs read from files, each beside its theory prediction; resource scans; frontiers.

Resources (``x``): ``time`` (one run's loss curve), ``model_size`` and ``n_samples`` (the final loss,
or the loss at a fixed time, of several runs against their config value), ``compute`` (the
compute-optimal frontier C = t·D of a grid of runs with different model sizes, via
:func:`fastdyn.analysis.frontiers.frontier`). Exponents are p in L ∝ x^-p throughout.

Theory lookups ask the run's model (its entry's ``scaling``, a
:class:`fastdyn.models.ScalingTheory`): the exponent
for the resource, in the regime of what the fit sees, and the cutoff where an auto time window ends
(with a warning naming it). A model without one gets fits without a theory line.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..h5.reader import Run
from ..models._spec import Cutoff, NoLaw, ScalingTheory, Theory
from ._common import _f
from .frontiers import Frontier, frontier
from .labels import time_label
from .load import config_value, resolved_number
from .power_law import PowerLawFit, fit_power_law
from .window import auto_window_explained

__all__ = [
    "RESOURCES",
    "Theory",
    "FitReport",
    "FrontierReport",
    "theory_for",
    "cutoff_for",
    "resource_value",
    "value_at",
    "fit_run",
    "scan",
    "compute_frontier",
    "DEFAULT_CUTOFF_FRACTION",
]

RESOURCES = ("time", "model_size", "n_samples", "compute")
#: where a run whose model declares no scaling laws keeps the resources of a scan
_RESOURCE_KEYS = {"model_size": "task.model_size", "n_samples": "task.n_samples"}
_SYMBOL = {"time": "t", "model_size": "D", "n_samples": "N", "compute": "C"}

#: auto time windows end at the model's cutoff for this fraction (the learned-task cutoff: where
#: s_c(t) reaches this fraction of the represented tasks):
#: with finite N_s the loss is ~ s_c^-eta - N_s^-eta, whose local slope departs from the law by
#: ~eta (s_c/N_s)^eta / (1 - (s_c/N_s)^eta): 0.05 at s_c/N_s = 0.1 for eta = 1.5, 0.017 at 0.05.
DEFAULT_CUTOFF_FRACTION = 0.1
#: fits with |p| below this warn that their window is flat: a plateau, not a power law (the
#: shipped laws have p ≥ 0.2; a saddle-to-saddle loss fitted over its last plateau gave 0.011)
FLAT_P = 0.05


def _fit_note(run: Run) -> str | None:
    """The model's warning for power-law fits of its runs (``ModelEntry.analysis.fit_note``), if any."""
    from ..models.registry import get_model

    try:
        return get_model(run.model).analysis.fit_note
    except KeyError:
        return None


def _scaling(run: Run) -> ScalingTheory | None:
    """The run's model's scaling laws (``ModelEntry.analysis.scaling``), None without them."""
    from ..models.registry import get_model

    try:
        return get_model(run.model).analysis.scaling
    except KeyError:
        return None


def theory_for(run: Run, x: str, regime: str = "small") -> Theory | None:
    """The theory exponent for fitting ``run``'s loss against ``x`` in ``regime`` ("small":
    Λ_s ≪ 1, "large": Λ_s ≫ 1, where the model has regimes), None when its model has none."""
    th = _theory_or_why(run, x, regime)
    return th if isinstance(th, Theory) else None


def _theory_or_why(run: Run, x: str, regime: str = "small") -> Theory | NoLaw | None:
    """:func:`theory_for`, or the model's :class:`NoLaw` saying why no law applies."""
    _check_x(x)
    laws = _scaling(run)
    return None if laws is None or x not in laws.resources else laws.exponent(run, x, regime)


def _split(th: Theory | NoLaw | None) -> tuple[Theory | None, str]:
    """(the theory or None, why there is none: a :class:`NoLaw`'s reason or "")."""
    return (None, th.reason) if isinstance(th, NoLaw) else (th, "")


def cutoff_for(run: Run, fraction: float = DEFAULT_CUTOFF_FRACTION) -> Cutoff | None:
    """Where an auto time window of ``run`` ends for a model reason (e.g. the learned-task
    cutoff t_c, where s_c(t) reaches ``fraction`` of the represented tasks), None if nowhere."""
    laws = _scaling(run)
    return None if laws is None else laws.cutoff(run, fraction)


def _check_x(x: str) -> None:
    if x not in RESOURCES:
        raise ValueError(f"x must be one of {', '.join(RESOURCES)}, got {x!r}")


def resource_value(run: Run, x: str) -> float:
    """The config value of resource ``x`` ("model_size" | "n_samples") for one run: its model's
    (``ScalingTheory.resource``), else the config key of :data:`_RESOURCE_KEYS`."""
    if x not in ("model_size", "n_samples"):
        raise ValueError(f"resource_value: x must be model_size or n_samples, got {x!r}")
    laws = _scaling(run)
    if laws is not None and x in laws.resources:
        return laws.resource(run, x)
    key = _RESOURCE_KEYS[x]  # a model without scaling laws: its config's value
    v = resolved_number(config_value(run, key))
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{run.path}: {key} is not a finite positive number in the stored config")
    return v


def _series(run: Run, y: str) -> tuple[np.ndarray, np.ndarray]:
    if y not in run:
        have = ", ".join(k for k in sorted(run.series) if k.startswith(("loss", "theory/loss")))
        raise KeyError(f"{run.path}: no dataset {y!r}; it has {have or 'no loss series'}")
    t, v = np.asarray(run.time, float), np.asarray(run[y], float)
    if v.ndim != 1:
        raise ValueError(f"{run.path}: {y} is not a 1-d series (shape {v.shape})")
    ok = np.isfinite(t) & np.isfinite(v)
    return t[ok], v[ok]


def value_at(run: Run, y: str = "loss/test", at: float | None = None) -> float:
    """The last finite value of series ``y``, or its value at time ``at`` (log-log interpolation)."""
    t, v = _series(run, y)
    if t.size == 0:
        raise ValueError(f"{run.path}: {y} has no finite values")
    if at is None:
        return float(v[-1])
    if not (t[0] <= at <= t[-1]):
        raise ValueError(
            f"{run.path}: t = {at:g} lies outside the recorded times [{t[0]:g}, {t[-1]:g}]"
        )
    pos = (t > 0) & (v > 0)
    if at > 0 and pos.sum() >= 2 and t[pos][0] <= at:
        return float(np.exp(np.interp(math.log(at), np.log(t[pos]), np.log(v[pos]))))
    return float(np.interp(at, t, v))


@dataclass(frozen=True, eq=False)
class FitReport:
    """One fit: the data, the :class:`~fastdyn.analysis.power_law.PowerLawFit`, its theory."""

    x_name: str
    y_name: str
    x: np.ndarray = field(repr=False)
    y: np.ndarray = field(repr=False)
    fit: PowerLawFit
    window_mode: str
    theory: Theory | None
    cutoff: float | None
    warnings: tuple[str, ...]
    label: str
    paths: tuple[str, ...]
    window_reason: str = ""
    x_label: str = ""
    cutoff_text: str = ""
    theory_note: str = ""  # why there is no theory, when the model says no law applies

    @property
    def difference(self) -> float | None:
        """fit − theory exponent (None without theory)."""
        return None if self.theory is None else self.fit.exponent - self.theory.exponent

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: exponent, ci, window, theory, difference, … (no residual arrays)."""
        f = self.fit.to_dict()
        f.pop("residuals", None)
        return {
            "label": self.label,
            "paths": list(self.paths),
            "x": self.x_name,
            "y": self.y_name,
            "exponent": f["exponent"],
            "stderr": f["stderr"],
            "ci": f["ci"],
            "ci_level": f["ci_level"],
            "window": f["window"],
            "window_mode": self.window_mode,
            "window_reason": self.window_reason,
            "theory": None if self.theory is None else _f(self.theory.exponent),
            "theory_source": None if self.theory is None else self.theory.source,
            "regime": None if self.theory is None else self.theory.regime,
            "regime_text": None if self.theory is None else self.theory.regime_text,
            "theory_note": self.theory_note,
            "difference": _f(self.difference),
            "cutoff": _f(self.cutoff),
            "cutoff_text": self.cutoff_text,
            "x_label": self.x_label,
            "warnings": list(self.warnings),
            "fit": f,
        }


def _do_fit(
    x: np.ndarray,
    y: np.ndarray,
    window: Any,
    cutoff: float | None,
    cutoff_name: str,
    offset: bool,
    bootstrap: int,
    loss: str,
    seed: int,
    ci: float,
) -> tuple[PowerLawFit, str, list[str], str]:
    """The fit, the window mode, warnings (one line each) and why the window is where it is."""
    notes: list[str] = []
    keep = (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    reason = ""
    if isinstance(window, str) and window == "auto":
        with warnings.catch_warnings(record=True):  # the cutoff is reported below, named
            warnings.simplefilter("always")
            win, why = auto_window_explained(x, y, cutoff_x=cutoff)
        end = why["end"]
        if why["end_kind"] == "cutoff":
            end = f"ends at the {cutoff_name}"
            notes.append(
                f"fit window ends at the {cutoff_name}: the {why['n_cut']} later points are "
                "steepened by the finite task count and left out"
            )
        elif cutoff is not None:
            end += ", before t_c"
        reason = f"{why['range']}; {why['start']}; {end}"
        mode = "auto"
    elif window is None or (isinstance(window, str) and window == "all"):
        win, mode, reason = None, "all", "every point"
    else:
        win, mode, reason = tuple(window), "given", "as given"
    if cutoff is not None and mode != "auto":
        hi = np.max(x) if win is None or win[1] is None else min(float(win[1]), np.max(x))
        if hi > cutoff:
            notes.append(
                f"the window extends past the {cutoff_name}: the finite-task "
                "cutoff steepens the curve there"
            )
    f = fit_power_law(x, y, win, offset=offset, bootstrap=bootstrap, seed=seed, ci=ci, loss=loss)
    lo, hi = f.window
    if abs(f.exponent) < FLAT_P:
        notes.append(
            f"the fitted exponent |p| = {abs(f.exponent):.3g} is below {FLAT_P:g}: the window is "
            "flat (a plateau), not a power-law regime"
        )
    if lo > 0 and hi / lo < 10.0:
        notes.append(
            f"the window spans {math.log10(hi / lo):.2f} decades (< 1): the exponent is a local "
            "slope, not a law"
        )
    return f, mode, notes, reason


def _emit(notes: Sequence[str]) -> None:
    for n in notes:
        warnings.warn(n, stacklevel=3)


def fit_run(
    run: Run,
    x: str = "time",
    y: str = "loss/test",
    window: Any = "auto",
    *,
    offset: bool = False,
    bootstrap: int = 1000,
    loss: str = "l2",
    seed: int = 0,
    ci: float = 0.95,
    cutoff_fraction: float = DEFAULT_CUTOFF_FRACTION,
) -> FitReport:
    """Fit series ``y`` of one run against time (``x = "time"``); window "auto", "all" or (lo, hi).

    Warnings (also in ``report.warnings``) name the model's cutoff (e.g. the learned-task cutoff
    t_c) when it ends the window.
    """
    if x != "time":
        raise ValueError(f"fit_run fits one run against time; use scan() for x={x!r}")
    t, v = _series(run, y)
    cut = cutoff_for(run, cutoff_fraction)
    cutoff, name, text = (None, "", "") if cut is None else (cut.time, cut.name, cut.text)
    f, mode, notes, reason = _do_fit(t, v, window, cutoff, name, offset, bootstrap, loss, seed, ci)
    note = _fit_note(run)
    if note:
        notes.append(note)
    _emit(notes)
    laws = _scaling(run)
    th, why = _split(None if laws is None else laws.time_theory(run, tuple(f.window)))
    return FitReport(
        "time",
        y,
        t,
        v,
        f,
        mode,
        th,
        cutoff,
        tuple(notes),
        run.path.name,
        (str(run.path),),
        reason,
        time_label([run]),
        text,
        why,
    )


def _shared_theory(runs: Sequence[Run], x: str, notes: list[str]) -> Theory | NoLaw | None:
    th = [_theory_or_why(r, x) for r in runs]
    if any(t is None for t in th):
        return None
    if any(isinstance(t, NoLaw) for t in th):
        return next(t for t in th if isinstance(t, NoLaw))
    if len({(t.exponent, t.d_star) for t in th}) > 1:  # type: ignore[union-attr]
        notes.append(f"runs have different alpha/beta/gamma: no single theory exponent for {x}")
        return None
    return th[0]


def scan(
    runs: Sequence[Run],
    x: str = "model_size",
    y: str = "loss/test",
    at: float | None = None,
    window: Any = None,
    *,
    offset: bool = False,
    bootstrap: int = 1000,
    loss: str = "l2",
    seed: int = 0,
    ci: float = 0.95,
) -> FitReport:
    """Loss of several runs (final, or at time ``at``) against their ``model_size``/``n_samples``."""
    if x not in ("model_size", "n_samples"):
        raise ValueError(f"scan: x must be model_size or n_samples, got {x!r}")
    if len(runs) < 3:
        raise ValueError(f"a {x} scan needs at least 3 runs, got {len(runs)}")
    xs = np.array([resource_value(r, x) for r in runs])
    ys = np.array([value_at(r, y, at) for r in runs])
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    if np.unique(xs).size < 3:
        raise ValueError(
            f"a {x} scan needs at least 3 distinct values of {x}, got {np.unique(xs).tolist()}"
        )
    notes: list[str] = []
    th, why = _split(_shared_theory(runs, x, notes))
    f, mode, more, reason = _do_fit(xs, ys, window, None, "", offset, bootstrap, loss, seed, ci)
    notes += more
    _emit(notes)
    what = "final" if at is None else f"t={at:g}"
    return FitReport(
        x,
        y,
        xs,
        ys,
        f,
        mode,
        th,
        None,
        tuple(notes),
        f"{y} ({what}) vs {x}, {len(runs)} runs",
        tuple(str(runs[i].path) for i in order),
        reason,
        theory_note=why,
    )


@dataclass(frozen=True, eq=False)
class FrontierReport:
    """A compute-optimal frontier (:class:`~fastdyn.analysis.frontiers.Frontier`) and its theory."""

    frontier: Frontier
    D: np.ndarray
    times: list[np.ndarray] = field(repr=False)
    losses: list[np.ndarray] = field(repr=False)
    y_name: str
    theory: Theory | None
    warnings: tuple[str, ...]
    paths: tuple[str, ...]
    theory_note: str = ""  # why there is no theory, when the model says no law applies

    @property
    def fit(self) -> PowerLawFit:
        return self.frontier.fit_L  # type: ignore[return-value]

    @property
    def difference(self) -> float | None:
        return None if self.theory is None else self.frontier.loss_exponent - self.theory.exponent

    def to_dict(self) -> dict[str, Any]:
        fr = self.frontier.to_dict()
        for k in ("fit_L", "fit_D"):
            if fr[k] is not None:
                fr[k].pop("residuals", None)
        fL = fr["fit_L"] or {}
        fD = fr["fit_D"] or {}
        th = self.theory
        return {
            "label": f"{self.y_name} frontier over {len(self.paths)} runs",
            "paths": list(self.paths),
            "x": "compute",
            "y": self.y_name,
            "exponent": fL.get("exponent"),
            "stderr": fL.get("stderr"),
            "ci": fL.get("ci"),
            "window": fL.get("window"),
            "window_mode": "interior",
            "theory": None if th is None else th.exponent,
            "theory_source": None if th is None else th.source,
            "theory_note": self.theory_note,
            "regime": None if th is None else th.regime,
            "regime_text": None if th is None else th.regime_text,
            "difference": self.difference,
            "d_star_exponent": fr["d_star_exponent"],
            "d_star_ci": None if not fD.get("ci") else [-fD["ci"][1], -fD["ci"][0]],
            "d_star_theory": None if th is None else th.d_star,
            "d_star_difference": None if th is None else self.frontier.d_star_exponent - th.d_star,  # type: ignore[operator]
            "model_sizes": self.D.tolist(),
            "warnings": list(self.warnings),
            "frontier": fr,
        }


def compute_frontier(
    runs: Sequence[Run],
    y: str = "loss/test",
    *,
    n_C: int = 64,
    bootstrap: int = 0,
    seed: int = 0,
    ci: float = 0.95,
) -> FrontierReport:
    """Frontier L*(C), D*(C) (C = t D) from runs that differ in model size, one run per D."""
    if len(runs) < 3:
        raise ValueError(
            f"a compute frontier needs runs at at least 3 model sizes, got {len(runs)} run(s)"
        )
    Ds = np.array([resource_value(r, "model_size") for r in runs])
    if np.unique(Ds).size != Ds.size:
        dup = sorted({float(d) for d in Ds if (Ds == d).sum() > 1})
        raise ValueError(f"a compute frontier needs one run per model size; repeated D = {dup}")
    order = np.argsort(Ds)
    runs = [runs[i] for i in order]
    ts, Ls = zip(*(_series(r, y) for r in runs), strict=True)
    notes: list[str] = []
    laws = {id(_scaling(r)): _scaling(r) for r in runs}
    th = None
    if len(laws) == 1 and (law := next(iter(laws.values()))) is not None:
        th = law.frontier_theory(runs, Ds[order], notes)
    th, why = _split(th)
    fr = frontier(list(ts), Ds[order], list(Ls), n_C=n_C, bootstrap=bootstrap, seed=seed, ci=ci)
    _emit(notes)
    return FrontierReport(
        fr, Ds[order], list(ts), list(Ls), y, th, tuple(notes), tuple(str(r.path) for r in runs),
        why,
    )  # fmt: skip
