"""Readers of running files, every registered model: how many reads, and how many saw a torn row.

For each model a writer (a subprocess that sleeps ``--pause`` s after each appended row set, so
reads overlap many appends) writes a small run while four readers poll it in turn:

- ``h5py``: plain SWMR h5py, every time-indexed series cut to the shortest (docs/reliability.md);
- ``fastdyn.load``;
- ``xarray-fastdyn``: ``xr.open_datatree(p, engine="fastdyn")``;
- ``xarray-h5netcdf``: ``xr.open_datatree(p, engine="h5netcdf")`` with the SWMR driver options,
  which the docs say not to use on a running file (shown for the record).

Every row a reader returns is compared bit for bit with an uninterrupted run of the same config;
a row that differs, or is NaN where the reference is not, counts as torn. A read that raises
counts as an error (h5netcdf meeting a chunk being rewritten, for example).

    python bench/swmr_reads.py            # every model, prints one line per model and reader
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
import xarray as xr
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.reliability.test_every_model import CASES  # noqa: E402 — one small config per model

#: longer runs than the suite's, so that the readers overlap hundreds of appends
LONGER = {
    "msfr": ["time.n_times=1000", "output.times_per_segment=1"],
    "msfr-h": ["time.n_times=1000", "output.times_per_segment=1"],
    "logistic": ["time.n_times=1000", "output.times_per_segment=1"],
    "msfr-attn": ["schedule.epochs=2000", "schedule.n_saves=1000"],
    "attn-m": ["schedule.epochs=1000", "schedule.save_every=1"],
    "attn-s": ["schedule.epochs=1000", "schedule.save_every=1"],
    "mlp-cubic": ["schedule.epochs=1000", "schedule.save_every=1"],
}
SLOW = (
    "import sys, time, fastdyn.h5.writer as w; from fastdyn.cli import main\n"
    "orig = w.RunWriter.append\n"
    "def append(self, *a, **k):\n    orig(self, *a, **k); time.sleep(float(sys.argv[1]))\n"
    "w.RunWriter.append = append\nmain(sys.argv[2:])"
)


def _args(model: str) -> list[str]:
    return [a for kv in [f"model={model}", *CASES[model], *LONGER[model]] for a in ("--set", kv)]


def _h5py(p: Path) -> dict[str, np.ndarray]:
    out = {}
    with h5py.File(p, "r", libver="latest", swmr=True) as f:

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.maxshape and obj.maxshape[0] is None:
                if not name.startswith("checkpoint"):
                    out["time" if name.endswith("/time") else name] = obj[()]

        f.visititems(visit)
    n = min(len(v) for v in out.values())
    return {k: v[:n] for k, v in out.items()}


def _load(p: Path) -> dict[str, np.ndarray]:
    run = fastdyn.load(p)
    return dict(run.series)


def _tree(p: Path, engine: str, **kw) -> dict[str, np.ndarray]:
    out = {}
    for group, ds in xr.open_datatree(p, engine=engine, **kw).to_dict().items():
        for k, v in ds.variables.items():
            if v.dims[:1] == ("time",):
                out[f"{group}/{k}".strip("/")] = v.values
    return out


READERS = {
    "h5py": _h5py,
    "fastdyn.load": _load,
    "xarray-fastdyn": lambda p: _tree(p, "fastdyn"),
    "xarray-h5netcdf": lambda p: _tree(
        p, "h5netcdf", driver_kwds={"swmr": True, "libver": "latest"}
    ),
}


def _torn(got: dict[str, np.ndarray], ref: fastdyn.h5.Run) -> int:
    """Rows of any time-indexed series that differ from the reference's (NaN where it has a
    number included)."""
    bad = 0
    for k, v in got.items():
        if k not in ref or ref[k].shape[:1] != ref.time.shape or v.ndim == 0 or len(v) == 0:
            continue
        want = ref[k][: len(v)]
        if len(v) > len(want):
            bad += len(v) - len(want)
            v = v[: len(want)]
        same = (v == want) | (np.isnan(v) & np.isnan(want))
        bad += int((~same.reshape(len(v), -1).all(axis=1)).sum())
    return bad


def run_model(model: str, pause: float, tmp: Path) -> dict[str, list[int]]:
    ref_path = tmp / f"{model}-ref.h5"
    res = CliRunner().invoke(main, ["-q", "simulate", *_args(model), "-o", str(ref_path)])
    assert res.exit_code == 0, res.output
    ref = fastdyn.load(ref_path)
    p = tmp / f"{model}-live.h5"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW, str(pause), "-q", "simulate", *_args(model), "-o", str(p)],
        cwd=ROOT,
        env=dict(os.environ, NUMBA_NUM_THREADS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    counts = {name: [0, 0, 0] for name in READERS}  # reads, torn rows, errors
    while not p.exists() and proc.poll() is None:
        time.sleep(0.002)
    while proc.poll() is None:
        for name, read in READERS.items():
            try:
                got = read(p)
            except Exception:  # noqa: BLE001 — counted, the poll goes on
                counts[name][2] += 1
                continue
            counts[name][0] += 1
            counts[name][1] += _torn(got, ref)
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return counts


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=sorted(CASES))
    ap.add_argument("--pause", type=float, default=0.02, help="writer sleep per append, s")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    total: dict[str, list[int]] = {name: [0, 0, 0] for name in READERS}
    with tempfile.TemporaryDirectory() as d:
        for model in a.models:
            counts = run_model(model, a.pause, Path(d))
            for name, (reads, torn, errors) in counts.items():
                print(
                    f"{model:10s} {name:16s} reads {reads:5d}  torn rows {torn:5d}  errors {errors}"
                )
                total[name] = [x + y for x, y in zip(total[name], counts[name], strict=True)]
    for name, (reads, torn, errors) in total.items():
        print(f"{'all':10s} {name:16s} reads {reads:5d}  torn rows {torn:5d}  errors {errors}")


if __name__ == "__main__":
    main_()
