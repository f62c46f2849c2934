"""xarray backend ``engine="fastdyn"``: a fastdyn file as xarray objects, also while it is written.

xarray's h5netcdf engine reads each series at its own moment and sizes the time axis by the
longest one, padding the others with NaN, so a read that lands between two of a writer's resizes
shows a row of NaN. This engine reads the file through :func:`fastdyn.h5.reader.load`: one
snapshot, every time-indexed series cut to the rows all of them hold, a live file re-read when
it meets a chunk being rewritten. On a closed file it gives what the h5netcdf engine gives
(the same variables, dimension names, coordinates and ``units``/``long_name``), read eagerly.

Registered through the ``xarray.backends`` entry point; xarray loads this module only when
``engine="fastdyn"`` is asked for (it never claims a file by itself)::

    xr.open_dataset(path, engine="fastdyn", group="loss")
    xr.open_datatree(path, engine="fastdyn")
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import xarray as xr
from xarray.backends import BackendEntrypoint

from .reader import Run, load


def _parent(name: str) -> str:
    return "/" + name.rsplit("/", 1)[0] if "/" in name else "/"


def _root_attrs(run: Run) -> dict[str, Any]:
    """The file's root attributes as stored (``load`` parses the JSON ones; they go back as text,
    as h5netcdf gives them, so the dataset can be written out again)."""
    return {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in run.attrs.items()}


def _scales(run: Run) -> dict[str, list[str]]:
    """Dimension scales by axis name: the series whose one axis is named after itself."""
    out: dict[str, list[str]] = {}
    for name, dims in run.dims.items():
        if name in run.series and dims == (name.rsplit("/", 1)[-1],):
            out.setdefault(dims[0], []).append(name)
    return out


def _variable(run: Run, name: str) -> xr.Variable:
    return xr.Variable(run.dims[name], run.series[name], attrs=dict(run.meta.get(name, {})))


def _coordinate(
    run: Run, dim: str, size: int, group: str, scales: dict[str, list[str]]
) -> str | None:
    """The scale that labels axis ``dim`` of length ``size`` in ``group``: one in the group
    itself, else the nearest one above it with that length."""
    fits = [s for s in scales.get(dim, []) if run.series[s].shape == (size,)]
    return min(fits, key=lambda s: (_parent(s) != group, len(s)), default=None)


def groups(run: Run, drop_variables: Iterable[str] = ()) -> dict[str, xr.Dataset]:
    """One :class:`xarray.Dataset` per group of ``run`` (``"/"``, ``"/loss"``, …), each axis
    labelled by its dimension scale where the file has one."""
    drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables)
    scales = _scales(run)
    paths = {"/"}
    for name in run.series:
        parts = name.split("/")[:-1]
        paths.update("/" + "/".join(parts[: k + 1]) for k in range(len(parts)))
    out = {}
    for group in sorted(paths):
        members = [
            n for n in run.series if _parent(n) == group and n.rsplit("/", 1)[-1] not in drop
        ]
        data_vars, coords = {}, {}
        for name in members:
            leaf = name.rsplit("/", 1)[-1]
            (coords if leaf in scales and name in scales[leaf] else data_vars)[leaf] = _variable(
                run, name
            )
        for var in list(data_vars.values()):
            for dim, size in zip(var.dims, var.shape, strict=True):
                if dim in coords or dim in drop:
                    continue
                if src := _coordinate(run, dim, size, group, scales):
                    coords[dim] = _variable(run, src)
        out[group] = xr.Dataset(data_vars, coords, attrs=_root_attrs(run) if group == "/" else {})
    return out


#: xarray's CF decoders: a fastdyn file has no CF encoding (no scale factors, fill values or time
#: units to decode), so they are accepted and change nothing
_DECODERS = ("mask_and_scale", "decode_times", "concat_characters", "decode_coords",
             "use_cftime", "decode_timedelta")  # fmt: skip


def _subtree(found: dict[str, xr.Dataset], group: str | None) -> dict[str, xr.Dataset]:
    """The groups at and below ``group`` (all for None), re-rooted there."""
    key = "/" + (group or "").strip("/")
    if key == "/":
        return found
    out = {
        "/" + p[len(key) :].strip("/"): ds
        for p, ds in found.items()
        if p == key or p.startswith(key + "/")
    }
    if not out:
        raise OSError(f"no group {group!r}; has {', '.join(sorted(found))}")
    return out


class FastdynBackend(BackendEntrypoint):
    """``engine="fastdyn"`` for :func:`xarray.open_dataset` and :func:`xarray.open_datatree`."""

    description = "fastdyn files, also while they are written (whole rows only)"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "group", *_DECODERS)
    supports_groups = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        return False  # only when asked for by name: h5netcdf stays the default for .h5 files

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        **decoders: Any,
    ) -> xr.Dataset:
        key = "/" + (group or "").strip("/")
        found = groups(load(filename_or_obj), drop_variables or ())
        if key not in found:
            raise OSError(f"{filename_or_obj}: no group {group!r}; has {', '.join(sorted(found))}")
        return found[key]

    def open_groups_as_dict(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        **decoders: Any,
    ) -> dict[str, xr.Dataset]:
        return _subtree(groups(load(filename_or_obj), drop_variables or ()), group)

    def open_datatree(  # type: ignore[override]
        self, filename_or_obj: str | os.PathLike, **kwargs: Any
    ) -> xr.DataTree:
        """The groups of :meth:`open_groups_as_dict` (same keywords) as one tree."""
        return xr.DataTree.from_dict(self.open_groups_as_dict(filename_or_obj, **kwargs))


__all__ = ["FastdynBackend", "groups"]
