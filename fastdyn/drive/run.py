"""④ The one entry point that runs any registered model from a validated config into a file."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any


def supports_resume(model: str) -> bool:
    """Whether the registered runner of ``model`` can continue a file from its checkpoint."""
    from ..models import registry

    return "resume" in inspect.signature(registry.get_model(model).run).parameters


def simulate(cfg: Any, output: str | os.PathLike, *, progress: bool = False, resume: bool = False) -> str:
    """Run ``cfg`` (a validated config dataclass), stream it to ``output``; returns the status text.

    The model is looked up in the registry by ``cfg.model``; nothing here special-cases one.
    ``resume`` continues the file ``output`` from its checkpoint (runners that take ``resume``).
    """
    from .. import _device
    from ..models import registry
    from .device import resolve

    entry = registry.get_model(cfg.model)
    with _device.using(resolve(cfg)):
        return _run(entry, cfg, output, progress, resume)


def _run(entry: Any, cfg: Any, output: str | os.PathLike, progress: bool, resume: bool) -> str:
    if resume:
        if not supports_resume(cfg.model):
            raise ValueError(f"--resume: not supported for {cfg.model!r} runs (they keep no checkpoint)")
        return entry.run(cfg, Path(output), progress=progress, resume=True)
    return entry.run(cfg, Path(output), progress=progress)
