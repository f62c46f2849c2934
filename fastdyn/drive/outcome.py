"""How a run ended: one vocabulary for the HDF5 ``status`` attribute, the CLI and exit codes."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):  # noqa: UP042 — str(Outcome.X) stays "Outcome.X"; .value is the status text
    """Run outcomes; the value is the text stored in ``status`` (failures append a reason)."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    FAILED = "failed"

    def text(self, reason: str = "", signal: str | None = None) -> Status:
        """The status, e.g. ``failed: diverged at step 120 (...)``; ``signal``: the name of the
        signal that interrupted the run (its reason then starts with it)."""
        return Status(self, reason, signal)


#: exit status of a run stopped by a signal (128 + signal number, as a shell reports it)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class Status(str):
    """A run's status: the text stored in the file's ``status`` attribute, which also knows its
    :class:`Outcome` and, for an interrupted run, the signal, so that nothing parses the text
    except :meth:`parse` (for a status read back from a file or a sweep index)."""

    outcome: Outcome
    signal: str | None

    def __new__(cls, outcome: Outcome, reason: str = "", signal: str | None = None) -> Status:
        obj = super().__new__(cls, f"{outcome.value}: {reason}" if reason else outcome.value)
        obj.outcome, obj.signal = outcome, signal
        return obj

    def __reduce__(self) -> tuple:  # pickles (to sweep workers and back) as its text
        return (Status.parse, (str(self),))

    @classmethod
    def parse(cls, text: str) -> Status:
        """The status a text states (``running`` for text that names no outcome)."""
        if isinstance(text, Status):
            return text
        head, _, reason = str(text).partition(": ")
        outcome = next((o for o in Outcome if o.value == head.strip()), None)
        if outcome is None:
            return cls(Outcome.RUNNING, str(text))
        signal = next((s for s in EXIT_CODES if reason.startswith(s)), None)
        return cls(outcome, reason, signal if outcome is Outcome.INTERRUPTED else None)

    @property
    def exit_code(self) -> int:
        """0 complete; 130/143 interrupted by SIGINT/SIGTERM (130 for an unnamed signal); 1 else."""
        if self.outcome is Outcome.COMPLETE:
            return 0
        if self.outcome is Outcome.INTERRUPTED:
            return EXIT_CODES.get(self.signal or "", 130)
        return 1


class RunFailed(RuntimeError):
    """A run that could not finish (divergence, I/O failure); the message is the reason."""
