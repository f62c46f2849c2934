"""The sweep index file (format ``fastdyn-sweep`` version 1; docs/sweeps.md).

An HDF5 file, ``index.h5`` in the sweep's output directory, always written whole to
``index.h5.tmp`` and renamed over the old one (so a reader, or a crash, only ever sees a complete
index), under an exclusive lock on ``index.h5.lock`` so that concurrent shards replace it one at a
time. Contents:

- root attributes ``format = "fastdyn-sweep"``, ``format_version = 1``, ``sweep`` (the sweep TOML
  text), ``generated_by``, ``versions`` (JSON: the packages that wrote it and the checkout's
  commit, :func:`fastdyn.h5.provenance.versions`);
- ``/points``: 1-d datasets, one row per point in point order: ``id`` (int64), ``name``,
  ``status`` ("complete" | "failed: …" | "pending" | "running" | "interrupted"), ``path`` (point
  file relative to the index's directory), ``error`` ("" if none), ``wall_s`` (NaN if not run) and
  one ``param:<dotted.key>`` per swept parameter (float64 for numbers, str otherwise);
- ``/runs``: one HDF5 external link per point that has a file, named by the point's name, to the
  root of that file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .._version import __version__
from .provenance import versions

FORMAT_NAME = "fastdyn-sweep"
FORMAT_VERSION = 1
PENDING = "pending"
COMPLETE = "complete"


@dataclass
class Row:
    """The index row of one point."""

    status: str = PENDING
    error: str = ""
    wall_s: float = math.nan

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE


def error_of(status: str) -> str:
    """The message of a ``failed: …`` / ``interrupted: …`` status ("" otherwise)."""
    if status == COMPLETE or ":" not in status:
        return ""
    return status.split(":", 1)[1].strip()


def _file_row(path: Path, config_toml: str | None) -> Row | None:
    """The row a point file implies, or None when there is no file. A file whose config differs
    from the point's (left by an edited sweep) is reported failed, so --resume reruns it."""
    if not path.is_file():
        return None
    from ..h5.reader import FileFormatError, load

    try:
        run = load(path, series=False)
    except FileFormatError as e:
        msg = f"unreadable point file ({str(e).splitlines()[0]})"
        return Row(f"failed: {msg}", msg)
    status = run.status or "running"
    if status == COMPLETE:  # killed inside its close: closed now, as every complete point is
        from ..h5.repair import finish_close

        keep = run.config.get("output", {}).get("keep_checkpoint", False)
        finish_close(path, keep_checkpoint=bool(keep))
    if config_toml is not None and run.attrs.get("config") != config_toml:
        msg = (
            "the point file's config differs from the sweep point (stale file from an edited sweep)"
        )
        return Row(f"failed: {msg}", msg)
    t = run.attrs.get("timings")
    wall = float(t.get("total", t.get("wall", math.nan))) if isinstance(t, dict) else math.nan
    if status == "running":
        wall = math.nan
    return Row(status, error_of(status), wall)


def scan(out_dir: Path, points: list[Any], cache: dict | None = None) -> dict[int, Row]:
    """Rows of every point from the point files present in ``out_dir`` (pending where absent).
    ``cache`` (a dict kept by the caller) skips reopening files unchanged since the last scan."""
    rows = {}
    for p in points:
        path = out_dir / p.relpath
        key = None
        if cache is not None:
            try:
                st = path.stat()
                key = (st.st_ino, st.st_mtime_ns, st.st_size)
            except OSError:
                key = None
            hit = cache.get(p.id)
            if key is not None and hit is not None and hit[0] == key:
                rows[p.id] = hit[1]
                continue
        r = _file_row(path, p.config_toml)
        rows[p.id] = r if r is not None else Row()
        if cache is not None and key is not None:
            cache[p.id] = (key, rows[p.id])
    return rows


