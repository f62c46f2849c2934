"""fastdyn: compiled-kernel simulator of linear self-attention learning dynamics.

Public API: :func:`load` (read an output file), :func:`load_many` (several files, globs or a
sweep index as a table), :func:`simulate` (run a config into a file), :func:`load_config`, and
the package version.
"""

from __future__ import annotations

from ._version import __version__
from .analysis.load import load_many
from .config import load_config
from .drive.run import simulate
from .h5.reader import load

__all__ = ["__version__", "load", "load_config", "load_many", "simulate"]
