"""fastdyn's command line: ``fastdyn [-v|-q] [--debug] COMMAND``; one module per command."""

from __future__ import annotations

from ._group import main

__all__ = ["main"]


def _register() -> None:
    from . import config, inspect, plot, repair, simulate, warmup

    for mod in (simulate, inspect, plot, repair, config, warmup):
        main.add_command(mod.command)
    for optional in ("theory", "fit", "sweep", "validate"):
        try:
            mod = __import__(f"{__name__}.{optional}", fromlist=["command"])
        except ImportError:
            continue
        main.add_command(mod.command)


_register()
