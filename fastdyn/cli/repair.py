"""``fastdyn repair FILE``: make a killed run's file a plain, closed file that any reader opens."""

from __future__ import annotations

import click

from ._common import UserError, guarded


@click.command("repair")
@click.argument("file")
@guarded
def command(file: str) -> None:
    """Close a killed run's FILE for every reader (h5py, xarray): every flushed row is kept,
    status becomes "interrupted", and ``fastdyn simulate --resume FILE`` still continues it."""
    from ..h5.reader import FileFormatError, open_file
    from ..h5.repair import NothingToRepair, repair

    open_file(file).close()  # one clear line for a missing, damaged or non-fastdyn file
    try:
        status = repair(file)
    except NothingToRepair as e:
        click.echo(str(e))
        return
    except FileFormatError:  # one line naming the file and what is damaged (exit 2)
        raise
    except (OSError, ValueError) as e:
        raise UserError(
            f"{file}: cannot repair ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    click.echo(f"{file}: {status}")
