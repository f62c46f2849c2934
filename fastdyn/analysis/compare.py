"""⑥ Fits of runs read from files, each beside its theory prediction; resource scans; frontiers.

Resources (``x``): ``time`` (one run's loss curve), ``model_size`` and ``n_samples`` (the final loss,
or the loss at a fixed time, of several runs against their config value), ``compute`` (the
compute-optimal frontier C = t·D of a grid of runs with different model sizes, via
:func:`fastdyn.analysis.frontiers.frontier`). Exponents are p in L ∝ x^-p throughout.

Theory lookups: for MSFR runs the exponent of spec msfr.md §6 from the config stored in the file
(:func:`fastdyn.models.msfr.scaling.exponents`), in the regime of the fit: time fits take the
regime (Λ_s ≪ 1, Λ_s ≫ 1 or mixed) of the tasks that emerge inside the fit window
(:func:`fastdyn.models.msfr.scaling.window_regime`), compute frontiers that of the tasks s within
the model sizes; model-size and data laws are the same in both. Time fits with ``window="auto"``
also end where the learned-task cutoff s_c(t) reaches ``cutoff_fraction`` of the represented tasks
(:func:`fastdyn.models.msfr.scaling.emergence_times`), with a warning naming the cutoff.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..h5.reader import Run
from ..models.msfr import scaling
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
    "msfr_cutoff_time",
    "msfr_window_regime",
    "resource_value",
    "value_at",
    "fit_run",
    "scan",
    "compute_frontier",
    "plateau_table",
    "DEFAULT_CUTOFF_FRACTION",
]

RESOURCES = ("time", "model_size", "n_samples", "compute")
_FIELD = {"time": "time", "model_size": "model_size", "n_samples": "data", "compute": "compute"}
_KAPPA = {"small": "alpha+beta+gamma", "large": "alpha+beta+3gamma"}
_EXPR = {
    "time": "eta/kappa_t",
    "model_size": "eta",
    "n_samples": "eta/alpha",
    "compute": "eta/(kappa_t+1)",
}
_SYMBOL = {"time": "t", "model_size": "D", "n_samples": "N", "compute": "C"}

#: auto windows of MSFR time fits end where s_c(t) reaches this fraction of the represented tasks:
#: with finite N_s the loss is ~ s_c^-eta - N_s^-eta, whose local slope departs from the law by
#: ~eta (s_c/N_s)^eta / (1 - (s_c/N_s)^eta): 0.05 at s_c/N_s = 0.1 for eta = 1.5, 0.017 at 0.05.
DEFAULT_CUTOFF_FRACTION = 0.1


@dataclass(frozen=True)
class Theory:
    """A theory exponent p (L ∝ x^-p) and where it comes from; ``d_star`` for compute fits;
    ``regime`` ("small", "large", "mixed" or "" when the law does not depend on it) and one line
    ``regime_text`` saying which tasks the fit sees and which law that makes."""

    exponent: float
    source: str
    d_star: float | None = None
    regime: str = ""
    regime_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "exponent": self.exponent,
            "source": self.source,
            "d_star": self.d_star,
            "regime": self.regime,
            "regime_text": self.regime_text,
        }


def _fit_note(run: Run) -> str | None:
    """The model's warning for power-law fits of its runs (``ModelEntry.fit_note``), if any."""
    from ..models.registry import get_model

    try:
        return get_model(run.model).fit_note
    except KeyError:
        return None


def _msfr_abg(run: Run) -> tuple[float, float, float] | None:
    """(α, β, γ) of the run's task law from its model's ``fit_theory`` hook (None without one)."""
    from ..models.registry import get_model

    try:
        hook = get_model(run.model).fit_theory
    except KeyError:
        return None
    return hook(run) if hook is not None else None


def theory_for(run: Run, x: str, regime: str = "small") -> Theory | None:
    """The theory exponent for fitting ``run``'s loss against ``x`` in ``regime`` ("small":
    Λ_s ≪ 1, "large": Λ_s ≫ 1; the model-size and data laws are the same in both), None when
    there is none."""
    _check_x(x)
    abg = _msfr_abg(run)
    if abg is None:
        return None
    try:
        ex = scaling.exponents(*abg, regime=regime)
    except ValueError:
        return None  # outside the laws' domain (alpha + 2 gamma <= 1, ...)
    a, b, g = abg
    if x in ("time", "compute"):
        where = f", {scaling.REGIME_NAMES[regime]}: kappa_t = {_KAPPA[regime]}"
    else:
        where = " (the same for Λ_s ≪ 1 and Λ_s ≫ 1)"
    src = f"msfr spec §6{where}: {_EXPR[x]} with alpha={a:g}, beta={b:g}, gamma={g:g}"
    rg = regime if x in ("time", "compute") else ""
    return Theory(getattr(ex, _FIELD[x]), src, ex.d_star if x == "compute" else None, rg)


