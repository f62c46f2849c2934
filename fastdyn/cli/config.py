"""``fastdyn config keys [MODEL]``: the config reference, generated from the schema."""

from __future__ import annotations

import click

from ._common import guarded


@click.group("config")
def command() -> None:
    """What a config may contain (docs/config.md is the same reference, generated)."""


@command.command("keys")
@click.argument("model", required=False)
@click.option(
    "--markdown", is_flag=True, help="Print docs/config.md (markdown tables) instead of plain text."
)
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
