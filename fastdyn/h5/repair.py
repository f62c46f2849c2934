"""⑤ What state a file is in, and how to read it; turning a killed file into a plain one.

A file whose writer is running, or was killed, still carries HDF5's "open for SWMR write" flags:
plain readers refuse it (``file is already open for write``); SWMR readers open it up to its last
flush. :func:`repair` (``fastdyn repair FILE``) clears those flags of a killed file and closes it
with ``status = "interrupted: …"``, keeping every flushed row and the checkpoint, so any reader
opens it and ``fastdyn simulate --resume`` still continues it bit-identically.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py

from . import layout, undo
from .compact import compact
from .lock import WriterBusy, WriterLock
from .torn import repair_torn
from .write_state import open_flags_set, writer_alive
from .writer import clear_open_flags, read_checkpoint

#: how to open a running or killed file, for messages and docs
SWMR_H5PY = 'h5py.File(path, "r", libver="latest", swmr=True)'
SWMR_XARRAY = 'xr.open_dataset(path, engine="h5netcdf", group="loss", driver_kwds={"swmr": True, "libver": "latest"})'


def run_state(path: str | os.PathLike, status: str) -> tuple[str, str | None]:
    """``(state, writer)``: ``("running", "pid N on HOST")`` while a live process writes the
    file; ``("killed", None)`` when none does yet the run never closed it (its status is still
    ``running``, or its open-for-write flags are set); else ``("closed", None)``. The one
    decision ``fastdyn inspect``, ``fit`` and ``plot`` share."""
    who = writer_alive(path)
    if who is not None:
        return "running", who
    if status == layout.STATUS_RUNNING or open_flags_set(path):
        return "killed", None
    return "closed", None


def killed_line(status: str) -> str:
    """How a killed file is described, the same words wherever fastdyn meets one."""
    return f"killed (status still {status!r}, no live writer)"


def state(path: str | os.PathLike, status: str) -> str:
    """One line: the file's state (:func:`run_state`) and how to read it."""
    kind, who = run_state(path, status)
    how = f"SWMR readers only: {SWMR_H5PY}, or xarray with driver_kwds={{'swmr': True, 'libver': 'latest'}}"
    if kind == "running":
        return f"being written by {who}; {how}"
    if kind == "closed":
        return "closed: any HDF5 reader opens it (h5py, xarray engine='h5netcdf')"
    if not open_flags_set(path):  # status 'running' in a closed file: any reader opens it
        return f"{killed_line(status)}; any HDF5 reader opens it; `fastdyn simulate --resume {path}` continues it"
    return f"{killed_line(status)}; {how}; `fastdyn repair {path}` makes it a plain file, `fastdyn simulate --resume {path}` continues it"


def _first_line(e: BaseException) -> str:
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)  # KeyError quotes
    return text.splitlines()[0] if text else type(e).__name__


def damaged_object(f: h5py.Group) -> str | None:
    """``"/loss/test: why"`` for the first object of ``f`` whose metadata does not read (its
    object header, attributes, links or, for a chunked dataset, its chunk index), else None.
    Walks the hard links itself, so the damaged object is named (HDF5's own visit only says
    that it failed)."""
    try:
        list(f.attrs.values())
        names = list(f.keys())
    except Exception as e:  # noqa: BLE001 — h5py raises OSError, RuntimeError, KeyError on damage
        return f"{f.name}: {_first_line(e)}"
    for name in names:
        where = f"{f.name.rstrip('/')}/{name}"
        try:
            if not isinstance(f.get(name, getlink=True), h5py.HardLink):
                continue
            obj = f[name]
            list(obj.attrs.values())
            if isinstance(obj, h5py.Dataset) and obj.chunks:
                obj.id.get_num_chunks()
        except Exception as e:  # noqa: BLE001 — as above
            return f"{where}: {_first_line(e)}"
        if isinstance(obj, h5py.Group):
            bad = damaged_object(obj)
            if bad is not None:
                return bad
    return None


