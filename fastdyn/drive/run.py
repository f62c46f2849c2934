"""④ The one entry point that runs any registered model from a validated config into a file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def simulate(cfg: Any, output: str | os.PathLike, *, progress: bool = False) -> str:
    """Run ``cfg`` (a validated config dataclass), stream it to ``output``; returns the status text.

    The model is looked up in the registry by ``cfg.model``; nothing here special-cases one.
    """
    from ..models import registry

    entry = registry.get_model(cfg.model)
    return entry.run(cfg, Path(output), progress=progress)
