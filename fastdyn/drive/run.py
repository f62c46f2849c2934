"""④ The one entry point that runs any registered model from a validated config into a file.

The model is looked up in the registry by ``cfg.model`` and handed to the driver of its kind:
trained models (a registered ``setup``) to :func:`fastdyn.drive.trained.run_trained`, ODE /
closed-form models to the ODE driver. The device (``drive/device.py``) is passed down as an
argument. Nothing here names a model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def supports_resume(model: str) -> bool:
    """Whether runs of ``model`` can continue a file from its checkpoint (KeyError: unknown)."""
    from ..models import registry

    return registry.get_model(model).kind in ("ode", "trained")


def refuse_existing(output: str | os.PathLike, overwrite: bool) -> None:
    """Raise unless ``output`` may be written: ``NotRegularFile`` for a directory or device node
    (always), ``FileExistsError`` for an existing file unless ``overwrite``."""
    from ..h5.lock import refuse_non_regular

    refuse_non_regular(output)
    if not overwrite and (os.path.exists(output) or os.path.islink(output)):
        raise FileExistsError(f"{output}: exists; pass overwrite=True to replace it")


def simulate(
    cfg: Any,
    output: str | os.PathLike,
    *,
    progress: bool | float = False,
    resume: bool = False,
    compile_beside: bool = False,
    overwrite: bool = False,
    grow: bool = False,
) -> str:
    """Run ``cfg`` (a validated config dataclass), stream it to ``output``; returns the status text.

    ``resume`` continues the file ``output`` from its checkpoint. ``progress``: ``True`` a bar on
    a terminal, else a line on stderr every 30 s; a number: every that many seconds
    (:mod:`fastdyn.drive.progress`). ``compile_beside``: on a cold numba cache, compile the
    kernels the run reaches last in a second process (:mod:`fastdyn.drive.compile_beside`; the
    ``fastdyn simulate`` command sets it). ``overwrite``: replace an existing ``output`` file;
    without it an existing file raises ``FileExistsError`` and is left untouched (as
    ``fastdyn simulate`` without ``--overwrite``). A path that is not a regular file (a
    directory, ``/dev/null``, a FIFO) is never replaced
    (:class:`~fastdyn.h5.lock.NotRegularFile`). ``grow`` (with ``resume``): ``cfg`` adds
    optimiser steps or output times after the file's and the file takes it as its config; the
    rows written must be ``cfg``'s first rows, else :class:`~fastdyn.drive.lifecycle.GridChanged`
    and the file is left as it was (``fastdyn simulate --resume FILE --set schedule.epochs=…``
    checks the rest of the config first).
    """
    from ..core.device import Device
    from ..h5.writer import DiskFull, WriteFailed
    from ..models import registry
    from .checkpoint import write_error
    from .device import resolve
    from .lifecycle import RunRequest
    from .outcome import RunFailed

    if not resume:
        refuse_existing(output, overwrite)
    entry = registry.get_model(cfg.model)
    device = Device.of(resolve(cfg))
    if entry.kind == "trained":
        from .trained import run_trained as run
    else:
        from .ode_run import run_ode as run
    from . import compile_beside as cb

    if progress is not False:
        from .progress import compile_notice

        compile_notice()
    beside = cb.start(entry, cfg, device) if compile_beside else None
    try:
        request = RunRequest(
            entry, cfg, Path(output), progress, resume, device, beside, grow, compile_beside
        )
        return run(request)
    except (DiskFull, WriteFailed) as e:  # creating, closing or compacting the file
        raise RunFailed(write_error(output, e)) from None
    finally:
        if beside is not None:
            beside.close()
