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

import os
from collections.abc import Iterable
from typing import Any

import xarray as xr
from xarray.backends import BackendEntrypoint

from .reader import load
from .xarray_groups import groups

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
