"""``fastdyn inspect FILE``: config, status and the series with their shapes."""

from __future__ import annotations

import click

from ._common import guarded


@click.command("inspect")
@click.argument("file")
@click.option("--config/--no-config", "show_config", default=True, help="Print the stored config.")
@guarded
def command(file: str, show_config: bool) -> None:
    """Describe a fastdyn HDF5 FILE."""
    import h5py

    from ..h5.reader import open_file

    f = open_file(file)
    try:
        a = f.attrs
        get = lambda k: (lambda v: v.decode() if isinstance(v, bytes) else v)(a.get(k, ""))  # noqa: E731
        click.echo(f"file:     {file}")
        click.echo(f"model:    {get('model')}")
        click.echo(f"status:   {get('status')}")
        click.echo(f"format:   {get('format')} v{get('format_version')}  ({get('generated_by')})")
        click.echo(f"seed:     {get('seed')}")
        click.echo(f"timings:  {get('timings')}")
        click.echo("series:")

        def show(name, obj):
            if "/" in name and name.rsplit("/", 1)[1] in ("time", "index"):
                return  # hard links of the dimension scales into series groups
            if isinstance(obj, h5py.Dataset):
                units = obj.attrs.get("units", "")
                units = units.decode() if isinstance(units, bytes) else units
                click.echo(f"  /{name:28s} {str(obj.shape):>14s} {obj.dtype}  [{units}]")

        f.visititems(show)
        if show_config:
            click.echo("config:")
            for line in str(get("config")).splitlines():
                click.echo("  " + line)
    finally:
        f.close()