def _strength(run: Run) -> tuple[float, float]:
    get = lambda k, d: config_value(run, k, d)  # noqa: E731
    return float(get("task.strength0", 1.0)), float(get("task.gamma", 0.0))


def _regime_theory(run: Run, x: str, wr: scaling.WindowRegime, what: str) -> Theory | None:
    """The theory of ``wr.law`` for ``x`` with a one-line account of the regime."""
    th = theory_for(run, x, wr.law)
    abg = _msfr_abg(run)
    if abg is None:
        return th
    lam0, g = _strength(run)
    sx = scaling.crossover(lam0, g)
    cross = "no crossover (gamma = 0)" if sx is None else f"crossover s× = Λ0^(1/gamma) = {sx:.4g}"
    other = "small" if wr.law == "large" else "large"
    try:
        p_other = f"p = {getattr(scaling.exponents(*abg, regime=other), _FIELD[x]):.5f}"
    except ValueError:
        p_other = "none"
    tasks = f"tasks s = {wr.s_lo}..{wr.s_hi} {what}, Λ_s = {wr.lam_lo:.3g}..{wr.lam_hi:.3g}"
    if wr.regime == "mixed":
        head = (f"mixed: {tasks} span Λ_s = 1 ({cross}); neither law holds exactly, nearest "
                f"{scaling.REGIME_NAMES[wr.law]}")  # fmt: skip
    else:
        head = f"{scaling.REGIME_NAMES[wr.regime]}: {tasks} ({cross})"
    text = f"{head}; the {scaling.REGIME_NAMES[other]} law would be {p_other}"
    if x == "time" and th is not None and math.isfinite(wr.kappa_w) and wr.kappa_w > 0:
        eta = scaling.exponents(*abg).eta
        text += f"; t_s ∝ s^{wr.kappa_w:.3f} there (logs included): eta/{wr.kappa_w:.3f} = {eta / wr.kappa_w:.5f}"
    if th is None:
        return None
    return Theory(th.exponent, th.source, th.d_star, wr.regime, text)


def msfr_window_regime(
    run: Run, t_lo: float, t_hi: float, ts: np.ndarray | None = None
) -> scaling.WindowRegime | None:
    """The regime of the tasks of an MSFR run that emerge in [t_lo, t_hi] (None if not MSFR);
    ``ts`` the run's emergence times when already computed."""
    if _msfr_abg(run) is None:
        return None
    ts = _msfr_emergence(run) if ts is None else ts
    return scaling.window_regime(t_lo, t_hi, ts, *_strength(run))


def _check_x(x: str) -> None:
    if x not in RESOURCES:
        raise ValueError(f"x must be one of {', '.join(RESOURCES)}, got {x!r}")


def model_size(run: Run) -> float:
    """Resolved model size D of an MSFR run (``n_represented``, or task.model_size / n_tasks)."""
    if "n_represented" in run.attrs:
        return float(run.attrs["n_represented"])
    d = config_value(run, "task.model_size")
    n = resolved_number(config_value(run, "task.n_tasks"))
    if d is None or d == "all":
        return n
    d = resolved_number(d)
    return min(d, n) if math.isfinite(n) else d


def resource_value(run: Run, x: str) -> float:
    """The config value of resource ``x`` ("model_size" | "n_samples") for one run."""
    if x == "model_size":
        v = model_size(run)
    elif x == "n_samples":
        v = resolved_number(config_value(run, "task.n_samples"))
    else:
        raise ValueError(f"resource_value: x must be model_size or n_samples, got {x!r}")
    if not (math.isfinite(v) and v > 0):
        key = "task.model_size" if x == "model_size" else "task.n_samples"
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


def _msfr_emergence(run: Run) -> np.ndarray:
    """Emergence times t_s of the represented tasks s = 1..D (index s - 1) of an MSFR run.

    P(s) = s^-alpha / Z(N_s) over all N_s tasks, restricted to s <= D; for finite n_samples the
    expected frequencies stand in for the sampled counts.
    """
    get = lambda k, d: config_value(run, k, d)  # noqa: E731
    n_tasks = int(resolved_number(get("task.n_tasks", 10_000)))
    D = int(model_size(run))
    kw = {
        "alpha": float(get("task.alpha", 2.0)),
        "beta": float(get("task.beta", 0.0)),
        "gamma": float(get("task.gamma", 0.0)),
        "strength0": float(get("task.strength0", 1.0)),
        "psi0": float(get("task.psi0", 100.0)),
        "psi_min": int(get("task.psi_min", 1)),
        "init_scale": float(get("init.scale", 1e-3)),
    }
    return scaling.emergence_times(n_tasks=n_tasks, **kw)[:D]


