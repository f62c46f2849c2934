"""④ When to checkpoint, stopping on SIGINT/SIGTERM, and resuming a file (docs/reliability.md).

- :func:`fastdyn.config.schema.parse_every` reads ``output.checkpoint_every``: a number or ``"<x>s"`` is seconds of wall
  time, ``"<n> steps"`` counts the run's own steps (MSFR: output times written; ICL: optimiser
  steps); ``0`` checkpoints after every chunk (an MSFR segment, an ICL save). A checkpoint is only
  ever taken at a chunk boundary, where the whole state is consistent and on disk.
- :class:`Schedule` decides at each chunk boundary whether a checkpoint is due.
- :class:`StopSignals` turns the first SIGINT or SIGTERM into a request the run loop polls after
  each chunk (finish the chunk, checkpoint, status ``interrupted``, exit 130/143) and restores the
  default action, so a second signal ends the process at once, even inside a numba kernel; the file
  is then as a kill -9 leaves it: readable up to its last flush, resumable from its checkpoint.
"""

from __future__ import annotations

import signal
import threading
import time as _time
from typing import Any

from ..config.schema import parse_every
from .outcome import Outcome

__all__ = ["EXIT_CODES", "Schedule", "StopSignals", "exit_code", "parse_every", "write_error"]

#: exit status of a run stopped by a signal (128 + signal number, as a shell reports it)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class Schedule:
    """Is a checkpoint due at this chunk boundary? (``progress`` is the run's step counter.)"""

    def __init__(self, every: Any, progress0: int = 0):
        self.unit, self.every = parse_every(every)
        self.t_last = _time.monotonic()
        self.p_last = int(progress0)

    def due(self, progress: int) -> bool:
        if self.every == 0:
            return True
        if self.unit == "seconds":
            return _time.monotonic() - self.t_last >= self.every
        return progress - self.p_last >= self.every

    def done(self, progress: int) -> None:
        self.t_last = _time.monotonic()
        self.p_last = int(progress)


class StopSignals:
    """Context manager: the first SIGINT/SIGTERM sets :attr:`name` (polled by the run loop) and
    puts the default action back, so a second one ends the process at once. Outside the main
    thread (where Python cannot install handlers) it does nothing."""

    def __init__(self) -> None:
        self.name: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.name = signal.Signals(signum).name
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    @property
    def requested(self) -> bool:
        return self.name is not None

    def status(self, where: str, path: Any = "FILE") -> str:
        """``interrupted: SIGTERM …`` for the file and the CLI."""
        return Outcome.INTERRUPTED.text(f"{self.name} {where}; continue with fastdyn simulate --resume {path}")


def exit_code(status: str) -> int:
    """0 complete; 130/143 interrupted by SIGINT/SIGTERM; 1 otherwise."""
    if status.startswith(Outcome.COMPLETE.value):
        return 0
    if status.startswith(Outcome.INTERRUPTED.value):
        for name, code in EXIT_CODES.items():
            if name in status:
                return code
        return 130
    return 1


def write_error(path: Any, e: OSError) -> str:
    """One line for an OSError raised while writing the output (disk full, file system gone)."""
    why = e.strerror or (str(e).splitlines()[0] if str(e) else type(e).__name__)
    return f"cannot write {path}: {why}; the file holds every row up to the last one flushed — free space and continue with fastdyn simulate --resume {path}"
