"""The ``fastdyn`` click group (``-v``/``-q``/``--debug``/``--version``) and its one-line usage
errors; :mod:`fastdyn.cli` registers every command on it."""

from __future__ import annotations

import click

from .._version import __version__
from ._common import UserError, command_finished, flag_option, process_entry


def one_line(e: click.UsageError) -> UserError:
    """Click's usage error (a bad ``--device``, an unknown option, a missing argument) as every
    other mistake reads: one line naming the option and what is allowed, exit 2, no usage block."""
    if isinstance(e, click.BadParameter) and e.param is not None and e.message:
        hint = e.param_hint or (e.param.opts[-1] if e.param.opts else e.param.name)
        names = hint if isinstance(hint, str) else " / ".join(hint)
        text = f"{names.replace(chr(39), '')}: {e.message.rstrip('.')}"
    else:
        text = e.format_message().rstrip(".")
    where = e.ctx.command_path if e.ctx is not None else "fastdyn"
    return UserError(f"{text} (see `{where} --help`)")


#: the usage "error" that shows a group's help when it is called without a command (click ≥ 8.2)
_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class OneLineErrors(click.Group):
    """The ``fastdyn`` group: usage errors of itself and of every command are one line."""

    def __call__(self, *args, **kwargs):
        """The ``fastdyn`` program (console script, ``python -m fastdyn``; click's CliRunner
        calls :meth:`main` instead): a SIGINT or SIGTERM at any moment ends it with one line and
        128 + its number, never a traceback or a death by the signal."""
        process_entry()
        try:
            try:
                return self.main(*args, **kwargs)
            finally:
                command_finished()
        except KeyboardInterrupt:  # in click's own code, outside any command
            click.echo("fastdyn: interrupted (SIGINT)", err=True)
            raise SystemExit(130) from None

    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except _HELP:  # `fastdyn` alone (or a group of commands alone): its help, as click shows it
            raise
        except click.UsageError as e:
            raise one_line(e) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except _HELP:
            raise
        except click.UsageError as e:
            raise one_line(e) from None


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
@flag_option("-q", "--quiet", help="No progress or chatter on stderr.")
@flag_option("--debug", help="Show tracebacks for errors.")
@click.version_option(__version__, prog_name="fastdyn")
@click.pass_context
def main(ctx: click.Context, verbose: int, quiet: bool, debug: bool) -> None:
    """Simulate and analyse the learning dynamics of linear self-attention."""
    ctx.obj = {"verbosity": -1 if quiet else verbose, "debug": debug}