def msfr_cutoff_time(
    run: Run, fraction: float = DEFAULT_CUTOFF_FRACTION, ts: np.ndarray | None = None
) -> float | None:
    """Time at which s_c(t) reaches ``fraction`` of the represented tasks D (None if not MSFR);
    ``ts`` the run's emergence times when already computed (:func:`_msfr_emergence`)."""
    if _msfr_abg(run) is None:
        return None
    ts = np.sort(_msfr_emergence(run) if ts is None else ts)
    k = max(int(math.ceil(fraction * ts.size)), 1)
    return float(ts[k - 1])


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

    Warnings (also in ``report.warnings``) name the MSFR learned-task cutoff when it ends the window.
    """
    if x != "time":
        raise ValueError(f"fit_run fits one run against time; use scan() for x={x!r}")
    t, v = _series(run, y)
    ts = _msfr_emergence(run) if _msfr_abg(run) is not None else None
    cutoff = msfr_cutoff_time(run, cutoff_fraction, ts)
    name = text = ""
    if cutoff is not None:
        D = int(model_size(run))
        k = max(int(math.ceil(cutoff_fraction * D)), 1)
        name = f"learned-task cutoff t_c = {cutoff:g}"
        text = (
            f"t_c = {cutoff:g}: the learned-task cutoff s_c(t) reaches {k} of the D = {D} "
            f"represented tasks there (cutoff fraction {cutoff_fraction:g}); the finite task "
            "count steepens the loss after it"
        )
    f, mode, notes, reason = _do_fit(t, v, window, cutoff, name, offset, bootstrap, loss, seed, ci)
    note = _fit_note(run)
    if note:
        notes.append(note)
    _emit(notes)
    th = theory_for(run, "time")
    if ts is not None:
        wr = scaling.window_regime(*f.window, ts, *_strength(run))
        th = _regime_theory(run, "time", wr, "emerge in the window")
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
    )


def _shared_theory(runs: Sequence[Run], x: str, notes: list[str]) -> Theory | None:
    th = [theory_for(r, x) for r in runs]
    if any(t is None for t in th):
        return None
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
    th = _shared_theory(runs, x, notes)
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
    th = _shared_theory(runs, "compute", notes)
    if th is not None:
        th = _frontier_regime(runs, Ds[order], th, notes)
    fr = frontier(list(ts), Ds[order], list(Ls), n_C=n_C, bootstrap=bootstrap, seed=seed, ci=ci)
    _emit(notes)
    return FrontierReport(
        fr, Ds[order], list(ts), list(Ls), y, th, tuple(notes), tuple(str(r.path) for r in runs)
    )


def _frontier_regime(
    runs: Sequence[Run], Ds: np.ndarray, th: Theory, notes: list[str]
) -> Theory | None:
    """The compute theory in the regime of the tasks s = min D..max D (D* ≈ s_c(t) there)."""
    lg = {_strength(r) for r in runs}
    if len(lg) > 1:
        notes.append("runs have different strength0/gamma: the compute law is the Λ_s ≪ 1 one")
        return th
    lam0, g = lg.pop()
    s_lo, s_hi = int(Ds.min()), int(Ds.max())
    lam = sorted((lam0 * s_lo**-g, lam0 * s_hi**-g))
    reg = scaling.regime_of(*lam)
    mid = math.sqrt(s_lo * s_hi)
    law = reg if reg != "mixed" else ("large" if lam0 * mid**-g >= 1 else "small")
    wr = scaling.WindowRegime(reg, law, s_lo, s_hi, lam[0], lam[1], math.nan, s_hi - s_lo + 1)
    return _regime_theory(runs[0], "compute", wr, "are the model sizes")


def plateau_table(
    dim: int, context: float, spectrum: str = "linear", exponent: float = 1.0
) -> dict[str, Any]:
    """ATTN_S plateau losses L(M_m), m = 0..D, and the ATTN_M global minimum L* (spec icl.md §4).

    Spectrum conventions of icl.md §1 (linear: ∝ 1..D with tr Λ = 1; white: I/D). Calls the model
    theory (:mod:`fastdyn.models.attn_s.theory`), which owns the formula.
    """
    from ..models.attn_s.theory import loss_star, plateau_losses
    from ..problems.icl import spectrum_eigenvalues

    if int(dim) != dim or dim < 1:
        raise ValueError(f"--dim: must be a positive integer, got {dim!r}")
    if not (math.isfinite(context) and context > 0):
        raise ValueError(f"--context: must be a finite number > 0, got {context!r}")
    lam = spectrum_eigenvalues(int(dim), spectrum, exponent)
    return {
        "dim": int(dim),
        "context": float(context),
        "spectrum": spectrum,
        "eigenvalues": lam.tolist(),
        "plateaus": np.asarray(plateau_losses(lam, context)).tolist(),
        "loss_star": float(loss_star(lam, context)),
    }
