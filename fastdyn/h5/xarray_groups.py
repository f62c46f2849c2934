"""A loaded run (:class:`fastdyn.h5.reader.Run`) as one :class:`xarray.Dataset` per group, each
axis labelled by its dimension scale: what ``Run.to_xarray``, ``RunTable.to_xarray`` and the
``engine="fastdyn"`` backend return. Needs xarray; reads nothing from disk itself."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import xarray as xr


def _parent(name: str) -> str:
    return "/" + name.rsplit("/", 1)[0] if "/" in name else "/"


def _root_attrs(run: Any) -> dict[str, Any]:
    """The file's root attributes as stored (``load`` parses the JSON ones; they go back as text,
    as h5netcdf gives them, so the dataset can be written out again)."""
    return {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in run.attrs.items()}


def _scales(run: Any) -> dict[str, list[str]]:
    """Dimension scales by axis name: the series whose one axis is named after itself."""
    out: dict[str, list[str]] = {}
    for name, dims in run.dims.items():
        if name in run.series and dims == (name.rsplit("/", 1)[-1],):
            out.setdefault(dims[0], []).append(name)
    return out


def _variable(run: Any, name: str) -> xr.Variable:
    return xr.Variable(run.dims[name], run.series[name], attrs=dict(run.meta.get(name, {})))


def _coordinate(
    run: Any, dim: str, size: int, group: str, scales: dict[str, list[str]]
) -> str | None:
    """The scale that labels axis ``dim`` of length ``size`` in ``group``: one in the group
    itself, else the nearest one above it with that length."""
    fits = [s for s in scales.get(dim, []) if run.series[s].shape == (size,)]
    return min(fits, key=lambda s: (_parent(s) != group, len(s)), default=None)


def groups(run: Any, drop_variables: Iterable[str] = ()) -> dict[str, xr.Dataset]:
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
