"""Parameter sweeps: grids, zips, seeds; local, Dask or SLURM arrays; one file per point + an index.

Calls ``drive/`` (:func:`fastdyn.simulate`) for every point, never kernels. See docs/sweeps.md.

    from fastdyn.sweep import load, run_sweep
    sw = load("data/sweeps/d_scan.toml")
    res = run_sweep(sw, "results/d_scan", executor=None)        # or any concurrent.futures executor
"""

from __future__ import annotations

from .index import read, read_index
from .runner import SweepResult, reindex, run_point, run_sweep
from .spec import Point, Sweep, SweepError, expand, load, parse

__all__ = [
    "Point",
    "Sweep",
    "SweepError",
    "SweepResult",
    "expand",
    "load",
    "parse",
    "read",
    "read_index",
    "reindex",
    "run_point",
    "run_sweep",
]
