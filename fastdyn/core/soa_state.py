"""The per-task state of the generic structure-of-arrays integrators (``drive/integrate_soa``),
shared by every ODE model that runs on them: what it holds, what a checkpoint stores of it, how it
is put back, and the integrator counts it reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .restore import restore_arrays, restore_clocks

__all__ = ["SoaState", "soa_checkpoint"]


@dataclass
class SoaState:
    """``y`` (n_state, n) of every task and each chunk's clock ``t_at`` (first task → the time of
    its last output); with dopri5 (``adaptive``) each task's next step ``h`` (0: not chosen yet)
    and its counters ``counts`` (3, n): accepted, rejected steps, failed 0/1."""

    y: np.ndarray
    t_at: dict[int, float] = field(default_factory=dict)
    h: np.ndarray | None = None
    counts: np.ndarray | None = None

    @classmethod
    def start(cls, y: np.ndarray, adaptive: bool) -> SoaState:
        """The state at the start: ``y``, and with ``adaptive`` no step chosen and no step taken."""
        if not adaptive:
            return cls(y)
        n = y.shape[1]
        return cls(y, {}, np.zeros(n), np.zeros((3, n), dtype=np.int64))

    def arrays(self) -> dict[str, np.ndarray]:
        """What a checkpoint stores (:func:`soa_checkpoint`): y, and with dopri5 h and counts."""
        out = {"y": self.y}
        if self.h is not None:
            out |= {"h": self.h, "counts": self.counts}
        return out

    def restore(
        self, ck: Mapping[str, np.ndarray], spans: Iterable[tuple[int, int]], times: Any, rows: int
    ) -> None:
        """Put a checkpoint written after ``rows`` output rows back (ValueError when its arrays do
        not fit the config)."""
        restore_arrays(self.arrays(), ck)
        restore_clocks(self, spans, times, rows)

    def summary(self) -> dict[str, int]:
        """The file's integrator counts: tasks, and with dopri5 steps, rejected, failed."""
        out = {"tasks": int(self.y.shape[1])}
        if self.counts is not None:
            acc, rej, failed = (int(x) for x in self.counts.sum(axis=1))
            out |= {"steps": acc, "rejected": rej, "failed": failed}
        return out


def soa_checkpoint(
    n_state: int, n_tasks: int, adaptive: bool
) -> dict[str, tuple[tuple[int, ...], str]]:
    """The checkpoint arrays of :meth:`SoaState.arrays` as ``{name: (shape, dtype)}`` for
    ``n_tasks`` tasks (0 when the run only writes the closed form)."""
    out = {"y": ((n_state, n_tasks), "f8")}
    if adaptive:
        out |= {"h": ((n_tasks,), "f8"), "counts": ((3, n_tasks), "i8")}
    return out
