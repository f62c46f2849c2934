"""Shared CLI plumbing: one-line user errors (exit 2), runtime failures (exit 1), --debug tracebacks."""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
import threading
import traceback

import click

EXIT_USER = 2
EXIT_RUNTIME = 1
#: exit status when the reader closed stdout: 128 + SIGPIPE, as a shell reports a piped command
EXIT_PIPE = 141


def _user_errors() -> tuple[type[BaseException], ...]:
    """The exception classes that are the user's to fix (imported when an error happens, so a
    command's ``--help`` loads neither h5py nor numba)."""
    from ..config.schema import ConfigError
    from ..h5.lock import WriterBusy
    from ..h5.reader import FileFormatError

    return (ConfigError, FileFormatError, WriterBusy)


class UserError(click.ClickException):
    """A mistake the user can fix: printed as one line, exit code 2."""

    exit_code = EXIT_USER

    def format_message(self) -> str:
        return self.message

    def show(self, file=None) -> None:
        click.echo(f"fastdyn: error: {self.message}", err=True)


#: set by the process entry (``fastdyn`` on the command line): the CLI may then decide how the
#: process ends; never set when a command runs inside another program (click's CliRunner)
_process = {"entry": False}


def process_entry() -> None:
    """Called once by the ``fastdyn`` program before its command runs: a SIGINT/SIGTERM that
    arrives once the command has finished, while the interpreter shuts down, ends the process
    with one line and 128 + its number, not with a KeyboardInterrupt or a death by the signal
    (Python restores the default handlers part-way through its shutdown; the command's files are
    closed by then). The atexit hook below runs after every other one (the first registered is
    the last run) and leaves the signals ignored for the rest of the teardown, which then exits
    with the command's status."""
    if threading.current_thread() is not threading.main_thread() or _process["entry"]:
        return
    _process["entry"] = True
    atexit.register(_ignore_signals)


def _ignore_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _late_signal(signum: int, frame: object) -> None:
    name = signal.Signals(signum).name
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 — a closed pipe, a reentrant flush: nothing to save
            pass
    try:
        os.write(
            2, f"fastdyn: {name} while exiting: ending now (the command had finished)\n".encode()
        )
    except OSError:
        pass
    os._exit(128 + signum)


def command_finished() -> None:
    """The command of the ``fastdyn`` program has returned or raised: from here on a SIGINT or
    SIGTERM ends the process at once (:func:`process_entry`). Nothing outside the program."""
    if not _process["entry"] or threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _late_signal)


def guarded(fn):
    """Turn config/file errors into one-line exit-2 errors and crashes into exit 1 (traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        debug = bool((ctx.obj or {}).get("debug"))
        try:
            try:
                return fn(*args, **kwargs)
            finally:
                command_finished()  # its first statement: no window for a KeyboardInterrupt
        except KeyboardInterrupt:  # Ctrl-C outside a run's handlers (start-up, checks, its end)
            click.echo("fastdyn: interrupted (SIGINT)", err=True)
            sys.exit(130)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except BrokenPipeError:  # stdout closed by the reader (`fastdyn sweep … --list | head`)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
            sys.exit(EXIT_PIPE)
        except Exception as e:
            if isinstance(e, _user_errors()):
                if debug:
                    traceback.print_exc()
                raise UserError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
            # a runtime failure: the user sees one line unless --debug
            if debug:
                traceback.print_exc()
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            click.echo(f"fastdyn: failed: {msg} (rerun with --debug for the traceback)", err=True)
            sys.exit(EXIT_RUNTIME)

    return wrapper


def check_utf8(what: str, name: str) -> None:
    """UserError when the path ``name`` given for ``what`` (CONFIG, --resume) is not valid UTF-8:
    the file it names may exist, but fastdyn records its command line and paths in the output
    file as UTF-8 text."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise UserError(
            f"{what} {shown}: the file name is not valid UTF-8 (fastdyn records it in the output file as text); rename the file to a UTF-8 name"
        ) from None


def output_option(help: str, *, directory: bool = False, required: bool = False):
    """``-o/--output``: the file to write (``directory``: the folder to write into)."""
    path = click.Path(file_okay=False) if directory else click.Path(dir_okay=False)
    return click.option("-o", "--output", required=required, type=path, help=help)


def sets_option(help: str):
    """``--set KEY=VALUE`` (repeatable): config overrides, passed as ``sets``."""
    return click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=help)


def flag_option(*decls: str, help: str):
    """A boolean flag (``--overwrite``; a second name in ``decls``: the parameter's)."""
    return click.option(*decls, is_flag=True, help=help)


def count_option(*decls: str, help: str):
    """A count ≥ 1 (``--workers N``), None when not given."""
    return click.option(*decls, type=click.IntRange(min=1), help=help)


#: ``--threads N``: numba's thread count for a run in this process (see :func:`set_threads`)
threads_option = click.option("--threads", type=int, help="numba threads [default: all cores].")


def verbosity(ctx: click.Context) -> int:
    """-1 quiet, 0 normal, ≥1 verbose."""
    return int((ctx.obj or {}).get("verbosity", 0))


def note_printer(ctx: click.Context):
    """Where a command's one-line notes go (``fastdyn: note: …`` on stderr; nothing under -q)."""

    def note(line: str) -> None:
        if verbosity(ctx) >= 0:
            click.echo(f"fastdyn: {line}", err=True)

    return note


def set_threads(threads: int) -> None:
    """``--threads``: numba's thread count for this run, 1 … NUMBA_NUM_THREADS (UserError else)."""
    import numba

    top = numba.config.NUMBA_NUM_THREADS
    if not 1 <= threads <= top:
        raise UserError(
            f"--threads: must be between 1 and {top} (NUMBA_NUM_THREADS), got {threads}"
        )
    numba.set_num_threads(threads)
