"""④ The one entry point that runs any registered model from a validated config into a file.

The model is looked up in the registry by ``cfg.model`` and handed to the driver of its kind:
trained models (a registered ``setup``) to :func:`fastdyn.drive.trained.run_trained`, ODE /
closed-form models to the ODE driver. Nothing here names a model.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def supports_resume(model: str) -> bool:
    """Whether runs of ``model`` can continue a file from its checkpoint (KeyError: unknown)."""
    from ..models import registry

    return registry.get_model(model).kind in ("ode", "trained")


def tools() -> SimpleNamespace:
    """Drive-level functions a model's setup may call (models never import ``drive``)."""
    from .integrate import integrate_gd

    return SimpleNamespace(integrate_gd=integrate_gd)


def simulate(
    cfg: Any, output: str | os.PathLike, *, progress: bool = False, resume: bool = False
) -> str:
    """Run ``cfg`` (a validated config dataclass), stream it to ``output``; returns the status text.

    ``resume`` continues the file ``output`` from its checkpoint.
    """
    from .. import _device
    from ..models import registry
    from .device import resolve

    entry = registry.get_model(cfg.model)
    with _device.using(resolve(cfg)):
        if entry.kind == "trained":
            from .trained import run_trained

            return run_trained(
                entry, cfg, Path(output), progress=progress, resume=resume, tools=tools()
            )
        from .msfr_run import run_ode

        return run_ode(entry, cfg, Path(output), progress=progress, resume=resume)
