"""Models: what a model package declares (:class:`ModelEntry`, with its :class:`RunHooks`,
:class:`AnalysisHooks` and :class:`WarmupHooks`) and, for a per-task ODE model given
as maths only, :class:`OdeMaths`; the registry of every model by name (``registry``)."""

from ._spec import (
    AnalysisHooks,
    Cutoff,
    FastPath,
    ModelEntry,
    NoLaw,
    OdeMaths,
    RunHooks,
    ScalingTheory,
    Theory,
    TrainedSetup,
    WarmupHooks,
    stored_value,
)

__all__ = [
    "AnalysisHooks",
    "Cutoff",
    "ModelEntry",
    "NoLaw",
    "FastPath",
    "OdeMaths",
    "RunHooks",
    "ScalingTheory",
    "Theory",
    "TrainedSetup",
    "WarmupHooks",
    "stored_value",
]
