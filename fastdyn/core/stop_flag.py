"""The process's stop flag: ``FLAG[0]`` is 0, or the number of the first SIGINT/SIGTERM;
``FLAG[1]`` is 1 once a task of the running kernel call used up its step budget
(``solver.max_steps``), so every other block gives up too and the run fails at once instead of
spending hours on the tasks that remain (a stiff ODE that explicit steps cannot cross).

Signals are per process, so the flag is too. :class:`fastdyn.drive.checkpoint.StopSignals` sets it
from its watcher thread the moment a signal arrives, while the main thread may be inside a numba
kernel (the kernels release the GIL); the long kernels (rk4, gd and dopri5 of
:mod:`fastdyn.models.msfr.integrate_kernels`, the generic RK4 and dopri5 of
:mod:`fastdyn.drive.integrate_soa`) take the array as an argument, poll it at step-group
boundaries and return early, leaving their outputs incomplete. The driver then abandons the segment and ends the run at its last checkpoint.
"""

from __future__ import annotations

import numpy as np

#: [signal number of the first stop request or 0, step budget used up], read by the kernels
FLAG = np.zeros(2, dtype=np.int64)


def request(signum: int) -> None:
    """Ask every polling kernel to return early."""
    FLAG[0] = int(signum)


def clear() -> None:
    """No stop requested (a new run, or the end of one)."""
    FLAG[:] = 0


def clear_halt() -> None:
    """Before a kernel call: no task has used up its step budget."""
    FLAG[1] = 0


def halted() -> bool:
    """Whether a task of the last kernel call used up its step budget (the call gave up)."""
    return bool(FLAG[1])


def requested() -> bool:
    """Whether a stop was requested since the last :func:`clear`."""
    return bool(FLAG[0])
