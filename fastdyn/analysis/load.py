"""⑥ Many runs at once: a table of runs (config values as columns) and their series.

``load_many`` accepts a list of paths, one path, a glob pattern (``"runs/*.h5"``), or a sweep index
file. Sweep index hook: a path whose name ends in ``.index.json`` is handed to
``fastdyn.sweep.read_index(path) -> list[path]`` when that function exists (the sweep stage owns its
index format); until then such a file is rejected with one line. No pandas dependency: the table is
a dict of columns (``RunTable.table``) or a list of row dicts (``RunTable.rows``); ``to_pandas()``
builds a DataFrame when pandas is installed.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..h5.reader import FileFormatError, Run, global_heap_damage, load
from ..models._spec import stored_number, stored_value

__all__ = ["RunTable", "flatten_config", "load_many", "config_value", "expand_paths"]

_GLOB_CHARS = set("*?[")


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config dict → flat ``{"task.alpha": 2.0, ...}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_config(v, key + "."))
        else:
            out[key] = v
    return out


def _scalar(value: Any) -> Any:
    """A table cell: lists (``output.track``) as text, so every column is one value per run."""
    return str(value) if isinstance(value, list | tuple | dict) else value


def config_value(run: Run, key: str, default: Any = None) -> Any:
    """A dotted config value of ``run`` (``"task.alpha"``), or ``default`` when absent."""
    return stored_value(run, key, default)


def _row(run: Run) -> dict[str, Any]:
    row: dict[str, Any] = {"path": str(run.path), "status": run.status, "model": run.model}
    if "seed" in run.attrs:
        row["seed"] = run.attrs["seed"]
    row.update(flatten_config(run.config))
    return row


@dataclass
class RunTable:
    """Runs and one row per run: ``path``, ``status``, ``model``, ``seed`` and flattened config."""

    runs: list[Run]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.rows:
            self.rows = [_row(r) for r in self.runs]

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    @property
    def columns(self) -> list[str]:
        """Every column name, in first-seen order."""
        cols: dict[str, None] = {}
        for r in self.rows:
            cols.update(dict.fromkeys(r))
        return list(cols)

    @property
    def table(self) -> dict[str, list[Any]]:
        """Column name → list of values (None where a run lacks the key)."""
        return {c: [r.get(c) for r in self.rows] for c in self.columns}

    def column(self, name: str) -> list[Any]:
        """One column; KeyError naming the available columns if no run has it."""
        if not any(name in r for r in self.rows):
            raise KeyError(f"no column {name!r}; columns: {', '.join(self.columns)}")
        return [r.get(name) for r in self.rows]

    def where(self, **equal: Any) -> RunTable:
        """Runs whose columns equal the given values (dots as ``__``: ``task__alpha=2.0``)."""
        want = {k.replace("__", "."): v for k, v in equal.items()}
        keep = [i for i, r in enumerate(self.rows) if all(r.get(k) == v for k, v in want.items())]
        return RunTable([self.runs[i] for i in keep], [self.rows[i] for i in keep])

    def to_pandas(self, series: str | None = None) -> Any:
        """A pandas DataFrame (needs ``pip install 'fastdyn[xarray]'``): one row per run (path,
        status, model, seed, every config value); with ``series`` (``"loss/test"``) the sweep's
        curves in long form, one row per run and time: those columns, ``time`` and the series."""
        from .._extras import require

        pd = require("pandas", "RunTable.to_pandas()")
        if series is None:
            return pd.DataFrame(self.rows, columns=self.columns)
        frames = []
        for run, row in zip(self.runs, self.rows, strict=True):
            y = run[series]
            if y.ndim != 1:
                raise ValueError(f"{series}: has shape {y.shape}; to_pandas takes a series (time,)")
            frame = pd.DataFrame({"time": run.time[: y.size], series: y})
            frames.append(frame.assign(**{c: _scalar(row.get(c)) for c in self.columns}))
        return pd.concat(frames, ignore_index=True)[[*self.columns, "time", series]]

    def to_xarray(self, group: str = "loss") -> Any:
        """The runs' ``group`` (``"loss"``, ``"theory/loss"``, ``"tasks"``, …) as one
        ``xarray.Dataset`` with a ``run`` dimension (needs ``pip install 'fastdyn[xarray]'``):
        each variable ``(run, time, …)``, and ``path``, ``model``, ``status``, ``seed`` and every
        scalar config value as ``run`` coordinates (``ds.sel(run=ds["task.alpha"] == 2)``). Runs on
        different time grids are aligned on the union of their times, NaN where a run has none."""
        from .._extras import require

        xr = require("xarray", "RunTable.to_xarray()")
        from ..h5.xarray_groups import groups

        key = "/" + group.strip("/")
        parts = []
        for i, run in enumerate(self.runs):
            found = groups(run)
            if key not in found:
                raise KeyError(f"{run.path}: no group {group!r}; has {', '.join(sorted(found))}")
            parts.append(found[key].expand_dims(run=[i]))
        ds = xr.concat(parts, dim="run", join="outer", combine_attrs="drop")
        coords = {}
        for c in self.columns:
            values = [_scalar(r.get(c)) for r in self.rows]
            if all(v is None or isinstance(v, bool | int | float | str) for v in values):
                coords[c] = ("run", values)
        return ds.assign_coords(coords)


def expand_paths(paths_or_index: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Run files named by paths, globs and sweep indexes, in the order given."""
    if isinstance(paths_or_index, str | os.PathLike):
        items: list[str | os.PathLike] = [paths_or_index]
    else:
        items = list(paths_or_index)
    out: list[Path] = []
    for item in items:
        s = os.fspath(item)
        if _GLOB_CHARS & set(s) and not Path(s).exists():
            hits = sorted(glob.glob(s))
            if not hits:
                raise FileFormatError(f"{s}: no files match this pattern")
            out.extend(Path(h) for h in hits)
        elif _is_index(Path(s)):
            out.extend(_read_index(Path(s)))
        else:
            out.append(Path(s))
    if not out:
        raise FileFormatError("load_many: no files given")
    return out


