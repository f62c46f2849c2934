"""fastdyn: compiled-kernel simulator of linear self-attention learning dynamics.

Public API: :func:`load` (read an output file), :func:`load_many` (several files, globs or a
sweep index as a table), :func:`simulate` (run a config into a file), :func:`load_config`, and
the package version.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .analysis.load import load_many  # noqa: E402
from .config import load_config  # noqa: E402
from .drive.run import simulate  # noqa: E402
from .h5.reader import load  # noqa: E402

__all__ = ["__version__", "load", "load_config", "load_many", "simulate"]
