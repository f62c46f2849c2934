"""What the dataset checksums cost: python bench/checksums.py [--config data/configs/icl_fig1.toml]
[--repeat 3] [--set KEY=VALUE ...].

Every dataset fastdyn writes carries a checksum (``fastdyn.h5.verify``): Fletcher32 on every
array, a CRC-32 attribute on scalars. Before, only the streamed series and the static arrays
carried one; the datasets written at the close (final weights, theory levels), the axis scales
and the scalars carried none. This runs one trained config in this process, alternating the two
(the former layout by patching the writer's ``create_checked`` and the reader's
``read_verified``), and prints per variant the best of ``--repeat``:

- write: seconds spent inside ``RunWriter`` (opening, appends, checkpoints, close, the rewrite
  without the checkpoint), timed around its methods during a real run;
- read: ``fastdyn.load`` of the finished file (every dataset read and, with the checksums,
  verified), best of 20 per file;
- the file size; and the ratios with checksums ÷ without. The two files are compared: the same
  datasets, bit for bit.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from fastdyn.config import load_config
from fastdyn.drive.run import simulate
from fastdyn.h5 import reader as R
from fastdyn.h5 import writer as W
from fastdyn.h5.torn import read_rows


def _former(static: set[str]):
    """``create_checked`` as the writer stored datasets before: Fletcher32 on the static arrays
    (``static``: their names) only, everything else plain."""

    def create(f, name, data):
        arr = np.asarray(data)
        kw = {"fletcher32": True} if name in static and arr.ndim and arr.size else {}
        return f.create_dataset(name, data=data, **kw)

    return create


class _Timed:
    """Accumulates the seconds spent in RunWriter's methods while installed."""

    def __init__(self, checked: bool):
        self.checked, self.seconds, self.saved = checked, 0.0, {}

    def __enter__(self) -> _Timed:
        static: set[str] = set()
        orig_static = W._create_static

        def create_static(f, arrays, *a, **k):
            static.update(arrays)
            return orig_static(f, arrays, *a, **k)

        patches = {(W, "_create_static"): create_static}
        if not self.checked:
            patches[(W, "create_checked")] = _former(static)
        for name in ("__init__", "append", "checkpoint", "close"):
            patches[(W.RunWriter, name)] = self._timed(getattr(W.RunWriter, name))
        for (obj, name), fn in patches.items():
            self.saved[(obj, name)] = getattr(obj, name)
            setattr(obj, name, fn)
        return self

    def _timed(self, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0

        return wrapper

    def __exit__(self, *exc) -> None:
        for (obj, name), fn in self.saved.items():
            setattr(obj, name, fn)


def _read(path: Path, checked: bool) -> float:
    orig = R.read_verified
    if not checked:
        R.read_verified = read_rows  # the reader before: no CRC attribute to look up
    try:
        best = float("inf")
        for _ in range(20):
            t0 = time.perf_counter()
            R.load(path)
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        R.read_verified = orig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="data/configs/icl_fig1.toml")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cfg = load_config(a.config, a.sets, note=lambda _line: None)
    write = {True: float("inf"), False: float("inf")}
    read = dict(write)
    size: dict[bool, int] = {}
    with tempfile.TemporaryDirectory() as d:
        simulate(cfg, Path(d) / "warm.h5")  # compiles the kernels
        for _ in range(a.repeat):
            for checked in (False, True):
                p = Path(d) / f"{'checked' if checked else 'former'}.h5"
                p.unlink(missing_ok=True)
                with _Timed(checked) as t:
                    status = simulate(cfg, p)
                assert status.startswith("complete"), status
                write[checked] = min(write[checked], t.seconds)
                read[checked] = min(read[checked], _read(p, checked))
                size[checked] = p.stat().st_size
        x, y = R.load(Path(d) / "former.h5"), R.load(Path(d) / "checked.h5")
        assert sorted(x.series) == sorted(y.series)
        assert all(
            x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k], equal_nan=True)
            for k in x.series
        ), "the files differ"
        n = len(y.series)
    print(f"{a.config} {' '.join(a.sets)}: {n} datasets, best of {a.repeat} alternating runs")
    print(f"  {'':28s} {'without':>10s} {'with':>10s} {'ratio':>7s}")
    rows = [
        ("write (inside RunWriter), s", write),
        ("read (fastdyn.load), s", read),
        ("file size, kB", {k: v / 1e3 for k, v in size.items()}),
    ]
    for label, v in rows:
        print(f"  {label:28s} {v[False]:10.4f} {v[True]:10.4f} {v[True] / v[False]:7.3f}")


if __name__ == "__main__":
    main()
