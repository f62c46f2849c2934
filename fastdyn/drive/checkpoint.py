"""④ When to checkpoint, stopping on SIGINT/SIGTERM, and resuming a file (docs/reliability.md).

- :func:`fastdyn.config.schema.parse_every` reads ``output.checkpoint_every``: a number or ``"<x>s"`` is seconds of wall
  time, ``"<n> steps"`` counts the run's own steps (ODE runs: output times written; trained
  models: optimiser steps); ``0`` checkpoints after every chunk (a segment, a save). A checkpoint is only
  ever taken at a chunk boundary, where the whole state is consistent and on disk.
- :class:`Schedule` decides at each chunk boundary whether a checkpoint is due.
- :class:`StopSignals` turns the first SIGINT or SIGTERM into a request the run loop polls after
  each chunk (finish the chunk, checkpoint, status ``interrupted``, exit 130/143), acknowledged on
  stderr at once when asked (``fastdyn simulate`` unless quiet). Signals within
  :data:`SAME_REQUEST_S` of the first are the same request (a process-group signal and its forward
  by ``timeout`` or ``srun``). A later one gives the run :data:`GRACE_S` to reach its clean stop
  (closed, status ``interrupted``), then ends the process, even inside a numba kernel; the file is
  then as a kill -9 leaves it: readable up to its last flush, resumable from its checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import threading
import time as _time
from collections.abc import Iterator
from typing import Any

from ..config.schema import parse_every
from ..core import stop_flag
from .outcome import EXIT_CODES, Outcome, Status

__all__ = [
    "EXIT_CODES",
    "Schedule",
    "StopSignals",
    "ask_process",
    "clear_process",
    "exit_code",
    "parse_every",
    "with_stop_signals",
    "write_error",
]


class Schedule:
    """Is a checkpoint due at this chunk boundary? (``progress`` is the run's step counter.)"""

    def __init__(self, every: Any, progress0: int = 0):
        self.unit, self.every = parse_every(every)
        self.t_last = _time.monotonic()
        self.p_last = int(progress0)

    def due(self, progress: int) -> bool:
        if self.unit == "off":
            return False
        if self.every == 0:
            return True
        if self.unit == "seconds":
            return _time.monotonic() - self.t_last >= self.every
        return progress - self.p_last >= self.every

    def done(self, progress: int) -> None:
        self.t_last = _time.monotonic()
        self.p_last = int(progress)


#: signals this soon after the first are the same request (a group signal and its forward), s
SAME_REQUEST_S = 0.5
#: a later signal gives the run this long to reach its clean stop before the process ends, s
GRACE_S = 1.0


class StopSignals:
    """Context manager: the first SIGINT/SIGTERM sets :attr:`name` (polled by the run loop: finish
    the chunk, checkpoint, close ``interrupted``). Outside the main thread (where Python cannot
    install handlers) it does nothing.

    Python runs signal handlers in the main thread between bytecodes, so while the main thread is
    inside a long numba kernel the flag would not change. The C-level handler also writes each
    signal's number to a wakeup pipe (:func:`signal.set_wakeup_fd`); a watcher thread reads it, so
    the flag is set at once (the kernels release the GIL) and the long kernels see
    :data:`fastdyn.core.stop_flag.FLAG` and return early.

    Job schedulers often deliver one request twice: Ctrl-C reaches the whole process group and
    ``timeout`` (or ``srun``) forwards it as well. Signals within :data:`SAME_REQUEST_S` of the
    first are therefore the same request. A later one means "now": the run has :data:`GRACE_S`
    to reach its clean stop, after which the watcher ends the process with 128 + the signal's
    number, with a line on stderr. The file is then as a kill -9 leaves it: readable up to its
    last flush, resumable from its checkpoint."""

    #: the instance whose handlers are installed (a sweep's, around its points' runs)
    _active: StopSignals | None = None

    def __init__(self, acknowledge: bool = False) -> None:
        self.acknowledge = acknowledge
        self._claim = threading.Lock()  # taken once, never released: one acknowledgement
        self.name: str | None = None
        self._old: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None
        self._old_fd = -1
        self._first_at: float | None = None
        self._hurried = False
        self._closed = threading.Event()  # set by __exit__: the run stopped cleanly

    @classmethod
    @contextlib.contextmanager
    def shared(cls) -> Iterator[StopSignals]:
        """The installed instance if there is one (a run inside a sweep answers the sweep's
        signals: a stop request ends the point and the sweep, a second signal the process), else
        a new one installed for the ``with`` block."""
        if cls._active is not None:
            yield cls._active
            return
        with cls() as stop:
            yield stop

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread() and StopSignals._active is None:
            StopSignals._active = self
            stop_flag.clear()
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            self._pipe = (r, w)
            threading.Thread(
                target=self._watch, args=(r,), name="fastdyn-signals", daemon=True
            ).start()
        return self

    def _note(self, signum: int) -> None:
        """In the watcher thread only (never blocks it): the first signal asks for a stop, those
        within :data:`SAME_REQUEST_S` of it are the same request, a later one starts the grace."""
        now = _time.monotonic()
        if self._first_at is None:
            self._first_at = now
            if self.acknowledge:  # writing to stderr may block (a full pipe): not in the watcher
                threading.Thread(target=self._request, args=(signum,), daemon=True).start()
            else:
                self._request(signum)
            return
        if now - self._first_at < SAME_REQUEST_S or self._hurried:
            return
        self._hurried = True
        threading.Thread(target=self._end_after_grace, args=(signum,), daemon=True).start()

    def _end_after_grace(self, signum: int) -> None:
        """A later signal: wait :data:`GRACE_S` for the clean stop, then end the process."""
        name = signal.Signals(signum).name
        if self._closed.wait(GRACE_S):
            return
        _say(
            f"fastdyn: second {name}: the run did not reach its stop within {GRACE_S:g} s; ending now "
            "(the file keeps every flushed row; fastdyn simulate --resume continues it)"
        )
        os._exit(128 + signum)

    def _request(self, signum: int) -> None:
        """The first signal: say so once (with ``acknowledge``; the first caller to claim it
        writes), then set the flag the run loop and the kernels poll. Never blocks on a lock:
        it runs in the watcher (or its helper) and in the Python-level handler, which a second
        signal can nest inside itself."""
        name = signal.Signals(signum).name
        if self._claim.acquire(blocking=False) and self.acknowledge:
            _say(
                f"fastdyn: {name} received: stopping at the next chunk boundary (another SIGINT/SIGTERM ends within {GRACE_S:g} s)"
            )
        if self.name is None:
            self.name = name
        stop_flag.request(signum)  # the kernels return early

    def _watch(self, r: int) -> None:
        """Until EOF (``__exit__`` closes the write end); the watcher closes the read end itself,
        so its descriptor number cannot be reused under it."""
        while True:
            try:
                data = os.read(r, 64)
            except OSError:
                data = b""
            if not data:
                os.close(r)
                return
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._note(signum)

    def _handle(self, signum: int, frame: Any) -> None:
        # The watcher has counted this signal (the C handler wrote it to the pipe first). Set
        # the flag here too, at once and deterministically, without blocking on any lock: this
        # handler can run nested in itself when a second signal arrives at once, and a lock
        # taken here deadlocked against the watcher (a double SIGINT that never ended).
        self._request(signum)

    def __exit__(self, *exc: Any) -> None:
        self._closed.set()  # a grace that is running ends without exiting
        if self._old:
            stop_flag.clear()
            StopSignals._active = None
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_fd)
            _r, w = self._pipe
            self._pipe = None
            os.close(w)  # the watcher reads EOF, closes the read end and ends

    @property
    def requested(self) -> bool:
        """A stop was asked: by a signal this instance took, or (an instance outside the main
        thread, which installs no handlers: a run in an executor's worker thread) by whoever set
        the process's stop flag (:func:`ask_process`, a sweep stopping its Dask workers)."""
        return self.signal_name is not None

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that asked for the stop, or None."""
        if self.name is None and not self._old and stop_flag.requested():
            return signal.Signals(int(stop_flag.FLAG[0])).name
        return self.name

    def status(self, where: str, path: Any = "FILE") -> str:
        """``interrupted: SIGTERM …`` for the file and the CLI."""
        name = self.signal_name
        return Outcome.INTERRUPTED.text(
            f"{name} {where}; continue with fastdyn simulate --resume {path}", name
        )


def ask_process(signum: int) -> None:
    """Ask the runs of this process that run outside its main thread (a Dask worker's) to stop
    as a signal would: at their next chunk boundary, ``interrupted`` and resumable; runs that
    start later stop before their first step. :func:`clear_process` takes the request back."""
    stop_flag.request(int(signum))


def clear_process() -> None:
    """No stop asked of this process's runs (a worker that a new sweep uses)."""
    if StopSignals._active is None:  # a main-thread run's own request is its own to clear
        stop_flag.clear()


def _say(line: str) -> None:
    """One line on stderr, from any thread (a closed stderr is ignored)."""
    import sys

    try:
        sys.stderr.write(("\n" if sys.stderr.isatty() else "") + line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a reentrant write
        pass


def with_stop_signals(body: Any) -> Any:
    """A run loop ``body(stop, *args, **kw)`` as ``run(*args, **kw)``, with :class:`StopSignals`
    installed for its whole length, setup included (a signal during setup is a stop request too)."""

    @functools.wraps(body)
    def run(*args: Any, **kw: Any) -> Any:
        with StopSignals.shared() as stop:
            return body(stop, *args, **kw)

    del run.__wrapped__  # the public signature has no ``stop``
    return run


def exit_code(status: str) -> int:
    """0 complete; 130/143 interrupted by SIGINT/SIGTERM; 1 otherwise (:attr:`Status.exit_code`)."""
    return Status.parse(status).exit_code


def write_error(path: Any, e: OSError) -> str:
    """One line for an OSError raised while writing the output (disk full, quota, file-size
    limit, I/O error), saying truthfully what the file now holds and what to do."""
    from pathlib import Path

    from ..h5.undo import pending
    from ..h5.writer import WriteFailed

    why = e.strerror or (str(e).splitlines()[0] if str(e) else type(e).__name__)
    if getattr(e, "nothing_written", False) or not Path(path).exists():
        old = " (the existing file is as it was)" if Path(path).exists() else ""
        return f"cannot write {path}: {why}; nothing was written{old}"
    resume = f"fastdyn simulate --resume {path}"
    if isinstance(e, WriteFailed) and pending(path):  # cut off inside its close
        return (
            f"cannot write {path}: {why}; the file holds every row up to the last one flushed once "
            f"the half-written close is put back, as fastdyn's readers show it (without writing) "
            f"(`fastdyn repair {path}` does it and makes it a plain file for every reader) — once "
            f"the cause is cleared, continue with {resume}"
        )
    if isinstance(e, WriteFailed):  # stopped part-way through a write: as a kill leaves a file
        return (
            f"cannot write {path}: {why}; the file holds every row up to the last one flushed, "
            f"left as a killed run leaves it (fastdyn and SWMR readers open it; `fastdyn repair {path}` "
            f"makes it a plain file) — once the cause is cleared, continue with {resume}"
        )
    fix = {
        errno.EFBIG: "raise the file-size limit (ulimit -f)",
        errno.EDQUOT: "free quota",
    }.get(e.errno, "free space")
    return f"cannot write {path}: {why}; the file holds every row up to the last one flushed — {fix} and continue with {resume}"