@contextlib.contextmanager
def locked(out_dir: Path, index_name: str = "index.h5") -> Iterator[None]:
    """An exclusive lock on ``<index>.lock`` (shards of one sweep replace the index in turn)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"{index_name}.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _column(values: list[Any]) -> np.ndarray:
    """float64 when every value is a number (or "inf"), else utf-8 strings."""

    def num(v: Any) -> bool:
        return (isinstance(v, int | float) and not isinstance(v, bool)) or v in ("inf", "-inf")

    if all(num(v) for v in values):
        return np.array([float(v) for v in values], dtype=np.float64)
    return np.array([str(v) for v in values], dtype=object)


def write(
    out_dir: Path,
    points: list[Any],
    rows: dict[int, Row],
    sweep_text: str,
    index_name: str = "index.h5",
) -> Path:
    """Write the index of ``points`` with ``rows`` atomically (tmp file, then rename); returns its
    path. The caller holds :func:`locked` when several processes may write."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / index_name
    tmp = out_dir / f"{index_name}.tmp"
    s = h5py.string_dtype("utf-8")
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = FORMAT_NAME
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["sweep"] = sweep_text
        f.attrs["generated_by"] = f"fastdyn {__version__}"
        f.attrs["versions"] = json.dumps(versions())
        g = f.create_group("points")
        g.create_dataset("id", data=np.array([p.id for p in points], dtype=np.int64))
        g.create_dataset("name", data=[p.name for p in points], dtype=s)
        g.create_dataset("status", data=[rows[p.id].status for p in points], dtype=s)
        g.create_dataset("path", data=[p.relpath for p in points], dtype=s)
        g.create_dataset("error", data=[rows[p.id].error for p in points], dtype=s)
        g.create_dataset(
            "wall_s", data=np.array([rows[p.id].wall_s for p in points], dtype=np.float64)
        )
        keys: list[str] = []
        for p in points:
            keys += [k for k in p.params if k not in keys]
        for k in keys:
            col = _column([p.params.get(k, "") for p in points])
            g.create_dataset(f"param:{k}", data=col, dtype=s if col.dtype == object else col.dtype)
        for name, ds in g.items():
            ds.attrs["units"] = "s" if name == "wall_s" else "1"
            ds.attrs["long_name"] = _POINT_COLUMNS.get(name) or f"swept parameter {name[6:]}"
        r = f.create_group("runs")
        for p in points:
            if (out_dir / p.relpath).is_file():
                r[p.name] = h5py.ExternalLink(p.relpath, "/")
    os.replace(tmp, path)
    return path


#: long_name of each ``/points`` column (a ``param:<key>`` column: "swept parameter <key>")
_POINT_COLUMNS = {
    "id": "point number (0-based, in point order)",
    "name": "point name (the file name of its run under points/)",
    "status": "run status: complete, failed: <why>, pending, running or interrupted",
    "path": "the point's run file, relative to the index's folder",
    "error": "why the point failed (empty when it did not)",
    "wall_s": "wall-clock time of the point's run (NaN when not run)",
}


def _str(a: Any) -> str:
    return a.decode() if isinstance(a, bytes) else str(a)


def read(path: str | os.PathLike) -> dict[str, Any]:
    """The ``/points`` table of an index file as ``{column: list}`` plus ``_attrs``
    (FileFormatError with one line for a file that is not a sweep index)."""
    from ..h5.reader import FileFormatError

    p = Path(path)
    if not p.is_file():
        raise FileFormatError(f"{p}: no such sweep index")
    try:
        f = h5py.File(p, "r")
    except OSError as e:
        raise FileFormatError(
            f"{p}: not a readable sweep index ({str(e).splitlines()[0]})"
        ) from None
    with f:
        if _str(f.attrs.get("format", "")) != FORMAT_NAME or "points" not in f:
            raise FileFormatError(f"{p}: not a sweep index (no format = '{FORMAT_NAME}' attribute)")
        out: dict[str, Any] = {
            "_attrs": {k: _str(v) if isinstance(v, bytes | str) else v for k, v in f.attrs.items()}
        }
        for name, ds in f["points"].items():
            data = ds[()]
            out[name] = [_str(x) for x in data] if ds.dtype.kind in "OS" else data.tolist()
    return out


def read_index(path: str | os.PathLike) -> list[Path]:
    """Paths of the complete points of a sweep index (relative paths resolved against its folder)."""
    t = read(path)
    base = Path(path).parent
    return [base / rel for rel, st in zip(t["path"], t["status"], strict=True) if st == COMPLETE]
