"""fastdyn's command line: ``fastdyn [-v|-q] [--debug] COMMAND``; one module per command."""

from __future__ import annotations

import click

from .._version import __version__
from ._common import flag_option


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
@flag_option("-q", "--quiet", help="No progress or chatter on stderr.")
@flag_option("--debug", help="Show tracebacks for errors.")
@click.version_option(__version__, prog_name="fastdyn")
@click.pass_context
def main(ctx: click.Context, verbose: int, quiet: bool, debug: bool) -> None:
    """Simulate and analyse the learning dynamics of linear self-attention."""
    ctx.obj = {"verbosity": -1 if quiet else verbose, "debug": debug}


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
