"""Models: what a model package declares (:class:`ModelEntry`) and, for a per-task ODE model given
as maths only, :class:`OdeMaths`; the registry of every model by name (``registry``)."""

from ._spec import (
    Cutoff,
    FastPath,
    ModelEntry,
    NoLaw,
    OdeMaths,
    ScalingTheory,
    Theory,
    TrainedSetup,
    stored_value,
)

__all__ = [
    "Cutoff",
    "ModelEntry",
    "NoLaw",
    "FastPath",
    "OdeMaths",
    "ScalingTheory",
    "Theory",
    "TrainedSetup",
    "stored_value",
]
