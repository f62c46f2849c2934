"""Read fastdyn HDF5 files into numpy arrays (the format of :mod:`fastdyn.h5.layout`)."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from . import layout


class FileFormatError(ValueError):
    """A file that is missing, not HDF5, not a fastdyn file or damaged (one-line message)."""


@dataclass
class Run:
    """One run read from disk: series by path (``"loss/test"``), attributes, the config as a dict."""

    path: Path
    attrs: dict[str, Any]
    config: dict[str, Any]
    series: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return str(self.attrs.get("status", ""))

    @property
    def model(self) -> str:
        return str(self.attrs.get("model", ""))

    @property
    def time(self) -> np.ndarray:
        return self.series[layout.TIME]

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.series[name.strip("/")]
        except KeyError:
            raise KeyError(f"{self.path}: no dataset {name!r}; has {', '.join(sorted(self.series))}") from None

    def __contains__(self, name: str) -> bool:
        return name.strip("/") in self.series


def _attr(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v


def open_file(path: str | os.PathLike) -> h5py.File:
    """Open a fastdyn file read-only (SWMR-aware), raising FileFormatError with one clear line."""
    p = Path(path)
    if not p.exists():
        raise FileFormatError(f"{p}: no such file")
    if p.is_dir():
        raise FileFormatError(f"{p}: is a directory, expected a fastdyn HDF5 file")
    try:
        f = h5py.File(p, "r", libver="latest", swmr=True)
    except OSError:
        try:
            f = h5py.File(p, "r")
        except OSError as e:
            raise FileFormatError(f"{p}: not a readable HDF5 file ({str(e).splitlines()[0]})") from None
    if _attr(f.attrs.get("format", "")) != layout.FORMAT_NAME:
        f.close()
        raise FileFormatError(f"{p}: not a fastdyn file (no format = 'fastdyn' attribute)")
    ver = _attr(f.attrs.get("format_version", -1))
    if ver != layout.FORMAT_VERSION:
        f.close()
        raise FileFormatError(f"{p}: format version {ver} not supported (this fastdyn reads {layout.FORMAT_VERSION})")
    return f


def load(path: str | os.PathLike, series: bool = True) -> Run:
    """Read a fastdyn file: every dataset as a numpy array (truncated to the rows written)."""
    p = Path(path)
    f = open_file(p)
    try:
        attrs = {k: _attr(v) for k, v in f.attrs.items()}
        try:
            config = tomllib.loads(attrs.get("config", ""))
        except tomllib.TOMLDecodeError:
            raise FileFormatError(f"{p}: damaged config attribute") from None
        for k in ("versions", "timings"):
            if isinstance(attrs.get(k), str):
                try:
                    attrs[k] = json.loads(attrs[k])
                except json.JSONDecodeError:
                    pass
        run = Run(p, attrs, config)
        if series:
            n = f[layout.TIME].shape[0] if layout.TIME in f else None

            def visit(name: str, obj: Any) -> None:
                if name.rsplit("/", 1)[-1] in (layout.TIME, "index") and not name.startswith("checkpoint"):
                    return  # dimension scales (and their hard links into series groups) are read below
                if isinstance(obj, h5py.Dataset):
                    data = obj[()]
                    if n is not None and obj.maxshape and obj.maxshape[0] is None:
                        data = data[:n]
                    run.series[name] = np.asarray(data)

            f.visititems(visit)
            for name in (layout.TIME, layout.STEP, "tasks/index"):
                if name in f:
                    data = f[name][()]
                    run.series[name] = np.asarray(data[:n] if name != "tasks/index" and n is not None else data)
        return run
    except (OSError, KeyError, RuntimeError) as e:
        raise FileFormatError(f"{p}: damaged file ({str(e).splitlines()[0]})") from None
    finally:
        f.close()
