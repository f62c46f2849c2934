"""``fastdyn simulate CONFIG``: run one config and stream it to an HDF5 file."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from ._common import (
    UserError,
    check_utf8,
    flag_option,
    guarded,
    note_printer,
    output_option,
    set_threads,
    sets_option,
    threads_option,
    verbosity,
)


@click.command("simulate")
@click.argument("config", required=False)
@output_option(
    "Output HDF5 file [default: results/<config name>.h5]; missing parent directories are created."
)
@sets_option("Override a config value, e.g. --set task.n_tasks=1000 (repeatable).")
@threads_option
@flag_option("--overwrite", help="Replace an existing output file.")
@flag_option("--quiet", help="No progress on stderr (fastdyn -q: nothing at all).")
@click.option(
    "--progress-every",
    "every",
    metavar="SECONDS",
    help="Without a terminal (a batch job's stderr in a file): a progress line every SECONDS [default: 30].",
)
@click.option(
    "--resume",
    "resume",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Continue an interrupted or crashed run FILE from its checkpoint (CONFIG/--set, if given, must match the file's), or grow a finished one with --set schedule.epochs=N or --set time.t_max=T (every written row kept; a file made without output.keep_checkpoint = true first replays the run from its start, checking each row against the file's: about the original run's time).",
)
@flag_option(
    "--force",
    help="With --resume: accept a config that differs from the file's in result-neutral fields only (output.checkpoint_every, output.times_per_segment).",
)
@flag_option(
    "--check",
    help="Validate CONFIG (and --set) and exit: 0 valid, 2 invalid; nothing is written.",
)
@click.option(
    "--device",
    type=click.Choice(("cpu", "cuda")),
    default=None,
    help="Where the kernels run (overrides the config's `device`; cuda needs a GPU and numba-cuda: docs/cuda.md).",
)
@click.pass_context
@guarded
def command(
    ctx: click.Context,
    config: str | None,
    output: str | None,
    sets: tuple[str, ...],
    threads: int | None,
    overwrite: bool,
    quiet: bool,
    every: str | None,
    resume: str | None,
    force: bool,
    check: bool,
    device: str | None,
) -> None:
    """Run CONFIG (a TOML file or a preset name such as 'quickstart'; default: the built-in defaults).

    Progress goes to stderr: a bar on a terminal, else a line every 30 s (rows written, model
    time, step, rate, ETA); a first SIGINT/SIGTERM is acknowledged at once."""
    from ..config import load_config
    from ..config.presets import resolve
    from ..drive.run import simulate

    progress = _progress(ctx, quiet, every)
    if config:
        check_utf8("CONFIG", config)
    if resume is not None:
        check_utf8("--resume", resume)
    path = resolve(config) if config else None
    if device is not None:
        sets = (*sets, f'device="{device}"')
    wants_cuda = [s for s in sets if s.replace(" ", "").split("=", 1)[0] == "device"][-1:]
    if wants_cuda and "cuda" in wants_cuda[0] and not check:
        from ..drive.device import check_available

        check_available("cuda")  # before the config's own rules: one line, exit 2, nothing written
    if resume is not None:
        from ._resume import resume_run

        sys.exit(resume_run(ctx, Path(resume), path, sets, force, output, threads, progress))
    cfg = load_config(path, sets, note=note_printer(ctx))
    if check:
        click.echo(f"{config or 'defaults'}: valid {cfg.model} config")
        return
    if threads is not None:
        set_threads(threads)
    stem = Path(path).stem if path else "fastdyn"
    if output is not None and output.endswith("/"):  # Path() would drop the slash: a file "new"
        raise UserError(f"--output {output}: names a directory; give a file name")
    out = Path(output) if output else Path("results") / f"{stem}.h5"
    _check_output(out, overwrite)
    from ..drive.checkpoint import StopSignals

    with StopSignals(acknowledge=progress is not False):
        outcome = simulate(cfg, out, progress=progress, compile_beside=True, overwrite=overwrite)
    if verbosity(ctx) >= 0:
        click.echo(f"{out}: {outcome}", err=True)
    from ..drive.outcome import Status

    status = Status.parse(outcome)
    if status.exit_code:
        sys.exit(status.exit_code)


def _progress(ctx: click.Context, quiet: bool, every: str | None) -> bool | float:
    """The drivers' ``progress``: False when quiet, else the seconds between batch-log lines."""
    seconds = 30.0
    if every is not None:
        try:
            seconds = float(every)
        except ValueError:
            seconds = float("nan")
        if not 0 < seconds <= 1e9:
            raise UserError(
                f"--progress-every: must be a number of seconds > 0 and ≤ 1e9, got {every!r}"
            )
    return False if quiet or verbosity(ctx) < 0 else seconds


#: bytes the writer adds to the output's name for the files it keeps beside it (``.NAME.tmp-PID``)
_BESIDE_NAME_BYTES = len(".") + len(".tmp-") + 10


def _check_name(out: Path) -> None:
    """The output's name is UTF-8 (it is stored in the file) and leaves room for the names of
    the files the writer keeps beside it, within the file system's name limit."""
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(out).encode("utf-8", "backslashreplace").decode()
        raise UserError(
            f"--output {shown}: the name is not valid UTF-8; give a UTF-8 name"
        ) from None
    parent = out.parent if str(out.parent) else Path(".")
    try:
        limit = os.pathconf(parent if parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(out.name))
    if size + _BESIDE_NAME_BYTES > limit:
        raise UserError(
            f"--output {out.name[:40]}…: the file name is {size} bytes; at most {limit - _BESIDE_NAME_BYTES} (room for the temporary .NAME.tmp-PID beside it)"
        )


def _check_output(out: Path, overwrite: bool) -> None:
    from ..h5.lock import non_regular_kind

    _check_name(out)
    kind = non_regular_kind(out)  # never replaced, with or without --overwrite
    if kind == "a directory":
        raise UserError(f"--output {out}: is a directory; give a file name")
    if kind is not None:
        raise UserError(f"--output {out}: is {kind}, not a regular file; give a file path")
    if out.exists() and not overwrite:
        raise UserError(f"--output {out}: exists; pass --overwrite to replace it")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        try:
            parent.mkdir(parents=True)
        except OSError as e:
            raise UserError(
                f"--output {out}: cannot create directory {parent} ({e.strerror})"
            ) from None
    if not parent.is_dir():
        raise UserError(f"--output {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UserError(f"--output {out}: not writable")
    try:  # the permission bits can say yes where the file system says no (read-only, sysfs, root squash)
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise UserError(
            f"--output {out}: cannot create files in {parent} ({e.strerror or e})"
        ) from None
