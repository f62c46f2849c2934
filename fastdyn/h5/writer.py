"""Streaming HDF5 writer: create every dataset, switch on SWMR, append rows, finish.

Discipline (documented in the README): all datasets and attributes are created first with
``status = "running"``; the file is then put in SWMR mode (``libver="latest"``), so readers may
follow it and a killed process leaves a file that opens with h5py up to the last flush. Rows are
appended along axis 0 of every time series at once and flushed after each append. Finishing closes
the SWMR handle and reopens the file once to write the final ``status`` and ``timings``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time as _time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .. import __version__
from . import layout


def versions() -> dict[str, str]:
    """Versions of everything that shapes the numbers."""
    import numba

    return {
        "fastdyn": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "platform": platform.platform(),
    }


def _link_scale(f: h5py.File, series: str, scale: str) -> None:
    """Hard-link dimension scale ``scale`` into the group of ``series`` under its base name, so that
    netCDF readers (xarray + h5netcdf) opening that group see it as the coordinate."""
    group = series.rsplit("/", 1)[0] if "/" in series else ""
    base = scale.rsplit("/", 1)[-1]
    target = f"{group}/{base}" if group else base
    if group and target != scale and target not in f:
        f[target] = f[scale]


class RunWriter:
    """One output file. Series are declared up front: ``{path: trailing_shape}``."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        model: str,
        config_toml: str,
        seed: int,
        series: dict[str, tuple[int, ...]],
        static: dict[str, np.ndarray] | None = None,
        scales: dict[str, tuple[str, int]] | None = None,
        with_step: bool = False,
        extra_attrs: dict[str, Any] | None = None,
        chunk_rows: int = 1024,
        time_units: str | None = None,
    ):
        self.path = Path(path)
        self.t_start = _time.time()
        f = h5py.File(self.path, "w", libver="latest")
        a = f.attrs
        a["format"] = layout.FORMAT_NAME
        a["format_version"] = layout.FORMAT_VERSION
        a["generated_by"] = f"fastdyn {__version__}"
        a["model"] = model
        a["config"] = config_toml
        a["versions"] = json.dumps(versions())
        a["seed"] = int(seed)
        a["command_line"] = " ".join(sys.argv)
        a["created"] = _time.strftime("%Y-%m-%dT%H:%M:%S%z")
        a["status"] = layout.STATUS_RUNNING
        a["timings"] = "{}"
        for k, v in (extra_attrs or {}).items():
            a[k] = v
        self._series: dict[str, h5py.Dataset] = {}
        tds = f.create_dataset(layout.TIME, shape=(0,), maxshape=(None,), dtype="f8", chunks=(chunk_rows,))
        tds.make_scale(layout.TIME)
        self._describe(tds, layout.TIME)
        if time_units:
            tds.attrs["units"] = time_units
        self._series[layout.TIME] = tds
        if with_step:
            sds = f.create_dataset(layout.STEP, shape=(0,), maxshape=(None,), dtype="i8", chunks=(chunk_rows,))
            self._describe(sds, layout.STEP)
            sds.dims[0].attach_scale(tds)
            self._series[layout.STEP] = sds
        for name, arr in (static or {}).items():
            ds = f.create_dataset(name, data=np.asarray(arr))
            self._describe(ds, name)
        for name, (scale_name, _axis) in (scales or {}).items():
            f[name].make_scale(scale_name)
        for name, trailing in series.items():
            width = int(np.prod(trailing)) if trailing else 1
            rows = max(1, min(chunk_rows, (1 << 21) // (8 * width)))  # ≤ 2 MiB per chunk
            kw = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if width >= 64 else {}
            ds = f.create_dataset(name, shape=(0, *trailing), maxshape=(None, *trailing), dtype="f8", chunks=(rows, *trailing), fillvalue=np.nan, **kw)
            self._describe(ds, name)
            ds.dims[0].attach_scale(tds)
            _link_scale(f, name, layout.TIME)
            for sname, (_scale_label, axis) in (scales or {}).items():
                if 0 < axis < ds.ndim and ds.shape[axis] == f[sname].shape[0]:
                    ds.dims[axis].attach_scale(f[sname])
                    _link_scale(f, name, sname)
            self._series[name] = ds
        self.n_rows = 0
        f.flush()
        f.swmr_mode = True
        self._f = f

    @staticmethod
    def _describe(ds: h5py.Dataset, name: str) -> None:
        units, long_name = layout.DESCRIPTIONS.get(name, ("1", name))
        ds.attrs["units"] = units
        ds.attrs["long_name"] = long_name

    def append(self, times: np.ndarray, rows: dict[str, np.ndarray], steps: np.ndarray | None = None) -> None:
        """Append ``len(times)`` rows to every series, then flush (readers see them at once)."""
        k = len(times)
        if k == 0:
            return
        n0, n1 = self.n_rows, self.n_rows + k
        missing = set(self._series) - set(rows) - {layout.TIME, layout.STEP}
        if missing:
            raise ValueError(f"append: missing series {sorted(missing)}")
        for name, ds in self._series.items():
            if name == layout.TIME:
                data = np.asarray(times, dtype=np.float64)
            elif name == layout.STEP:
                data = np.asarray(steps, dtype=np.int64)
            else:
                data = np.asarray(rows[name], dtype=np.float64)
            ds.resize(n1, axis=0)
            ds[n0:n1] = data
        self.n_rows = n1
        self._f.flush()

    def close(
        self,
        status: str,
        timings: dict[str, float] | None = None,
        attrs: dict[str, Any] | None = None,
        datasets: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Close the SWMR handle, then record the final status (and timings) in the root
        attributes, plus any end-of-run ``datasets`` (final weights)."""
        if self._f is None:
            return
        self._f.flush()
        self._f.close()
        self._f = None
        with h5py.File(self.path, "r+", libver="latest") as f:
            f.attrs["status"] = status
            t = dict(timings or {})
            t.setdefault("wall", _time.time() - self.t_start)
            f.attrs["timings"] = json.dumps(t)
            for k, v in (attrs or {}).items():
                f.attrs[k] = v
            for k, v in (datasets or {}).items():
                ds = f.create_dataset(k, data=v)
                self._describe(ds, k)

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._f is not None:
            self.close("failed: " + (str(exc).splitlines()[0] if exc else "closed without status"))
