"""Shared helpers of the peer benchmarks (bench/peers_*.py, issue 20).

- :func:`setup_env` sets the JAX defaults *before* JAX is imported: float64 and
  ``XLA_FLAGS="--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2"`` (unless the
  caller set XLA_FLAGS), and lets at most ``threads`` threads run torch.
- :func:`optional` imports a peer package or prints one "skipped" line and returns None.
- :func:`measure` times named cases in alternating order (case order reversed on every other
  repeat), ``repeats`` times each, and returns per case the medians of wall and process CPU time
  (all threads) plus the 1-minute load average seen before each run.

Timing helpers only: no peer package is imported at module import, so the scripts' ``--help`` works
without the optional ``bench`` extra.
"""

from __future__ import annotations

import importlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def setup_env(threads: int = 2) -> None:
    """Environment for the peers (call before importing jax or torch)."""
    os.environ.setdefault(
        "XLA_FLAGS",
        f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}",
    )
    os.environ.setdefault("JAX_ENABLE_X64", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # torch's and numba's OpenMP pools share one libgomp, which reads its wait policy when the
    # first of them loads it: the policy `import fastdyn` asks for (fastdyn/_threads.py) must be
    # set before torch is imported, and it applies to torch's threads too (they spun as well)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def optional(name: str):
    """The module ``name``, or None after printing a "skipped" line when it is not installed."""
    try:
        mod = importlib.import_module(name)
    except ImportError as e:
        print(f"  {name:<12}: skipped ({e.__class__.__name__}: {e}; pip install -e '.[bench]')")
        return None
    if name == "jax":
        mod.config.update("jax_enable_x64", True)
    return mod


@dataclass
class Timing:
    """Medians over the repeats of one case: wall and CPU seconds, and the loads seen."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)

    @property
    def wall_med(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_med(self) -> float:
        return statistics.median(self.cpu)

    def load_range(self) -> str:
        return f"{min(self.load):.2f}-{max(self.load):.2f}"


def measure(cases: dict[str, Callable[[], object]], repeats: int) -> dict[str, Timing]:
    """Run every case ``repeats`` times, alternating (order reversed on odd repeats)."""
    out = {k: Timing() for k in cases}
    names = list(cases)
    for rep in range(repeats):
        for k in names if rep % 2 == 0 else names[::-1]:
            out[k].load.append(os.getloadavg()[0])
            t, c = time.perf_counter(), time.process_time()
            cases[k]()
            out[k].wall.append(time.perf_counter() - t)
            out[k].cpu.append(time.process_time() - c)
    return out


def report(
    title: str, res: dict[str, Timing], units: float, unit: str, ref: str, flops: float = 0.0
) -> None:
    """One line per case: median wall and CPU per unit (``units`` units per run), the ratio
    case/``ref`` (>1: ``ref`` is faster), all repeats, the load; GFLOP/s at ``flops`` per unit."""
    print(
        f"{title}  [per {unit}; medians of {len(next(iter(res.values())).wall)} alternating runs]"
    )
    r0 = res[ref]
    for k, t in res.items():
        w, c = t.wall_med / units, t.cpu_med / units
        ratio = t.wall_med / r0.wall_med
        cratio = t.cpu_med / r0.cpu_med
        gf = f"  {flops / w * 1e-9:7.2f} GFLOP/s" if flops else ""
        runs = ", ".join(f"{x:.3g}" for x in t.wall)
        print(
            f"  {k:<46} wall {_si(w)}  cpu {_si(c)}  {ratio:6.2f}x wall / {cratio:6.2f}x cpu of "
            f"{ref}{gf}  (runs {runs} s; load {t.load_range()})"
        )


def _si(sec: float) -> str:
    for f, u in ((1.0, "s "), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if sec >= f:
            return f"{sec / f:8.3f} {u}"
    return f"{sec * 1e12:8.3f} ps"


def rel_diff(a, b) -> float:
    """max |a − b| / max |b| (elementwise arrays, any array library convertible by numpy)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def header() -> None:
    import platform

    import numba

    print(
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}); numba {numba.__version__}, "
        f"{numba.config.NUMBA_NUM_THREADS} threads max; XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}"
    )
