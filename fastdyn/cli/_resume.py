"""``fastdyn simulate --resume FILE``: the checks before a file is continued (docs/reliability.md).

Everything that can be the user's to fix is one line and exit 2: a missing, truncated or damaged
file, a complete run given nothing to add, a model that keeps no checkpoint, a file another process
still writes, and a CONFIG/--set that differs from the file's config. Fields that do not change the
numbers (:data:`NEUTRAL`) may differ with ``--force``; the step and time grid may grow
(:mod:`fastdyn.cli._grow`: more epochs, a later t_max, every written row kept); any other
difference is refused, because it would change rows already written.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from ..h5.reader import FileFormatError
from ._common import UserError, set_threads, verbosity
from ._grow import check_growing, extend_time, grid_key

#: config fields that change how a run is cut up or saved, never its numbers
NEUTRAL = ("output.checkpoint_every", "output.times_per_segment", "output.keep_checkpoint")


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _stored(file: Path) -> tuple[str, str, dict, bool]:
    """(status, model, config dict, whether it has /checkpoint) of ``file``, after checking that
    the file and its checkpoint can be read (FileFormatError otherwise)."""
    from ..h5.reader import open_file
    from ..h5.verify import DamagedData, read_verified
    from ..h5.writer import read_checkpoint

    f = open_file(file)
    try:
        a = f.attrs
        get = lambda k: (lambda v: v.decode() if isinstance(v, bytes) else str(v))(a.get(k, ""))  # noqa: E731
        from ..h5.writer import check_identity

        try:
            check_identity(a, file)
        except ValueError as e:
            raise FileFormatError(str(e)) from None
        if "identity_crc32" not in a:  # both it and the attribute listing it are gone
            raise FileFormatError(
                f"{file}: no identity checksum (root attribute identity_crc32): its rows cannot be shown to come from its config, so it is not resumed; run the config again"
            )
        status, model, text = get("status"), get("model"), get("config")
        try:
            config = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError):
            raise FileFormatError(f"{file}: damaged config attribute") from None
        if "time" not in f:
            raise FileFormatError(f"{file}: damaged file (no /time)")
        read_checkpoint(f)

        def verify(name: str, obj: Any) -> None:
            import h5py

            if isinstance(obj, h5py.Dataset):
                read_verified(obj)  # every dataset's checksum (a torn last chunk: verified)

        f.visititems(verify)
        return status, model, config, "checkpoint" in f
    except FileFormatError:
        raise
    except DamagedData as e:  # names the dataset
        raise FileFormatError(f"{file}: damaged file ({e})") from None
    except Exception as e:  # noqa: BLE001 — any failure to read it means a damaged file
        raise FileFormatError(
            f"{file}: damaged file ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"[
                :300
            ]
        ) from None
    finally:
        f.close()


def resume_run(
    ctx: click.Context,
    file: Path,
    config_path: str | None,
    sets: tuple[str, ...],
    force: bool,
    output: str | None,
    threads: int | None,
    progress: bool | float,
) -> int:
    """Take the file's writer lock, check, then continue ``file``; returns the exit code
    (``progress``: as :func:`fastdyn.drive.run.simulate` takes it, ``False`` when quiet)."""
    if output is not None and Path(output).resolve() != file.resolve():
        raise UserError(f"--output {output}: not used with --resume (the run continues in {file})")
    if not file.exists():
        _stored(file)  # the one-line message for a missing file
    if not file.is_file():
        raise UserError(f"--resume {file}: not a regular file")
    from ..h5.lock import WriterLock

    try:  # before reading anything: a second resume must not touch a file another one writes
        with _refusals(file):
            lock = WriterLock(file).acquire()
    except OSError as e:
        raise UserError(
            f"--resume {file}: cannot create its lock file beside it ({e.strerror}); the directory must be writable"
        ) from None
    try:
        return _resume_locked(ctx, file, config_path, sets, force, threads, progress)
    finally:
        lock.release()


@contextmanager
def _refusals(file: Path, growing: list[str] | tuple[str, ...] = ()) -> Iterator[None]:
    """A resume's foreseen refusals as one-line user errors: another writer holds the file's lock,
    the grown time grid does not begin with the file's, the replay does not repeat the file."""
    from ..drive.lifecycle import GridChanged
    from ..drive.replay import ReplayMismatch

    try:
        yield
    except BlockingIOError as e:
        raise UserError(f"--resume {e}") from None
    except GridChanged as e:
        raise UserError(f"--resume {file}: {', '.join(growing)}: {e}") from None
    except ReplayMismatch as e:
        raise UserError(
            f"--resume {file}: the replay does not repeat the file: {e}; the file is left as it was (made by another fastdyn version or machine, or changed since; a run made with --set output.keep_checkpoint=true grows without a replay)"
        ) from None


