"""How a run ended: one vocabulary for the HDF5 ``status`` attribute, the CLI and exit codes."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):  # noqa: UP042 — str(Outcome.X) stays "Outcome.X"; .value is the status text
    """Run outcomes; the value is the text stored in ``status`` (failures append a reason)."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    FAILED = "failed"

    def text(self, reason: str = "") -> str:
        """The status text, e.g. ``failed: diverged at step 120 (...)``."""
        return f"{self.value}: {reason}" if reason else self.value


class RunFailed(RuntimeError):
    """A run that could not finish (divergence, I/O failure); the message is the reason."""
