"""Appending rows through the fail-stop file object against HDF5's own sec2 driver:
python bench/writer.py [--rows 2000] [--series 8] [--width 16].

fastdyn writes every HDF5 file through ``fastdyn.h5.failstop.FailStopFile`` (h5py's ``fileobj``
driver: each HDF5 I/O calls back into Python), so that a failed write never reaches HDF5. This
times ``RunWriter.append`` of one row at a time (flushed each time, as a run saves) with that
file object, and with the same writer opening the file through HDF5's ``sec2`` driver instead
(no fail-stop, no reservation), in the same process, alternating; prints µs per append and the
ratio. The files are compared: the same rows.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from fastdyn.h5 import writer as W
from fastdyn.h5.reader import load


class _Plain:
    """What the writer asks of its file object, for a file HDF5 opens itself (sec2)."""

    error = None

    def reserve(self, nbytes: int) -> None:
        pass

    def reserved(self) -> int:
        return 0

    def holds(self, nbytes: int) -> bool:
        return True

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


def _sec2(path, mode):
    return h5py.File(path, mode, libver="latest"), _Plain()


def _run(path: Path, rows: int, series: int, width: int, plain: bool) -> float:
    orig = W.open_failstop
    if plain:
        W.open_failstop = _sec2
    try:
        w = W.RunWriter(
            path, model="bench", config_toml="", seed=0,
            series={f"s{k}": (width,) for k in range(series)},
        )  # fmt: skip
        rng = np.random.default_rng(0)
        data = rng.standard_normal((rows, series, width))
        t0 = time.perf_counter()
        for i in range(rows):
            w.append(np.array([float(i)]), {f"s{k}": data[i, k][None] for k in range(series)})
        dt = time.perf_counter() - t0
        w.close("complete")
    finally:
        W.open_failstop = orig
    return dt / rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--series", type=int, default=8)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        best = {True: float("inf"), False: float("inf")}
        for _ in range(a.repeat):
            for plain in (True, False):
                p = Path(d) / f"{'sec2' if plain else 'failstop'}.h5"
                p.unlink(missing_ok=True)
                best[plain] = min(best[plain], _run(p, a.rows, a.series, a.width, plain))
        x, y = load(Path(d) / "sec2.h5"), load(Path(d) / "failstop.h5")
        assert all(np.array_equal(x[k], y[k]) for k in x.series), "the files differ"
    print(f"{a.rows} appends of {a.series} series × {a.width} float64, best of {a.repeat}:")
    print(f"  sec2 driver (HDF5's own):      {best[True] * 1e6:8.1f} µs per append")
    print(f"  fail-stop file object:         {best[False] * 1e6:8.1f} µs per append")
    print(f"  ratio fail-stop / sec2:        {best[False] / best[True]:8.2f}")


if __name__ == "__main__":
    main()
