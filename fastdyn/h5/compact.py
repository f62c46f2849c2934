"""Rewrite a finished file afresh, without what only a resume needs.

In SWMR-write mode HDF5 never reuses freed file space, and the two checkpoint slots of an ODE run
hold the whole state (four float64 per task: 10^6 tasks are 2 × 32 MB), so a finished quickstart
file was 130 MB for ~0.2 MB of results. :func:`compact` copies every object except the dropped
groups into a new file (same data, dtypes, chunking and checksums; attributes; hard links; the
dimension scales re-attached, since HDF5's object copy would leave them pointing into the old
file) and renames it over the original atomically: a crash leaves the original, complete file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import h5py

from .failstop import open_failstop

#: attributes HDF5's dimension-scale API manages (re-created, not copied)
_DS_ATTRS = {"DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME"}


def _key(obj: Any) -> Any:
    return h5py.h5o.get_info(obj.id).addr


def compact(path: str | os.PathLike, drop: tuple[str, ...] = ()) -> tuple[int, int]:
    """Rewrite ``path`` without the top-level groups ``drop``; returns (bytes before, after)."""
    p = Path(os.path.realpath(path))  # through a symlink: the file it points to
    tmp = p.with_name(f".{p.name}.compact-{os.getpid()}")
    before = p.stat().st_size
    try:
        dst, io = open_failstop(tmp, "w")  # a failed write stops there (fastdyn.h5.failstop)
        try:
            with h5py.File(p, "r") as src:
                _copy(src, dst, drop)
            dst.flush()
        finally:
            dst.close()
            io.sync()
            io.close()
        if io.error is not None:
            raise io.error
        shutil.copymode(p, tmp)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return before, p.stat().st_size


def _copy(src: h5py.File, dst: h5py.File, drop: tuple[str, ...]) -> None:
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    where: dict[Any, str] = {}  # object → its first path in dst (hard links, scales)
    datasets: list[str] = []

    def visit(name: str, link: Any) -> None:
        if name.split("/", 1)[0] in drop:
            return
        obj = src[name]
        key = _key(obj)
        if key in where:  # a hard link to an object already copied
            dst[name] = dst[where[key]]
            return
        where[key] = name
        if isinstance(obj, h5py.Group):
            g = dst.require_group(name)
            for k, v in obj.attrs.items():
                g.attrs[k] = v
            return
        kw: dict[str, Any] = {}
        if obj.chunks is not None and obj.size:
            kw = {"chunks": obj.chunks, "fletcher32": obj.fletcher32, "maxshape": obj.maxshape}
            if obj.compression:
                kw |= {"compression": obj.compression, "compression_opts": obj.compression_opts}
        fill = obj.fillvalue if obj.dtype.kind == "f" else None
        ds = dst.create_dataset(name, data=obj[()], dtype=obj.dtype, fillvalue=fill, **kw)
        for k, v in obj.attrs.items():
            if k not in _DS_ATTRS:
                ds.attrs[k] = v
        datasets.append(name)

    src.visititems_links(visit)  # every link, so hard links are seen as such
    for name in datasets:  # scales first, then attach them where the source had them
        s = src[name]
        if h5py.h5ds.is_scale(s.id):
            label = s.attrs.get("NAME", b"")
            label = label.decode() if isinstance(label, bytes) else str(label)
            dst[name].make_scale("" if label.startswith("This is a netCDF dimension") else label)
    for name in datasets:
        s, d = src[name], dst[name]
        for axis, dim in enumerate(s.dims):
            for scale in dim.values():
                target = where.get(_key(scale))
                if target is not None and target != name:
                    d.dims[axis].attach_scale(dst[target])
            if dim.label:
                d.dims[axis].label = dim.label
