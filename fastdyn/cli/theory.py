"""``fastdyn theory COMMAND``: tables of theory predictions (no files involved).

Each model package declares its commands in the ``fastdyn.theory`` entry-point group (the
command's name → a click command; fastdyn's own are in its ``pyproject.toml``), the way click
plug-ins are found. A command is imported only when listed or run, and runs under
:func:`guarded`: a ConfigError or ValueError it raises for bad input is one line, exit 2.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import click

from ._common import guarded

GROUP = "fastdyn.theory"


class _PluginCommands(click.Group):
    """A group whose commands are the ``fastdyn.theory`` entry points (the first of a name wins)."""

    def _points(self) -> dict:
        points: dict = {}
        for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
            points.setdefault(ep.name, ep)
        return points

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._points())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        ep = self._points().get(cmd_name)
        if ep is None:
            return None
        try:
            cmd = ep.load()
        except Exception as e:  # a broken plug-in: say which, keep the others
            raise click.ClickException(f"theory {cmd_name}: cannot load {ep.value}: {e}") from None
        return _guard(cmd)


def _guard(cmd: click.Command) -> click.Command:
    """``cmd`` with its callback under :func:`guarded`, ValueError taken as the user's."""
    if cmd.callback is None or getattr(cmd.callback, "_fastdyn_guarded", False):
        return cmd
    inner = cmd.callback

    def as_user_error(*args, **kwargs):
        from ..config.schema import ConfigError

        try:
            return inner(*args, **kwargs)
        except ValueError as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None

    cmd.callback = guarded(as_user_error)
    cmd.callback._fastdyn_guarded = True  # type: ignore[attr-defined]
    return cmd


@click.group("theory", cls=_PluginCommands)
def command() -> None:
    """Theory predictions: scaling exponents, plateau losses, fixed points, ... (each installed
    model package adds its own commands)."""
