"""④ A run's first start on an empty numba cache: its last-reached kernels compile in a second process.

numba compiles one kernel at a time per process (its compiler lock), and a first run spends most
of its time compiling: the quickstart preset compiles its closed form (≈ 12 s), then its integrator
(≈ 7 s), while the second core idles. Where the model says how (``ModelEntry.warmup.compile_beside``,
which also says whether those kernels are cached already), :func:`start` runs a small copy of
the config (the model's ``--set`` overrides: few tasks, no closed form) in a second process that
fills numba's cache with the integrator's kernels, while this process compiles the rest; the
driver calls :meth:`Beside.wait` before its first integration step, and this process then loads
the kernels from the cache. The same compiled code either way, so the results are the same bits.

Only on the CPU, with at least two cores available to the process and the JIT on; never inside
the second process itself; ``FASTDYN_COMPILE_BESIDE=0`` turns it off. The second process writes
its small file into a temporary directory, removed when the run ends; if it fails or takes more
than :data:`WAIT_S`, the run compiles the kernels itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..core.device import Device

#: the environment variable that turns the second process off ("0")
ENV = "FASTDYN_COMPILE_BESIDE"

#: longest wait for the second process before the run compiles the kernels itself (seconds)
WAIT_S = 300.0


class Beside:
    """The second process and its temporary directory."""

    def __init__(self, proc: subprocess.Popen, tmp: Path) -> None:
        self.proc = proc
        self.tmp = tmp

    def wait(self, stop: Any = None) -> bool:
        """Wait for the second process (at most :data:`WAIT_S`, and no longer than a stop
        request of ``stop``, the run's signal handlers); True when it completed."""
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
        """Stop the second process if it still runs, and remove its directory."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def start(entry: Any, cfg: Any, device: Device) -> Beside | None:
    """Start the second process for a run of ``cfg`` on ``device`` where it helps (module
    docstring), else None."""
    import numba

    from ..config.load import to_toml

    hook = entry.warmup.compile_beside
    if hook is None or device is not Device.CPU or os.environ.get(ENV) == "0":
        return None
    if numba.config.DISABLE_JIT or _cores() < 2:
        return None
    sets = hook(cfg)
    if sets is None:
        return None
    try:  # an optimisation only: whatever fails here, the run compiles the kernels itself
        text = to_toml(cfg)
        tmp = Path(tempfile.mkdtemp(prefix="fastdyn-compile-"))
    except (OSError, TypeError, ValueError):
        return None
    cmd = [sys.executable, "-m", "fastdyn", "-q", "simulate", str(tmp / "config.toml")]
    for s in sets:
        cmd += ["--set", s]
    cmd += ["-o", str(tmp / "run.h5")]
    env = dict(os.environ, **{ENV: "0", "NUMBA_NUM_THREADS": "1"})
    try:
        (tmp / "config.toml").write_text(text)
        proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return Beside(proc, tmp)
