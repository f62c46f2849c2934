"""④ The one error ladder of every driver: how a run that does not finish normally closes its file.

A driver's loop runs inside :func:`guarded`. It ends early by raising :class:`Ended` with the
status to write (a stop requested by a signal); everything else that can go wrong is handled the
same way for every model and driver:

| raised in the loop | the file | the driver |
|---|---|---|
| :class:`Ended` (a stop request) | closed with its status | returns the status |
| ``OSError`` (disk full, quota, I/O error) | abandoned: as a kill leaves it (rows flushed so far) | raises :class:`RunFailed` with the one-line :func:`write_error` |
| :class:`RunFailed` (divergence, a step budget used up) | closed ``failed: <reason>`` | returns the status |
| ``KeyboardInterrupt`` (a second signal) | closed ``interrupted`` | re-raises |
| anything else (a bug) | closed ``failed: <type>: <message>`` | re-raises |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.load import to_toml
from ..h5.writer import RunWriter
from .checkpoint import Schedule, write_error
from .outcome import Outcome, RunFailed


class Ended(Exception):
    """The run stops here with ``status`` (its text for the file), e.g. at a stop request."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


@dataclass(frozen=True)
class RunRequest:
    """One run as :func:`fastdyn.drive.run.simulate` hands it to a driver (every driver takes it):
    the validated config ``cfg`` of the registered model ``entry``, written to ``output``
    (with ``resume``: that file continued from its checkpoint, its config checked by the caller);
    ``progress`` as :class:`~fastdyn.drive.progress.Progress` takes it; ``device``: the
    :class:`~fastdyn.core.device.Device` the model's ``setup`` receives; ``beside``: the
    process compiling the kernels the run reaches last
    (:class:`~fastdyn.drive.compile_beside.Beside`, waited for before they are called), or None;
    ``grown``: a resume whose config adds steps or output times after the file's (the caller
    checked that nothing else differs); ``compile_beside``: the driver may start that process
    itself on the kernels it derives (``beside`` None: the model declared none)."""

    entry: Any
    cfg: Any
    output: Path
    progress: bool | float = False
    resume: bool = False
    device: Any = "cpu"
    beside: Any = None
    grown: bool = False
    compile_beside: bool = False


class GridChanged(ValueError):
    """A resumed config whose output times (or steps) would not repeat the rows already written
    (one line: the first row that differs): growing a run must keep every row it has."""


def check_written(path: Path, times: Any, steps: Any = None) -> None:
    """:class:`GridChanged` unless the file's written ``/time`` (and ``/step``) rows are the first
    rows of ``times`` (``steps``) bit for bit: a resumed config may add output times after the
    written ones, never move or drop one. Read before the file is reopened, so a refusal leaves
    it untouched."""
    import numpy as np

    from ..h5 import layout
    from ..h5.reader import open_file
    from ..h5.verify import read_verified

    f = open_file(path)
    try:  # verified rows: a last chunk torn by a kill gives its flushed rows
        written = {layout.TIME: np.asarray(read_verified(f[layout.TIME]))}
        if steps is not None and layout.STEP in f:
            written[layout.STEP] = np.asarray(read_verified(f[layout.STEP]))
    finally:
        f.close()
    for name, new in ((layout.STEP, steps), (layout.TIME, times)):  # a step names the cause
        if name not in written:
            continue
        old, new = written[name], np.asarray(new)
        n = old.shape[0]
        if new.shape[0] < n:
            raise GridChanged(
                f"the config has {new.shape[0]} output {name}s, the file already {n}: a run only grows"
            )
        bad = np.flatnonzero(old != new[:n])
        if bad.size:
            i = int(bad[0])
            raise GridChanged(
                f"the config's output {name}s differ from the rows written at row {i} ({name} {old[i].item()!r} in the file, {new[i].item()!r} in the config)"
            )


def open_writer(
    request: RunRequest, recomputed: tuple[str, ...] = (), **declared: Any
) -> tuple[RunWriter, dict[str, Any] | None]:
    """The run's file and its checkpoint arrays: with ``request.resume`` its output reopened at
    its newest checkpoint (:meth:`RunWriter.reopen`; None when none was completed), or, for a
    file that kept no resume state, a :class:`~fastdyn.drive.replay.ReplayWriter` (the run is
    replayed from its start, its rows checked against the file's; ``recomputed``: the series a
    grown run rewrites, not checked); else a new file for the model and config with the
    ``declared`` layout (:class:`RunWriter`'s keywords) and no checkpoint; it keeps its
    checkpoint at the end when ``cfg.output.keep_checkpoint``. A ``request.grown`` file takes
    the new config (its ``config`` attribute and identity crc32)."""
    from . import replay

    cfg = request.cfg
    ck = None
    if request.resume:
        grown = to_toml(cfg) if request.grown else None  # the config the grown file now holds
        if replay.needs_replay(request.output):
            writer = replay.ReplayWriter(
                request.output, declared.get("checkpoint") or {}, grown, recomputed
            )
        else:
            writer, ck = RunWriter.reopen(request.output, config_toml=grown)
    else:
        writer = RunWriter(
            request.output, model=request.entry.name, config_toml=to_toml(cfg), seed=cfg.seed,
            **declared,
        )  # fmt: skip
    writer.keep_checkpoint = bool(getattr(cfg.output, "keep_checkpoint", False))
    return writer, ck


def schedule(writer: Any, every: Any, progress0: int = 0) -> Schedule:
    """When the driver checkpoints (:class:`~fastdyn.drive.checkpoint.Schedule` of
    ``output.checkpoint_every``): at every chunk boundary while a replay rebuilds the state
    (:mod:`fastdyn.drive.replay`), so that the file opens at the state after its last row."""
    from . import replay

    if isinstance(writer, replay.ReplayWriter):
        return replay.CaptureSchedule(writer, every, progress0)
    return Schedule(every, progress0)


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else ""


def guarded(
    writer: Any,
    output: str | Path,
    timings: Callable[[], dict[str, float]],
    body: Callable[[], None],
    progress: Any = None,
) -> str | None:
    """Run ``body()``; None when it returns, else the status the file was closed with (see the
    module's table for what is returned, raised or re-raised). ``progress`` (a
    :class:`~fastdyn.drive.progress.Progress`) is closed last, however the run ends."""
    try:
        body()
    except Ended as e:
        writer.close(e.status, timings())
        return e.status
    except OSError as e:  # the disk is full or the file system went away: keep what was flushed
        writer.abandon()
        raise RunFailed(write_error(output, e)) from None
    except RunFailed as e:
        status = Outcome.FAILED.text(_first_line(e))
        writer.close(status, timings())
        return status
    except KeyboardInterrupt:
        writer.close(Outcome.INTERRUPTED.text(), timings())
        raise
    except BaseException as e:
        writer.close(Outcome.FAILED.text(f"{type(e).__name__}: {_first_line(e)}"), timings())
        raise
    finally:
        if progress is not None:
            progress.close()
    return None
