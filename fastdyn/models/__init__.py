"""Models: what a model package declares (:class:`ModelEntry`) and, for a per-task ODE model given
as maths only, :class:`OdeMaths`; the registry of every model by name (``registry``)."""

from ._spec import ModelEntry, OdeMaths, OdeSetup, TrainedSetup

__all__ = ["ModelEntry", "OdeMaths", "OdeSetup", "TrainedSetup"]
