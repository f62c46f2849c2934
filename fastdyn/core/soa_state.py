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
    its last output; gd: ``k_at``, its step); with dopri5 (``adaptive``) each task's next step
    ``h`` (0: not chosen yet) and its counters ``counts`` (3, n): accepted, rejected steps,
    failed 0/1; with the fixed-step options (per-task steps, gd, settling) each task's record
    ``fixed`` (4, n): nominal step, steps taken, |r| after the last step, status code
    (:func:`fastdyn.drive.soa_tasks.fixed_task`); with dopri5's settling rule each task's |r|
    after its last step ``rprev`` (and counts[2] = 2 for a settled task)."""

    y: np.ndarray
    t_at: dict[int, float] = field(default_factory=dict)
    h: np.ndarray | None = None
    counts: np.ndarray | None = None
    fixed: np.ndarray | None = None
    k_at: dict[int, int] = field(default_factory=dict)
    rprev: np.ndarray | None = None

    @classmethod
    def start(
        cls, y: np.ndarray, adaptive: bool, fixed: np.ndarray | None = None, settle: bool = False
    ) -> SoaState:
        """The state at the start: ``y``, and with ``adaptive`` no step chosen and no step taken
        (``settle``: no |r| yet, +inf); ``fixed``: the fresh record of the fixed-step options."""
        if not adaptive:
            return cls(y, fixed=fixed)
        n = y.shape[1]
        rprev = np.full(n, np.inf) if settle else None
        return cls(y, {}, np.zeros(n), np.zeros((3, n), dtype=np.int64), fixed, rprev=rprev)

    def arrays(self) -> dict[str, np.ndarray]:
        """What a checkpoint stores (:func:`soa_checkpoint`): y, with dopri5 h and counts, with
        the fixed-step options their record ``solver``."""
        out = {"y": self.y}
        if self.h is not None:
            out |= {"h": self.h, "counts": self.counts}
        if self.fixed is not None:
            out["solver"] = self.fixed
        if self.rprev is not None:
            out["rprev"] = self.rprev
        return out

    def restore(
        self,
        ck: Mapping[str, np.ndarray],
        spans: Iterable[tuple[int, int]],
        times: Any,
        rows: int,
        last_step: int | None = None,
    ) -> None:
        """Put a checkpoint written after ``rows`` output rows back (ValueError when its arrays do
        not fit the config); ``last_step``: gd's step at that row."""
        restore_arrays(self.arrays(), ck)
        restore_clocks(self, spans, times, rows, last_step)

    def summary(self) -> dict[str, int]:
        """The file's integrator counts: tasks, with dopri5 steps, rejected, failed; with the
        fixed-step options steps and the tasks per status (``running``, ``settled`` …)."""
        out = {"tasks": int(self.y.shape[1])}
        if self.counts is not None:
            acc, rej = (int(x) for x in self.counts[:2].sum(axis=1))
            failed = int(np.count_nonzero(self.counts[2] == 1))
            out |= {"steps": acc, "rejected": rej, "failed": failed}
            if self.rprev is not None:
                out["settled"] = int(np.count_nonzero(self.counts[2] == 2))
        if self.fixed is not None:
            from .task_status import STATUS_NAMES

            out["steps"] = int(self.fixed[1].sum())
            c = np.bincount(self.fixed[3].astype(np.int64), minlength=len(STATUS_NAMES))
            out |= {name.replace(" ", "_"): int(c[i]) for i, name in enumerate(STATUS_NAMES)}
        return out


def soa_checkpoint(
    n_state: int, n_tasks: int, adaptive: bool, fixed: bool = False, settle: bool = False
) -> dict[str, tuple[tuple[int, ...], str]]:
    """The checkpoint arrays of :meth:`SoaState.arrays` as ``{name: (shape, dtype)}`` for
    ``n_tasks`` tasks (0 when the run only writes the closed form)."""
    out = {"y": ((n_state, n_tasks), "f8")}
    if adaptive:
        out |= {"h": ((n_tasks,), "f8"), "counts": ((3, n_tasks), "i8")}
    if fixed:
        out["solver"] = ((4, n_tasks), "f8")
    if adaptive and settle:
        out["rprev"] = ((n_tasks,), "f8")
    return out
