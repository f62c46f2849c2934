"""One save of a trained run (an HDF5 append) against what a user would write with plain h5py:
python bench/h5_append.py [--saves 602] [--repeat 7] [--like FILE.h5] [--dir DIR].

A save of a trained run appends one row to every streamed series and flushes, so that a reader
or a kill -9 finds every saved row on the disk. The series default to those of
``fastdyn simulate icl_fig1`` (``/time``, ``/step``, three losses, Γ 4×4, its 4 eigenvalues and
the 8 value weights; ``--like`` takes the series of a written file instead). Each variant writes
``--saves`` rows, one save at a time, into a fresh file; the variants alternate, ``--repeat``
times, and the median (min–max) per save is printed with its ratio to fastdyn's:

- ``fastdyn``: :meth:`RunWriter.append` (fail-stop file object, SWMR, Fletcher32), split into
  writing the rows and the flush;
- ``fastdyn, rows via h5py``: the same writer making its HDF5 calls through h5py's low-level API
  (how it appended before);
- ``h5py preallocated, flush per save``: datasets of the final shape, contiguous, no filter,
  ``ds[i] = row`` and ``f.flush()`` (rows on the disk at each save, as fastdyn's);
- ``h5py preallocated, one flush``: the same without the flush per save (a kill loses them all);
- ``rows in numpy, one h5py write at the end``: the rows kept in arrays, the file written once
  when the run ends (nothing on the disk before);
- ``h5py resize per row, flush per save``: chunked (h5py's choice), ``ds.resize`` + ``ds[i] =``
  + ``f.flush()``; and the same in SWMR mode (``libver="latest"``, ``swmr_mode = True``).

Bounds on this disk: one ``os.pwrite`` of 8 KiB and of 340 bytes (a save writes a chunk and an
object header per series), ``fsync`` after such a write, and an ``H5Fflush`` with nothing to
write. The load average is printed before and after. Every file's rows are compared with
fastdyn's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

from fastdyn.h5 import writer as W

#: the series of ``fastdyn simulate icl_fig1`` (trailing shapes; /time and /step besides)
FIG1 = {
    "loss/train": (),
    "loss/test_ic": (),
    "loss/test_iw": (),
    "params/Gamma": (4, 4),
    "params/Gamma_eig": (4,),
    "params/value_weights": (8,),
}


def _series_like(path: str) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}

    def visit(name: str, obj) -> None:
        if (
            isinstance(obj, h5py.Dataset)
            and obj.maxshape
            and obj.maxshape[0] is None
            and name.rsplit("/", 1)[-1] not in ("time", "step")
            and not name.startswith("checkpoint")
        ):
            out[name] = tuple(obj.shape[1:])

    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        f.visititems(visit)
    return out


def _data(series: dict[str, tuple[int, ...]], saves: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{k: rng.standard_normal((1, *s)) for k, s in series.items()} for _ in range(saves)]


def _fastdyn(path: Path, series, rows, direct: bool = True) -> dict[str, float]:
    w = W.RunWriter(path, model="bench", config_toml="", seed=0, series=series, with_step=True)
    if not direct:
        from fastdyn.h5.rows import Appender

        w._rows = Appender({n: w._f[n] for n in w._names}, direct=False)
    flush, spent = w._f.flush, [0.0]

    def timed_flush() -> None:
        t = time.perf_counter()
        flush()
        spent[0] += time.perf_counter() - t

    w._f.flush = timed_flush
    t0 = time.perf_counter()
    for i, r in enumerate(rows):
        w.append(np.array([float(i)]), r, np.array([i]))
    dt = time.perf_counter() - t0
    w._f.flush = flush
    w.close("complete")
    n = len(rows)
    return {"save": dt / n, "flush": spent[0] / n, "rows": (dt - spent[0]) / n}


def _h5py_prealloc(path: Path, series, rows, flush_each: bool) -> dict[str, float]:
    n = len(rows)
    with h5py.File(path, "w") as f:
        t = f.create_dataset("time", shape=(n,), dtype="f8")
        s = f.create_dataset("step", shape=(n,), dtype="i8")
        ds = {k: f.create_dataset(k, shape=(n, *sh), dtype="f8") for k, sh in series.items()}
        f.flush()
        t0 = time.perf_counter()
        for i, r in enumerate(rows):
            t[i] = float(i)
            s[i] = i
            for k, d in ds.items():
                d[i] = r[k][0]
            if flush_each:
                f.flush()
        dt = time.perf_counter() - t0
    return {"save": dt / n}


def _numpy_then_h5py(path: Path, series, rows) -> dict[str, float]:
    n = len(rows)
    t0 = time.perf_counter()
    buf = {k: np.empty((n, *sh)) for k, sh in series.items()}
    for i, r in enumerate(rows):
        for k, b in buf.items():
            b[i] = r[k][0]
    with h5py.File(path, "w") as f:
        f["time"] = np.arange(n, dtype=np.float64)
        f["step"] = np.arange(n, dtype=np.int64)
        for k, b in buf.items():
            f[k] = b
    return {"save": (time.perf_counter() - t0) / n}


def _h5py_resize(path: Path, series, rows, swmr: bool) -> dict[str, float]:
    n = len(rows)
    kw = {"libver": "latest"} if swmr else {}
    with h5py.File(path, "w", **kw) as f:
        t = f.create_dataset("time", shape=(0,), maxshape=(None,), dtype="f8", chunks=True)
        s = f.create_dataset("step", shape=(0,), maxshape=(None,), dtype="i8", chunks=True)
        ds = {
            k: f.create_dataset(k, shape=(0, *sh), maxshape=(None, *sh), dtype="f8", chunks=True)
            for k, sh in series.items()
        }
        if swmr:
            f.swmr_mode = True
        t0 = time.perf_counter()
        for i, r in enumerate(rows):
            for d in (t, s, *ds.values()):
                d.resize(i + 1, axis=0)
            t[i] = float(i)
            s[i] = i
            for k, d in ds.items():
                d[i] = r[k][0]
            f.flush()
        dt = time.perf_counter() - t0
    return {"save": dt / n}


def _bounds(d: Path, loops: int = 20000) -> dict[str, float]:
    p = d / "bound.bin"
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        os.pwrite(fd, bytes(1 << 20), 0)
        big, small = b"x" * 8192, b"y" * 340

        def per(f: Callable[[int], object], n: int) -> float:
            t0 = time.perf_counter()
            for i in range(n):
                f(i)
            return (time.perf_counter() - t0) / n

        out = {
            "pwrite 8 KiB": per(lambda i: os.pwrite(fd, big, (i % 64) * 8192 + 512), loops),
            "pwrite 340 B": per(lambda i: os.pwrite(fd, small, (i % 64) * 8192), loops),
            "pwrite 8 KiB + fsync": per(lambda i: (os.pwrite(fd, big, 0), os.fsync(fd)), 100),
        }
    finally:
        os.close(fd)
    w = W.RunWriter(d / "idle.h5", model="bench", config_toml="", seed=0, series=FIG1)
    t0 = time.perf_counter()
    for _ in range(loops // 10):
        w._f.flush()
    out["H5Fflush, nothing to write (fail-stop)"] = (time.perf_counter() - t0) / (loops // 10)
    w.close("complete")
    with h5py.File(d / "idle2.h5", "w", libver="latest") as f:
        f.create_dataset("x", data=np.zeros(4))
        t0 = time.perf_counter()
        for _ in range(loops // 10):
            f.flush()
        out["H5Fflush, nothing to write (sec2)"] = (time.perf_counter() - t0) / (loops // 10)
    return out


def _same(a: Path, b: Path, series) -> None:
    with h5py.File(a, "r") as f, h5py.File(b, "r") as g:
        for k in ["time", "step", *series]:
            assert np.array_equal(f[k][()], g[k][()]), f"{a.name} and {b.name} differ in {k}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--saves", type=int, default=602)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--like", help="take the series of this written file")
    ap.add_argument("--dir", help="write the files here (default: a temporary directory)")
    ap.add_argument(
        "--fastdyn-only",
        action="store_true",
        help="only fastdyn's writer (runs on checkouts older than fastdyn.h5.rows too)",
    )
    a = ap.parse_args()
    series = _series_like(a.like) if a.like else FIG1
    rows = _data(series, a.saves)
    variants: dict[str, Callable[[Path], dict[str, float]]] = {
        "fastdyn": lambda p: _fastdyn(p, series, rows),
        "fastdyn, rows via h5py": lambda p: _fastdyn(p, series, rows, direct=False),
        "h5py preallocated, flush per save": lambda p: _h5py_prealloc(p, series, rows, True),
        "h5py preallocated, one flush": lambda p: _h5py_prealloc(p, series, rows, False),
        "rows in numpy, one h5py write at the end": lambda p: _numpy_then_h5py(p, series, rows),
        "h5py resize per row, flush per save": lambda p: _h5py_resize(p, series, rows, False),
        "h5py resize per row, flush per save, SWMR": lambda p: _h5py_resize(p, series, rows, True),
    }
    if a.fastdyn_only:
        variants = {"fastdyn": variants["fastdyn"]}
    load0 = open("/proc/loadavg").read().split()[:3]
    got: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        d = Path(tmp)
        names = list(variants)
        for r in range(a.repeat):
            for j in range(len(names)):
                name = names[(j + r) % len(names)]  # a different order each round
                p = d / f"v{names.index(name)}.h5"
                p.unlink(missing_ok=True)
                got[name].append(variants[name](p))
        for j in range(1, len(names)):
            _same(d / "v0.h5", d / f"v{j}.h5", series)
        bounds = _bounds(d)
    load1 = open("/proc/loadavg").read().split()[:3]
    width = sum(int(np.prod(s)) for s in series.values()) + 2
    print(
        f"{a.saves} saves of {len(series) + 2} series ({width} numbers a row), "
        f"median (min-max) of {a.repeat} alternating runs; load {' '.join(load0)} -> {' '.join(load1)}"
    )
    base = statistics.median(x["save"] for x in got["fastdyn"])
    for name, runs in got.items():
        per = [x["save"] * 1e3 for x in runs]
        med = statistics.median(per)
        extra = ""
        if "flush" in runs[0]:
            fl = statistics.median(x["flush"] * 1e3 for x in runs)
            rw = statistics.median(x["rows"] * 1e3 for x in runs)
            extra = f"  (rows {rw:.3f}, flush {fl:.3f})"
        print(
            f"  {name:44s} {med:7.3f} ms ({min(per):.3f}-{max(per):.3f})  "
            f"÷ fastdyn {med / (base * 1e3):5.2f}{extra}"
        )
    print("bounds on this disk:")
    for name, sec in bounds.items():
        print(f"  {name:44s} {sec * 1e3:7.4f} ms")


if __name__ == "__main__":
    main()
