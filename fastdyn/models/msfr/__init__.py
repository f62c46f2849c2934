"""MSFR: per-task (v, w) gradient flow, its closed forms and scaling laws (spec msfr.md)."""

from .. import _spec
from .setup import setup

_spec.register(
    _spec.ModelEntry(
        name="msfr",
        kind="ode",
        summary="multitask sparse feature regression: per-task v/w gradient flow and closed forms",
        setup=setup,
    )
)