def _check_metadata(p: Path) -> None:
    """FileFormatError naming the damaged object when the killed file's metadata does not read
    (a bit flip, a lost block): found before repair changes a byte of it."""
    from .reader import FileFormatError, _open_swmr

    try:
        f = _open_swmr(p)
    except FileFormatError:
        raise
    except Exception as e:  # noqa: BLE001 — as in damaged_object
        raise FileFormatError(
            f"{p}: damaged file ({_first_line(e)}); cannot repair it, nothing was changed"
        ) from None
    with f:
        bad = damaged_object(f)
    if bad is not None:
        raise FileFormatError(
            f"{p}: damaged file (metadata of {bad}); cannot repair it, nothing was changed"
        )


class NothingToRepair(Exception):
    """The file is closed already (message: one line)."""


def repair(path: str | os.PathLike) -> str:
    """Close a killed file for every reader: clear its open flags and set ``status`` to
    ``interrupted: …``; returns the new status. Raises :class:`WriterBusy` while a live process
    writes it, :class:`NothingToRepair` for a closed file."""
    p = Path(path)
    with WriterLock(p):
        undo.recover(p)  # a close cut off half-way: first the file as of its last flush
        if not open_flags_set(p):
            _forget_unused_journal(p)
            raise NothingToRepair(
                f"{p}: nothing to repair (the file is closed; any reader opens it)"
            )
        _check_metadata(p)
        clear_open_flags(p)
        try:
            status = _close_for_readers(p)
        except (OSError, RuntimeError, KeyError) as e:  # damage the walk could not see (raw data)
            from .reader import FileFormatError

            raise FileFormatError(
                f"{p}: damaged file ({_first_line(e)}); its open-for-write flags are cleared, the rest is as it was"
            ) from None
    return status


def _close_for_readers(p: Path) -> str:
    """The repair itself: the torn last chunk, the status, under the caller's lock."""
    with h5py.File(p, "r+", libver="latest") as f:
        repair_torn(f)  # a last chunk the kill tore (fastdyn.h5.torn), verified
        old = f.attrs.get("status", "")
        old = old.decode() if isinstance(old, bytes) else str(old)
        rows = f[layout.TIME].shape[0]
        ck = read_checkpoint(f) if "checkpoint" in f else None
        after = (
            "no checkpoint: --resume starts over"
            if ck is None
            else f"--resume continues from the checkpoint after row {ck[1]}"
        )
        if old.startswith(layout.STATUS_RUNNING):
            status = f"interrupted: the writing process was killed; {rows} rows kept, {after}; continue with fastdyn simulate --resume {p}"
        else:
            status = old  # killed while closing: its final status was already written
        if status != old:  # (a file killed inside its close keeps its status: no rewrite)
            f.attrs["status"] = status
        f.flush()
    _forget_unused_journal(p)
    return status


def _forget_unused_journal(p: Path) -> None:
    """Once the file read whole: delete a journal copy beside it that could not be used (a
    damaged one, or a node that is none); a reader never does."""
    try:
        undo.forget_beside(p)
    except OSError:
        pass


def finish_close(path: str | os.PathLike, keep_checkpoint: bool = False) -> bool:
    """A file killed inside its close after its status became ``complete`` (its open flags still
    set, no live writer): finish what the close would have done, clearing the flags and dropping
    the resume state unless ``keep_checkpoint``; True when it did. Sweeps call it on their
    complete points, which they otherwise leave alone."""
    p = Path(path)
    try:
        if not open_flags_set(p) or writer_alive(p) is not None:
            return False
        repair(p)  # keeps the status (already complete)
        if not keep_checkpoint:
            with WriterLock(p):
                compact(p, drop=("checkpoint",))
    except (WriterBusy, NothingToRepair, OSError, RuntimeError, ValueError):
        return False  # ValueError: FileFormatError, a damaged file
    return True
