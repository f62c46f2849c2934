"""Models by name: every ``fastdyn.models`` entry point, built in or installed (:mod:`fastdyn.plugins`).

Only the entry points name models: fastdyn's own are declared in its ``pyproject.toml`` like any
plug-in's. Trained models register a ``setup`` that the trained-model driver runs; ODE models one
that the ODE driver runs (``drive/run.py`` picks the driver by ``kind``).
"""

from __future__ import annotations

from .. import plugins
from ._spec import ModelEntry, get, names, register


def get_model(name: str) -> ModelEntry:
    """The entry of model ``name`` (KeyError naming the known models otherwise)."""
    return get(name)


def model_names() -> list[str]:
    """Every model's name, sorted."""
    return names()


def model_sources() -> dict[str, str]:
    """Model name → the package (and entry point) it comes from."""
    return plugins.sources()


__all__ = ["ModelEntry", "get_model", "model_names", "model_sources", "register"]
