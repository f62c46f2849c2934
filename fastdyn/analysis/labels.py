"""⑥ What a file says about itself, for plots and fits: each model's default series, the time
convention stated in ``/time``'s attributes, axis labels with units, run labels.

The analysis never names a model: the defaults come from the model registry
(:class:`fastdyn.models._spec.AnalysisHooks` ``default_series`` and ``loss_levels``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..h5.reader import Run

__all__ = [
    "default_series",
    "is_theory_series",
    "loss_levels",
    "time_label",
    "y_label",
    "run_labels",
    "series_name",
]

_FALLBACK = ("loss/test", "loss/train")

#: short names of the well-known series (axis labels, titles)
_NAMES = {
    "loss/test": "test loss L_test",
    "loss/train": "training loss L_train",
    "loss/test_ic": "in-context test loss",
    "loss/test_iw": "in-weight test loss",
}


def _entry(run: Run):
    from ..models.registry import get_model

    try:
        return get_model(run.model)
    except KeyError:
        return None


def default_series(run: Run) -> str:
    """The series ``plot``/``fit`` use for ``run`` without ``--y``: the first of its model's
    ``default_series`` that the file has (then loss/test, loss/train), else, in a file without
    a simulated loss (a theory-only run, ``solver.integrator = "none"``), the first whose closed
    form ``theory/<series>`` it has; KeyError if none."""
    entry = _entry(run)
    prefs = tuple(
        dict.fromkeys((*(entry.analysis.default_series if entry is not None else ()), *_FALLBACK))
    )
    for s in (*prefs, *(f"theory/{p}" for p in prefs)):
        if s in run:
            return s
    have = ", ".join(k for k in sorted(run.series) if k.startswith(("loss", "theory/loss")))
    raise KeyError(
        f"{run.path}: none of the default series {', '.join(prefs)} nor their theory/…; it has "
        f"{have or 'no loss series'}"
    )


def is_theory_series(series: str) -> bool:
    """True for a closed-form series (``theory/…``)."""
    return series.startswith("theory/")


def loss_levels(run: Run) -> list[tuple[str, np.ndarray]]:
    """The reference levels of ``run``'s model present in the file: ``[(dataset, values)]``."""
    entry = _entry(run)
    names = entry.analysis.loss_levels if entry is not None else ()
    return [(n, np.atleast_1d(np.asarray(run[n], float))) for n in names if n in run]


def predicted_drops(run: Run) -> np.ndarray | None:
    """The model's predicted drop times in the file (``ModelEntry.analysis.drop_times``; entry m: the drop
    onto level m + 1 of its first level dataset), or None."""
    entry = _entry(run)
    name = entry.analysis.drop_times if entry is not None else None
    return np.atleast_1d(np.asarray(run[name], float)) if name and name in run else None


def level_label(run: Run, dataset: str) -> str | None:
    """The ``long_name`` a level's dataset was described with (e.g. "train-set minimum (P =
    5000)"; of "NAME: what it is", the NAME: "L*"), or None when it only carries its path."""
    ln = str(run.meta.get(dataset, {}).get("long_name", "") or "")
    if not ln or ln.strip("/") == dataset.strip("/"):
        return None
    name, sep, _ = ln.partition(": ")
    return name if sep and len(name) <= 40 else ln


def _time_units(run: Run) -> str:
    units = run.meta.get("time", {}).get("units", "gradient-flow time")
    return "tau" if units == "tau" or units.startswith("t/tau") else units


def time_label(runs: Sequence[Run]) -> str:
    """x label of a time axis in the units the files state (ValueError when they differ)."""
    units = {_time_units(r) for r in runs} or {"gradient-flow time"}
    if len(units) > 1:
        names = ", ".join(f"{r.path.name}: {_time_units(r)}" for r in runs)
        raise ValueError(f"the files state different time units ({names}); plot them separately")
    (u,) = units
    steps = bool(runs) and all("step" in r for r in runs)  # optimiser steps: discrete runs only
    if u == "tau":
        return "t/τ (paper time, 2η·step)" if steps else "t/τ (paper time)"
    if u == "gradient-flow time":
        return "t (gradient-flow time, η·step)" if steps else "t (gradient-flow time)"
    return f"t ({u})"


def series_name(series: str) -> str:
    """``loss/test`` → ``test loss L_test``; ``theory/…`` → ``theory: …``."""
    if series.startswith("theory/"):
        return "theory: " + series_name(series[len("theory/") :])
    return _NAMES.get(series, series)


def y_label(series: str) -> str:
    """y label of a loss series, with its units (losses are dimensionless)."""
    name = series_name(series)
    return f"{name} (dimensionless)" if series.split("/")[-2:-1] == ["loss"] else name


def run_labels(runs: Sequence[Run], labels: Sequence[str] | None = None) -> list[str]:
    """One legend label per run: ``labels`` (one per run, from ``--label``), else the file names
    (without .h5; the parent folder too where names repeat)."""
    if labels:
        if len(labels) != len(runs):
            raise ValueError(
                f"--label: give one per file ({len(runs)} files), got {len(labels)} labels"
            )
        return list(labels)
    stems = [r.path.stem for r in runs]
    if len(set(stems)) < len(stems):
        return [f"{r.path.parent.name}/{r.path.stem}" for r in runs]
    return stems
