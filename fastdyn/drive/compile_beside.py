"""④ A run's first start on an empty numba cache: some of its kernels compile in a second process.

numba compiles one kernel at a time per process (its compiler lock), and a first run spends most
of its time compiling: in one process the quickstart preset compiles its closed form (≈ 12 s),
then its integrator (≈ 8 s), while the second core idles. A model names kernels of a run (the
ones it reaches last, unless it also names ``compile_here``'s, below), with the argument types
the run passes them (``ModelEntry.warmup.precompile(cfg)``: (kernel, signature)
pairs, :mod:`fastdyn._precompile`); the ODE driver derives them itself for a model on the generic
solver, whose integrator is built from the model's functions (``OdeJob.precompile``,
:func:`fastdyn.drive.ode_maths.precompile`). :func:`start` (the model's pairs, before its set-up)
or :func:`start_pairs` (the driver's, once it has them) compiles those not in numba's cache yet in
a second process (``python -m fastdyn._precompile``), which writes them to the cache, while this
process compiles the rest; the driver calls :meth:`Beside.wait` before the kernels are reached
(the ODE driver before its first integration step, after the closed form; the trained-model
driver before the first optimiser update, after the first step's loss, gradient and save), and
this process then loads them from the cache. A model may also name kernels the run compiles
itself meanwhile (``warmup.compile_here``: e.g. an integrator, while the second process compiles
the closed form, the two halves of a first run's compiling); the ODE driver compiles those and
then waits for the second process before its first kernel call. A declared kernel reached before that (a trained
model's first step after a long set-up) is loaded where the second process has written it by
then, else compiled here too. The same compiled code either way, so the results are the same
bits; the second process runs no model and writes no file of its own.

Only on the CPU, with at least two cores available to the process and the JIT on; never inside
the second process itself; ``FASTDYN_COMPILE_BESIDE=0`` turns it off. If the second process fails
or takes more than :data:`WAIT_S`, the run compiles the kernels itself.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from ..core.device import Device

#: the environment variable that turns the second process off ("0")
ENV = "FASTDYN_COMPILE_BESIDE"

#: longest wait for the second process before the run compiles the kernels itself (seconds)
WAIT_S = 300.0


class Beside:
    """The second process, and the pairs this process compiles itself meanwhile (``here``:
    the model's ``warmup.compile_here``, those not in numba's cache yet; ``first``: the model
    gave such pairs, so the second process compiles kernels reached first, and the driver waits
    for it before its first kernel call even where every ``here`` pair was cached)."""

    def __init__(
        self, proc: subprocess.Popen, here: tuple[tuple[str, str], ...] = (), first: bool = False
    ) -> None:
        self.proc = proc
        self.here = here
        self.first = first

    def compile_here(self) -> None:
        """Compile the ``here`` pairs in this process (once; a pair that fails is left to the
        run's own call, which compiles it or says what is wrong)."""
        from .._precompile import compile_pair

        here, self.here = self.here, ()
        for name, sig in here:
            try:
                compile_pair(name, sig)
            except Exception:  # noqa: BLE001 — numba's typing errors included: the call says
                pass

    def wait(self, stop: Any = None) -> bool:
        """Wait for the second process (at most :data:`WAIT_S`, and no longer than a stop
        request of ``stop``, the run's signal handlers); True when it compiled every pair.
        Waiting again returns at once."""
        end = time.monotonic() + WAIT_S
        while self.proc.poll() is None and time.monotonic() < end:
            if stop is not None and stop.requested:
                break
            try:
                self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        ok = self.proc.poll() == 0
        self.close()
        return ok

    def close(self) -> None:
        """Stop the second process if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def launch(pairs: list[tuple[str, str]]) -> Beside | None:
    """Start ``python -m fastdyn._precompile`` on ``pairs`` (None if it cannot start)."""
    from .._precompile import command, environment

    env = environment(dict(os.environ, **{ENV: "0", "NUMBA_NUM_THREADS": "1"}))
    try:
        proc = subprocess.Popen(
            command(pairs), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        return None
    return Beside(proc)


def start(entry: Any, cfg: Any, device: Device) -> Beside | None:
    """Start the second process for a run of ``cfg`` on ``device`` on the kernels its model
    declares, where it helps (module docstring), else None."""
    hook = entry.warmup.precompile
    if hook is None or not _helps(device):
        return None
    here_hook = entry.warmup.compile_here
    try:  # an optimisation only: whatever fails here, the run compiles the kernels itself
        pairs = hook(cfg)
        here = tuple(here_hook(cfg)) if here_hook is not None else ()
    except (ImportError, ValueError):
        return None
    beside = start_pairs(pairs, device)
    if beside is not None and here:
        from .._precompile import pending

        beside.first = True
        try:
            beside.here = tuple(pending(here))
        except (ImportError, ValueError):
            pass
    return beside


def start_pairs(pairs: Any, device: Device) -> Beside | None:
    """Start the second process on the (kernel, signature) ``pairs`` not in numba's cache yet,
    where it helps (module docstring), else None."""
    if not pairs or not _helps(device):
        return None
    from .._precompile import pending

    try:
        todo = pending(pairs)
    except (ImportError, ValueError):
        return None
    return launch(todo) if todo else None


def _helps(device: Device) -> bool:
    """On the CPU, with the JIT on, two cores and the second process not turned off."""
    import numba

    if device is not Device.CPU or os.environ.get(ENV) == "0":
        return False
    return not numba.config.DISABLE_JIT and _cores() >= 2
