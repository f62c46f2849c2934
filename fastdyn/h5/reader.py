"""Read fastdyn HDF5 files into numpy arrays (the format of :mod:`fastdyn.h5.layout`)."""

from __future__ import annotations

import functools
import json
import os
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from . import layout, undo
from .libhdf5 import library
from .rollback import RolledBack, open_view
from .verify import CRC_ATTR, read_verified
from .writer import check_identity


class FileFormatError(ValueError):
    """A file that is missing, not HDF5, not a fastdyn file or damaged (one-line message)."""


@dataclass
class Run:
    """One run read from disk: series by path (``"loss/test"``), attributes, the config as a dict;
    ``meta`` the ``units`` and ``long_name`` attributes of each dataset (and its ``crc32``);
    ``dims`` the name of each axis of each dataset (its dimension scale's name, as xarray's
    h5netcdf engine calls it)."""

    path: Path
    attrs: dict[str, Any]
    config: dict[str, Any]
    series: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    dims: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in self.series.items())
        return f"Run({str(self.path)!r}, model={self.model!r}, status={self.status!r}, series: {shapes})"

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
            raise KeyError(
                f"{self.path}: no dataset {name!r}; has {', '.join(sorted(self.series))}"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name.strip("/") in self.series

    def to_xarray(self) -> Any:
        """The run as xarray objects (needs ``pip install 'fastdyn[xarray]'``): an
        ``xarray.Dataset`` when its series sit in one group, else an ``xarray.DataTree`` of every
        group (``tree["loss"]``, ``tree["tasks"]``, …), each axis labelled by its dimension scale
        (``time``, ``task``, …) with the datasets' ``units``/``long_name``; the root attributes
        (``model``, ``config``, ``status``, …) on the Dataset or the tree's root. The same
        objects as ``xr.open_datatree(path, engine="fastdyn")``."""
        from .._extras import require

        xr = require("xarray", "Run.to_xarray()")
        from .xarray_groups import groups

        run = self if self.series else load(self.path)
        found = groups(run)
        with_data = [g for g, ds in found.items() if ds.data_vars]
        if len(with_data) == 1:
            ds = found[with_data[0]]
            return ds.assign_attrs(found["/"].attrs) if with_data[0] != "/" else ds
        return xr.DataTree.from_dict(found)


def _attr(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v


_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _stored_eof(p: Path, view: RolledBack | None = None) -> int | None:
    """End-of-file address recorded in the HDF5 superblock (versions 0-3), or None if unparsable
    (of the file as ``view`` shows it, where one is given).

    HDF5 itself skips its truncation check when a file is opened for SWMR reading, and reading
    a truncated file that way can loop forever inside the library, so fastdyn checks first."""
    size = p.stat().st_size if view is None else view.size
    with p.open("rb") as fh:
        base = 0
        while base + 64 <= size:
            if view is None:
                fh.seek(base)
                head = fh.read(96)
            else:
                head = view.pread(96, base)
            if head[:8] == _SIGNATURE:
                break
            base = 512 if base == 0 else 2 * base
        else:
            return None
    version = head[8]
    if version in (0, 1):
        size_off = head[13]
        at = 24 + (4 if version == 1 else 0)
        fields = 4  # base, free-space, end-of-file, driver info
        eof_index = 2
    elif version in (2, 3):
        size_off = head[9]
        at = 12
        fields = 4  # base, extension, end-of-file, root header
        eof_index = 2
    else:
        return None
    if size_off not in (2, 4, 8) or at + fields * size_off > len(head):
        return None
    off = at + eof_index * size_off
    return base + int.from_bytes(head[off : off + size_off], "little")


def global_heap_damage(p: Path, view: RolledBack | None = None) -> str | None:
    """What is wrong with the first damaged global heap collection of ``p`` (where variable-length
    strings such as the ``config`` attribute live), or None.

    HDF5 walks a collection's objects by their sizes; an object header whose index and size are
    both 0 (a zeroed page inside the collection) never advances that walk, and every reader of
    the file hung at 100 % CPU in ``H5HG__cache_heap_deserialize``. This walks each collection
    (``GCOL`` signature, version 1) the way HDF5 does and reports one that would not end or that
    overruns itself. Costs one scan of the file for the signature (≈ 10 ms per 100 MB cached).
    With ``view``, the file as it shows it (a private map: nothing is written)."""
    import mmap

    size = p.stat().st_size if view is None else view.size
    if size < 16:
        return None
    try:
        if view is not None:
            with view.mapped() as m:
                return _first_bad_collection(m, size)
        with p.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _first_bad_collection(m, size)
    except (OSError, ValueError):  # a file system that cannot map files: HDF5 reads it as it is
        return None


def _first_bad_collection(m: Any, size: int) -> str | None:
    at = m.find(b"GCOL")
    while at >= 0:
        if at + 16 <= size and m[at + 4] == 1:  # a version 1 collection header
            length = int.from_bytes(m[at + 8 : at + 16], "little")
            if 4096 <= length <= size - at:
                why = _walk_collection(m, at, length)
                if why is not None:
                    return f"global heap collection at byte {at}: {why}"
        at = m.find(b"GCOL", at + 4)
    return None


def _walk_collection(m: Any, at: int, length: int) -> str | None:
    """HDF5's walk over one global heap collection (``length`` bytes at ``at``): None when it
    ends where the collection does."""
    p, end = at + 16, at + length
    while p < end:
        if p + 16 > end:  # too small for an object header: trailing free space
            return None
        idx = int.from_bytes(m[p : p + 2], "little")
        obj = int.from_bytes(m[p + 8 : p + 16], "little")
        need = 16 + (-(-obj // 8) * 8) if idx > 0 else obj
        if need <= 0:
            return "an object of size 0 where the free space should be (a zeroed page?)"
        if p + need > end:
            return f"object {idx} of {obj} bytes runs past the collection's end"
        p += need
    return None


#: metadata read attempts of an SWMR reader. A reader retries a metadata entry whose checksum
#: fails, in case a writer is half-way through it, sleeping 1, 2, 4, … ns in between; HDF5's
#: default of 100 attempts sleeps for centuries on an entry that is damaged on disk. 26 attempts
#: sleep at most 2**25 ns ≈ 34 ms in all per entry read, orders of magnitude above a torn write.
SWMR_READ_ATTEMPTS = 26

#: seconds the fallback probe (:func:`_probe`) may take to read a file's metadata
PROBE_SECONDS = 20.0


@functools.cache
def _set_read_attempts() -> Callable[[int, int], int] | None:
    """``H5Pset_metadata_read_attempts`` of the HDF5 library h5py uses, or None if not found.

    h5py does not wrap it, so it is called through ctypes on the copy of libhdf5 already loaded
    in this process (:func:`fastdyn.h5.libhdf5.library`; never a second copy: a property list id
    means nothing to another one)."""
    import ctypes

    lib = library()
    if lib is None:
        return None
    try:
        setter = lib.H5Pset_metadata_read_attempts
    except AttributeError:
        return None
    setter.argtypes, setter.restype = [ctypes.c_int64, ctypes.c_uint], ctypes.c_int
    return setter


_PROBE = """
import sys, h5py
f = h5py.File(sys.argv[1], "r", libver="latest", swmr=True)
def walk(name, obj):
    list(obj.attrs.values())
    if isinstance(obj, h5py.Dataset) and obj.chunks:
        obj.id.get_num_chunks()
list(f.attrs.values())
f.visititems(walk)
"""


def _probe(p: Path) -> None:
    """Read every header, attribute and chunk index of ``p`` as an SWMR reader in a subprocess,
    refusing the file if that fails or takes longer than PROBE_SECONDS (HDF5 retrying damaged
    metadata). The fallback where HDF5's read attempts cannot be set."""
    import subprocess
    import sys

    try:
        res = subprocess.run(
            [sys.executable, "-c", _PROBE, str(p)],
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise FileFormatError(
            f"{p}: damaged file (its metadata could not be read within {PROBE_SECONDS:g} s: HDF5 kept retrying a damaged header)"
        ) from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        raise FileFormatError(f"{p}: damaged file ({last[:200]})")


def _open_swmr(p: Path) -> h5py.File:
    """Open ``p`` for SWMR reading with bounded metadata read retries."""
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    setter = _set_read_attempts()
    if setter is None or setter(fapl.id, SWMR_READ_ATTEMPTS) < 0:
        _probe(p)
    fid = h5py.h5f.open(os.fsencode(p), h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ, fapl=fapl)
    return h5py.File(fid)


def open_file(path: str | os.PathLike) -> h5py.File:
    """Open a fastdyn file read-only (SWMR-aware), raising FileFormatError with one clear line.
    A file whose close was cut off half-way is shown as of its last flush, through its undo
    journal (:mod:`fastdyn.h5.rollback`); nothing is written, locked or deleted."""
    p = Path(path)
    if not p.exists():
        raise FileFormatError(f"{p}: no such file")
    if p.is_dir():
        raise FileFormatError(f"{p}: is a directory, expected a fastdyn HDF5 file")
    if not p.is_file():  # a FIFO would block the first read forever
        raise FileFormatError(
            f"{p}: not a regular file (a FIFO, socket or device), expected a fastdyn HDF5 file"
        )
    try:
        view, found = open_view(p)  # a close cut off half-way: the file as of its last flush
    except OSError as e:
        raise FileFormatError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        return _open_checked(p, view)
    except FileFormatError as e:
        if view is not None:
            view.close()
        note = _journal_note(p, found) if view is None else ""
        if note and ("damaged" in str(e) or "not a readable" in str(e)):
            raise FileFormatError(f"{e}; {note}") from None
        raise


def _journal_note(p: Path, found: undo.Found) -> str:
    """What the undo journal adds to the message of a damaged file: the copies that could not
    be used, or where the journal was expected when there is none (a killed writer's file, or
    one whose root is damaged: what a close cut off half-way leaves)."""
    if found.problems:
        return (
            "its last close may have been cut off half-way, and no copy of its undo journal can take it back: "
            + "; ".join(found.problems)
        )
    if found.inside_at is not None or os.path.lexists(undo.journal_path(p)):
        return ""
    from .write_state import open_flags_set

    try:
        killed = open_flags_set(p)
    except OSError:
        killed = False
    if not killed:
        return ""
    return (
        f"if its last close was cut off half-way, its undo journal is missing: it was expected "
        f"at {undo.journal_path(p)} (copy it there from where the file came from)"
    )


def _open_checked(p: Path, view: RolledBack | None) -> h5py.File:
    """:func:`open_file` once the journal is looked at: ``view`` the file as of its last flush,
    or None to read the file itself."""
    try:
        eof = _stored_eof(p, view)
    except OSError as e:
        raise FileFormatError(f"{p}: cannot read ({e.strerror or e})") from None
    size = p.stat().st_size if view is None else view.size
    if size == 0:
        raise FileFormatError(f"{p}: not a readable HDF5 file (empty file)")
    if eof is None:
        raise FileFormatError(
            f"{p}: not a readable HDF5 file (no HDF5 superblock: not HDF5, or its start is damaged)"
        )
    if size < eof:
        raise FileFormatError(
            f"{p}: not a readable HDF5 file (truncated: {size} of {eof} bytes; an interrupted copy or a full disk)"
        )
    heap = global_heap_damage(p, view)
    if heap is not None:
        raise FileFormatError(f"{p}: damaged file ({heap})")
    # A plain read-only open first: it fails fast on a damaged file. Only a file whose writer is
    # still running or was killed (SWMR consistency flags set) is opened for SWMR reading, with
    # HDF5's metadata read retries bounded (see SWMR_READ_ATTEMPTS). The view of a file cut off
    # in its close is opened through h5py's file-object driver (no SWMR there, nor needed: the
    # view holds still).
    try:
        f = h5py.File(p if view is None else view, "r")
    except Exception as e:  # noqa: BLE001 — h5py raises OSError, but damaged files can give others
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        f = None
        if view is None and (
            "already open for write" in why or "consistency flags" in why or "lock" in why
        ):
            try:
                f = _open_swmr(p)
            except FileFormatError:
                raise
            except Exception as e2:  # noqa: BLE001
                why = str(e2).splitlines()[0] if str(e2) else type(e2).__name__
        if f is None:
            if "truncated" in why or "signature" in why or "EOF" in why:
                why += "; the file is truncated or not HDF5"
            raise FileFormatError(f"{p}: not a readable HDF5 file ({why})") from None
    try:
        names = set(f.attrs)  # walks the attribute storage: a damaged heap or B-tree fails here
        fmt = _attr(f.attrs["format"]) if "format" in names else ""
        ver = _attr(f.attrs["format_version"]) if "format_version" in names else -1
    except Exception as e:  # noqa: BLE001 — a damaged root object header
        f.close()
        raise FileFormatError(
            f"{p}: damaged file (root attributes unreadable: {str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    if fmt != layout.FORMAT_NAME:
        f.close()
        raise FileFormatError(f"{p}: not a fastdyn file (no format = 'fastdyn' attribute)")
    if ver != layout.FORMAT_VERSION:
        f.close()
        raise FileFormatError(
            f"{p}: format version {ver} not supported (this fastdyn reads {layout.FORMAT_VERSION})"
        )
    return f


def _describe(run: Run, name: str, ds: h5py.Dataset) -> None:
    run.meta[name] = {k: str(_attr(ds.attrs[k])) for k in ("units", "long_name") if k in ds.attrs}
    if CRC_ATTR in ds.attrs:  # as stored (a uint32), as xarray's h5netcdf engine shows it
        run.meta[name][CRC_ATTR] = ds.attrs[CRC_ATTR]


def _is_scale(ds: h5py.Dataset) -> bool:
    return _attr(ds.attrs.get("CLASS", b"")) == "DIMENSION_SCALE"


def _name_dims(run: Run, datasets: dict[str, h5py.Dataset]) -> None:
    """``run.dims``: the name of each axis of each dataset read, the leaf name of the dimension
    scale attached to it (as xarray's h5netcdf engine names it; a scale is its own axis),
    ``phony_dim_K`` where none is. Scales are matched by object, not by the path HDF5 reports
    for a dereferenced scale, which an SWMR reader of a running file may not get."""
    leaf = {ds: name.rsplit("/", 1)[-1] for name, ds in datasets.items() if _is_scale(ds)}
    for name, ds in datasets.items():
        if ds in leaf:
            run.dims[name] = (leaf[ds],)
            continue
        names = []
        for k, scales in enumerate(ds.dims):
            found = leaf.get(scales[0]) if len(scales) else None
            if found is None and len(scales):
                found = (scales[0].name or "").rsplit("/", 1)[-1] or None
            names.append(found or f"phony_dim_{k}")
        run.dims[name] = tuple(names)


def _common_rows(run: Run, names: list[str]) -> None:
    """Cut the time-indexed series ``names`` to the rows every one of them holds. They are equal
    in any finished file; a run killed inside an append's flush (status ``running``) can leave
    one series' new extent on disk and not another's (one CI run: time 78 rows, loss/test 76),
    and a row is only whole where every series has it."""
    if not names:
        return
    n = min(run.series[k].shape[0] for k in names)
    for k in names:
        run.series[k] = run.series[k][:n]


#: re-reads of a file whose writer is alive, after a read failed (the reader met a chunk or the
#: end of the file while the writer rewrote or extended it; each write ends within milliseconds,
#: but on a loaded machine a fast writer can meet a reader again: 12 tries over ≈ 2 s)
LIVE_RETRIES = 12
#: the longest pause between two of those re-reads, s
LIVE_PAUSE_MAX = 0.25


def load(path: str | os.PathLike, series: bool = True) -> Run:
    """Read a fastdyn file: every dataset as a numpy array (truncated to the rows written). A
    file that a live process is writing is read again (after 10, 20, 40, … ms, at most 0.25 s apart) when a read fails,
    since the reader may have met the last chunk half-rewritten; any other file fails at once."""
    p = Path(path)
    for attempt in range(LIVE_RETRIES + 1):
        try:
            return _load(p, series)
        except FileFormatError:
            if attempt == LIVE_RETRIES or not _written_now(p):
                raise
        time.sleep(min(0.01 * 2**attempt, LIVE_PAUSE_MAX))
    raise AssertionError("unreachable")


def _written_now(p: Path) -> bool:
    """Whether a live writer holds ``p`` (its superblock says open for write and its lock is
    held); never for anything but a regular file (opening a FIFO blocks)."""
    from .write_state import open_flags_set, writer_alive

    try:
        return p.is_file() and open_flags_set(p) and writer_alive(p) is not None
    except OSError:
        return False


def _load(p: Path, series: bool) -> Run:
    f = open_file(p)
    try:
        attrs = {k: _attr(v) for k, v in f.attrs.items()}
        try:
            check_identity(attrs, p)  # a flipped bit in the stored config or seed
        except ValueError as e:
            raise FileFormatError(str(e)) from None
        try:
            config = tomllib.loads(attrs.get("config", ""))
        except (tomllib.TOMLDecodeError, RecursionError):
            raise FileFormatError(f"{p}: damaged config attribute") from None
        for k in ("versions", "timings"):
            if isinstance(attrs.get(k), str):
                try:
                    attrs[k] = json.loads(attrs[k])
                except json.JSONDecodeError:
                    pass
        run = Run(p, attrs, config)
        if series:
            along_time: list[str] = []  # the series that grow by one row per output time
            datasets: dict[str, h5py.Dataset] = {}

            def visit(name: str, obj: Any) -> None:
                if name.startswith("checkpoint"):
                    return  # the resume state (fastdyn.h5.writer.read_checkpoint reads it)
                if name.rsplit("/", 1)[-1] in (layout.TIME, "index"):
                    return  # dimension scales (and their hard links into series groups) are read below
                if isinstance(obj, h5py.Dataset):
                    # a torn last chunk of a killed file: its flushed rows, verified
                    run.series[name] = np.asarray(read_verified(obj))
                    if obj.maxshape and obj.maxshape[0] is None:
                        along_time.append(name)
                    _describe(run, name, obj)
                    datasets[name] = obj

            f.visititems(visit)
            for name in (layout.TIME, layout.STEP, "tasks/index"):
                if name in f:
                    _describe(run, name, f[name])
                    datasets[name] = f[name]
                    run.series[name] = np.asarray(read_verified(f[name]))
                    if name != "tasks/index":
                        along_time.append(name)
            _common_rows(run, along_time)
            _name_dims(run, datasets)
        return run
    except FileFormatError:
        raise
    except Exception as e:  # noqa: BLE001 — whatever h5py raises on a damaged file, one line
        raise FileFormatError(
            f"{p}: damaged file ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    finally:
        f.close()
