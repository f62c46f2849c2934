"""fastdyn: compiled-kernel simulator of linear self-attention learning dynamics.

Public API: :func:`load` (read an output file), :func:`load_many` (several files, globs or a
sweep index as a table), :func:`simulate` (run a config into a file), :func:`load_config`, and
the package version. They are imported on first use, so ``import fastdyn.cli`` (``fastdyn --help``,
one-line user errors) does not load numba.
"""

from __future__ import annotations

from . import (
    _cache,  # noqa: F401  (numba's cache directory, before any kernel is defined)
    _threads,  # noqa: F401  (idle kernel threads sleep: OMP_WAIT_POLICY=PASSIVE)
)
from ._lazy import lazy_attributes
from ._version import __version__

__all__ = ["__version__", "load", "load_config", "load_many", "simulate"]

_LAZY = {
    "load": "fastdyn.h5.reader",
    "load_many": "fastdyn.analysis.load",
    "load_config": "fastdyn.config",
    "simulate": "fastdyn.drive.run",
}


_SUBPACKAGES = {"analysis", "cli", "config", "drive", "h5", "models", "problems", "reduce", "sweep"}

__getattr__, __dir__ = lazy_attributes("fastdyn", globals(), _LAZY, _SUBPACKAGES)
