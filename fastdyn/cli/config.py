"""``fastdyn config keys [MODEL]``: the config reference, generated from the schema; ``fastdyn config
models``: every model fastdyn finds, and the package it comes from."""

from __future__ import annotations

import click

from ._common import flag_option, guarded


@click.group("config")
def command() -> None:
    """What a config may contain (docs/config.md is the same reference, generated)."""


@command.command("keys")
@click.argument("model", required=False)
@flag_option("--markdown", help="Print docs/config.md (markdown tables) instead of plain text.")
@guarded
def keys_cmd(model: str | None, markdown: bool) -> None:
    """Every config key of MODEL (default: every model): type, default, allowed values, units, meaning."""
    from ..config import reference
    from ..config.load import schema_for
    from ..models import registry

    names = None
    if model is not None:
        schema_for(model)  # an unknown model: one line naming the known ones, exit 2
        names = [model]
    if markdown:
        summaries = {m: registry.get_model(m).summary for m in registry.model_names()}
        click.echo(reference.markdown(names, summaries), nl=False)
    else:
        click.echo(reference.text(names), nl=False)


@command.command("models")
@guarded
def models_cmd() -> None:
    """Every model fastdyn finds (its own and installed plug-ins): name, kind, devices, summary and
    the package and entry point it comes from."""
    from .. import plugins

    for name, source in plugins.sources().items():
        e = plugins.get(name)
        click.echo(f"{name}  [{e.kind}; {', '.join(e.run.devices)}]  {e.summary}")
        click.echo(f"    from {source}")
    for name, why in plugins.broken().items():
        click.echo(f"{name}  [not loaded]  {why}")