def _is_index(path: Path) -> bool:
    """A sweep index: a sweep output folder holding ``index.h5``, or an HDF5 file whose root
    attribute ``format`` is ``fastdyn-sweep`` (docs/sweeps.md)."""
    if path.is_dir():
        return (path / "index.h5").is_file()
    if not path.is_file():
        return False
    import h5py

    try:
        if global_heap_damage(path) is not None:  # reading its attributes would hang HDF5
            return False
        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("format", "")
    except Exception:  # noqa: BLE001 — not HDF5 or damaged: load() gives the one-line error
        return False
    return (fmt.decode() if isinstance(fmt, bytes) else str(fmt)) == "fastdyn-sweep"


def _read_index(path: Path) -> list[Path]:
    """The complete points of a sweep index (a warning names the points left out)."""
    import warnings

    from ..h5.sweep_index import COMPLETE, read

    index = path / "index.h5" if path.is_dir() else path
    table = read(index)
    base = index.parent
    done = [
        base / rel for rel, st in zip(table["path"], table["status"], strict=True) if st == COMPLETE
    ]
    left = [n for n, st in zip(table["name"], table["status"], strict=True) if st != COMPLETE]
    if left:
        warnings.warn(
            f"{index}: {len(left)} of {len(table['status'])} sweep points are not complete and are left out ({', '.join(left[:5])}{', …' if len(left) > 5 else ''})",
            stacklevel=3,
        )
    if not done:
        raise FileFormatError(f"{index}: no complete sweep points to load")
    return done


def load_many(
    paths_or_index: str | os.PathLike | Iterable[str | os.PathLike], *, series: bool = True
) -> RunTable:
    """Load several fastdyn files into a :class:`RunTable`: paths, globs, or sweep indexes
    (``index.h5`` or its folder; only its complete points are loaded, the others named in a
    warning).

    Raises FileFormatError (one line naming the file) for a missing or damaged file.
    """
    return RunTable([load(p, series=series) for p in expand_paths(paths_or_index)])


def resolved_number(value: Any) -> float:
    """A config number that may be the text "inf" → float (NaN if not a number)."""
    return stored_number(value)