def _resume_locked(
    ctx: click.Context,
    file: Path,
    config_path: str | None,
    sets: tuple[str, ...],
    force: bool,
    threads: int | None,
    progress: bool | float,
) -> int:
    from ..config import load_config
    from ..config.load import apply_sets, from_dict, to_dict
    from ..drive.checkpoint import StopSignals, exit_code
    from ..drive.replay import announcing, needs_replay
    from ..drive.run import simulate, supports_resume

    status, model, stored, has_checkpoint = _stored(file)
    complete = status.startswith("complete")
    try:
        known = supports_resume(model)
    except Exception:  # noqa: BLE001 — an unknown model name in the file
        raise FileFormatError(f"{file}: unknown model {model!r}") from None
    if not known:
        raise UserError(
            f"--resume {file}: resuming {model!r} runs is not supported (they keep no checkpoint); run it again with --overwrite"
        )
    try:
        cfg_file = from_dict(stored)
    except ValueError as e:
        raise FileFormatError(
            f"{file}: its stored config does not validate ({str(e).splitlines()[0]})"
        ) from None
    cfg, growing, note = cfg_file, [], None
    if config_path is not None or sets:
        given = (
            to_dict(
                load_config(config_path, sets, note=lambda _line: None)
            )  # the first run said it
            if config_path is not None
            else apply_sets(to_dict(cfg_file), list(sets))
        )
        a = _flat(to_dict(cfg_file))
        check_growing(file, a, _flat(given), [k for k in _flat(given) if grid_key(k)])
        note = extend_time(file, a, given)
        cfg = from_dict(given)
        b = _flat(to_dict(cfg))
        diff = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        growing = [k for k in diff if grid_key(k)]
        changing = [k for k in diff if k not in NEUTRAL and not grid_key(k)]
        others = [k for k in diff if k not in changing and not grid_key(k)]
        if changing or (others and not force):
            shown = "; ".join(
                f"{k} (file {a.get(k)!r}, given {b.get(k)!r}{'' if k in changing else ', does not change results'})"
                for k in changing + others
            )
            n = f"{len(changing) + len(others)} key{'s' if len(changing) + len(others) > 1 else ''}"
            if changing:
                raise UserError(
                    f"--resume {file}: the config differs from the file's in {n}: {shown}; {len(changing)} of them change the results, so it cannot be resumed (it would change rows already written; a run may only grow: schedule.epochs, time.t_max) — omit CONFIG/--set to use the file's config, or start a new file"
                )
            raise UserError(
                f"--resume {file}: the config differs from the file's in {n}: {shown}; none changes the results: pass --force to resume with it"
            )
    if complete and not growing:
        raise UserError(
            f"--resume {file}: the run is complete; nothing to resume (to continue it, raise schedule.epochs or time.t_max with --set; or start a new file with -o)"
        )
    if not has_checkpoint and not complete:
        raise UserError(
            f"--resume {file}: no /checkpoint to continue from (a finished file is rewritten without it unless output.keep_checkpoint = true); start a new file with -o"
        )
    if not os.access(file, os.W_OK):
        raise UserError(f"--resume {file}: not writable")
    if note is not None and verbosity(ctx) >= 0:
        click.echo(note, err=True)
    if threads is not None:
        set_threads(threads)
    say = (lambda line: click.echo(f"{file}: {line}", err=True)) if verbosity(ctx) >= 0 else None
    with StopSignals(acknowledge=progress is not False), announcing(say), _refusals(file, growing):
        outcome = simulate(
            cfg, file, progress=progress, resume=True, compile_beside=True,
            grow=bool(growing),
        )  # fmt: skip
    if verbosity(ctx) >= 0:
        replayed = not has_checkpoint and not outcome.startswith("complete")
        if replayed and needs_replay(file):  # stopped before the file was opened
            outcome_line = f"{outcome.split(';')[0]} during the replay; the file is as it was ({status}): run the same command again to grow it"
        else:
            outcome_line = outcome
        click.echo(f"{file}: {outcome_line}", err=True)
    return exit_code(outcome)
