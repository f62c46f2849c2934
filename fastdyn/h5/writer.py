"""Streaming HDF5 writer: create every dataset, switch on SWMR, append rows, checkpoint, finish.

Discipline (docs/reliability.md has the why):

1. Every dataset — the series, the static arrays and two checkpoint *slots* — is created and its
   storage allocated while the file is still under a temporary name ``.<name>.tmp-<pid>`` next to
   the output; the file is then flushed, put in SWMR-write mode (``libver="latest"``) and renamed
   to the name the user gave. So the user's path either does not exist or is an SWMR file.
2. While running, only raw data is written: rows are appended along axis 0 of every time series
   (extend + write, :mod:`fastdyn.h5.rows`) and flushed after each append, so every appended
   row is on the disk when ``append`` returns. Series are stored in chunks of at most 8 KiB
   (each flush rewrites the last chunk of every series whole) and uncompressed
   (fletcher32 checksums only): SWMR never reuses freed space, so a rewritten compressed chunk
   would leave its old copy behind on every append. In SWMR mode HDF5 orders its metadata
   writes so that a reader, or the file left by a killed process, sees a consistent file holding
   everything up to the last flush.
3. A checkpoint writes the *other* slot (arrays, then its ``meta`` = [sequence, rows, crc32]),
   flushes, and only then points ``/checkpoint/current`` at it and flushes again. A crash during a
   checkpoint leaves ``current`` on the previous, intact slot; a slot whose crc32 does not match is
   never used.
4. Finishing writes ``status``, ``timings`` and end-of-run datasets, flushes and closes.

A killed writer leaves the superblock's "open for SWMR write" flags set: h5py opens such a file
with ``swmr=True`` (the reader does); :func:`clear_open_flags` (what ``h5clear --status`` does)
is run by ``--resume`` before it reopens the file for writing.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time as _time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .._version import __version__
from . import layout, undo
from .compact import compact
from .failstop import ignore_sigxfsz, open_failstop
from .lock import WriterLock, inode_key, refuse_non_regular
from .provenance import versions
from .rows import Appender
from .superblock import clear_open_flags, lookup3  # noqa: F401  (re-exported)
from .torn import repair_torn
from .verify import create_checked

CHECKPOINT = "checkpoint"

#: errors that mean "no room": a full disk, an exceeded quota, a file-size limit
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

#: bytes kept free on the output's file system beyond what the next write allocates: the metadata
#: of a flush and of a clean close (HDF5 writes a few KiB for these; 4 MiB leaves a wide margin).
#: Running out of space inside an HDF5 flush leaves a file that no longer opens, so the writer
#: stops before that (``DiskFull``) and closes the file as of its last flush.
RESERVE = 4 << 20

#: bytes of a streamed series' chunk, at most (a row wider than this is a chunk of its own; the
#: row axes /time and /step hold 1024 rows, 8 KiB). Every flush rewrites the last chunk of each
#: series whole, Fletcher32 included: one save of eight series (bench/h5_append.py) wrote
#: 264 KiB with chunks of up to 2 MiB (a 4 × 4 matrix series: 1024 rows × 16), 64 KiB with these.
CHUNK_BYTES = 8 << 10


class DiskFull(OSError):
    """Too little space (or quota, or file-size limit) for the next write, found before writing
    anything: the file is closed as of its last flush."""

    def __init__(self, path: Path, needed: int, free: int | None = None, code: int = errno.ENOSPC):
        have = "" if free is None else f", {free / 2**20:.1f} MiB free"
        why = f"{os.strerror(code)} (the next write needs {needed / 2**20:.1f} MiB with the {RESERVE >> 20} MiB reserve{have})"
        super().__init__(code, why, str(path))


class WriteFailed(OSError):
    """A write to the file failed part-way (ENOSPC, EDQUOT, EFBIG, EIO, …): nothing after it
    reached the disk (:mod:`fastdyn.h5.failstop`), so the file is as a process killed at that
    moment leaves it, every row up to the last flush kept."""


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path.parent if str(path.parent) else Path(".")).free
    except OSError:  # cannot tell: let the write itself report
        return 1 << 62


def _write_failed(path: Path, e: BaseException) -> WriteFailed:
    if isinstance(e, OSError) and e.errno:
        return WriteFailed(e.errno, os.strerror(e.errno), str(path))
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    code = errno.ENOSPC if ("No space left" in text or "errno = 28" in text) else errno.EIO
    return WriteFailed(code, os.strerror(code) if code == errno.ENOSPC else text, str(path))


def _not_written(e: OSError) -> OSError:
    """``e``, marked as raised before the output was created or replaced (see write_error)."""
    e.nothing_written = True
    return e


_fsync_dir = undo.fsync_dir


def _link_scale(f: h5py.File, series: str, scale: str) -> None:
    """Hard-link dimension scale ``scale`` into the group of ``series`` under its base name, so that
    netCDF readers (xarray + h5netcdf) opening that group see it as the coordinate."""
    group = series.rsplit("/", 1)[0] if "/" in series else ""
    base = scale.rsplit("/", 1)[-1]
    target = f"{group}/{base}" if group else base
    if group and target != scale and target not in f:
        f[target] = f[scale]


#: root attributes that a resume depends on, covered by the ``identity_crc32`` root attribute
IDENTITY = ("model", "config", "seed", "versions")


def identity_crc(attrs: Any) -> int:
    """crc32 of the root attributes :data:`IDENTITY` (as stored), in that order."""
    c = 0
    for k in IDENTITY:
        v = attrs.get(k, "")
        v = v.decode() if isinstance(v, bytes) else str(v)
        c = zlib.crc32(f"{k}={v}\n".encode(), c)
    return c


def check_identity(attrs: Any, path: Any) -> None:
    """ValueError (one line) when the stored ``identity_crc32`` does not match the root attributes
    it covers (a flipped bit in the stored config or seed), or is missing from a file whose
    ``checksums`` attribute says it carries one; files older than both are not checked."""
    listed = attrs.get("checksums", "")
    listed = listed.decode() if isinstance(listed, bytes) else str(listed)
    if "identity_crc32" not in attrs and "identity_crc32" in listed.split():
        raise ValueError(
            f"{path}: the root attribute identity_crc32 is missing, though the file carries one (attribute checksums); its model, config, seed and versions cannot be checked"
        )
    if "identity_crc32" in attrs and int(attrs["identity_crc32"]) != identity_crc(attrs):
        raise ValueError(
            f"{path}: damaged root attributes (model, config, seed or versions do not match their checksum identity_crc32)"
        )


def _crc(arrays: dict[str, np.ndarray], seq: int | None = None, rows: int | None = None) -> int:
    """crc32 of a checkpoint slot: its sequence number and row count (None: the legacy crc, of
    the arrays alone, which a flipped bit in the row count got past) and its arrays."""
    c = 0 if seq is None else zlib.crc32(f"seq={seq} rows={rows}\n".encode())
    for k in sorted(arrays):
        c = zlib.crc32(k.encode(), c)
        c = zlib.crc32(
            np.ascontiguousarray(arrays[k]), c
        )  # the buffer itself: no copy of the state
    return c


class CheckpointError(ValueError):
    """A checkpoint that is missing or damaged (one-line message)."""


def read_checkpoint(f: h5py.File) -> tuple[dict[str, np.ndarray], int, int] | None:
    """(arrays, rows, sequence) of the newest valid checkpoint of an open file, or None when no
    checkpoint was ever completed. A slot is valid when its crc32 matches; ``current`` names the
    newest, the other slot is the fallback."""
    if CHECKPOINT not in f or "current" not in f[CHECKPOINT]:
        return None
    g = f[CHECKPOINT]
    cur = np.asarray(g["current"][()], dtype=np.int64)
    order = [int(cur[0]), 1 - int(cur[0])] if cur[0] in (0, 1) else [0, 1]
    best = None
    for slot in order:
        s = g.get(f"slot{slot}")
        if s is None or "meta" not in s:
            continue
        meta = np.asarray(s["meta"][()], dtype=np.int64)
        seq, rows, crc = int(meta[0]), int(meta[1]), int(meta[2])
        if seq <= 0:
            continue
        arrays = {k: np.asarray(v[()]) for k, v in s.items() if k != "meta"}
        if crc not in (_crc(arrays, seq, rows), _crc(arrays)):  # the legacy crc: older files
            continue
        if best is None or seq > best[2]:
            best = (arrays, rows, seq)
    return best


def checkpoint_damage(f: h5py.File) -> str | None:
    """What is wrong with the checkpoint ``current`` names (a damaged file: a crash during a
    checkpoint never leaves it bad, see :meth:`RunWriter.checkpoint`), or None when it is sound."""
    if CHECKPOINT not in f or "current" not in f[CHECKPOINT]:
        return None
    g = f[CHECKPOINT]
    slot, seq = (int(v) for v in np.asarray(g["current"][()], dtype=np.int64)[:2])
    if slot == -1 and seq == 0:
        return None  # none taken yet
    if slot not in (0, 1) or f"slot{slot}" not in g or "meta" not in g[f"slot{slot}"]:
        return f"/{CHECKPOINT}/current = [{slot}, {seq}] names no slot"
    s = g[f"slot{slot}"]
    meta = np.asarray(s["meta"][()], dtype=np.int64)
    arrays = {k: np.asarray(v[()]) for k, v in s.items() if k != "meta"}
    if int(meta[0]) != seq or int(meta[2]) not in (
        _crc(arrays, int(meta[0]), int(meta[1])),
        _crc(arrays),
    ):
        got = read_checkpoint(f)
        then = (
            f"--resume would continue from checkpoint #{got[2]}"
            if got
            else "--resume would start over"
        )
        return f"the newest checkpoint (#{seq}, slot {slot}) does not match its crc32; {then}"
    return None


class RunWriter:
    """One output file. Series are declared up front: ``{path: trailing_shape}``; ``checkpoint``
    declares the resume state ``{name: (shape, dtype)}`` (two slots are allocated up front);
    ``time_units`` / ``time_long_name`` replace ``/time``'s default attributes (another time
    convention, stated in the file). ``dims`` names the axes of datasets (the axes after the row
    axis of a series, every axis of a static dataset; None leaves an axis to its index scale) and
    ``axes`` describes each name (its ``long_name``): see :func:`_attach_named`. ``descriptions``
    gives datasets their ``(units, long_name)`` beyond :data:`fastdyn.h5.layout.DESCRIPTIONS`."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        model: str,
        config_toml: str,
        seed: int,
        series: dict[str, tuple[int, ...]],
        static: dict[str, np.ndarray] | None = None,
        scales: dict[str, tuple[str, int | dict[str, int]]] | None = None,
        with_step: bool = False,
        extra_attrs: dict[str, Any] | None = None,
        chunk_rows: int = 1024,
        time_units: str | None = None,
        checkpoint: dict[str, tuple[tuple[int, ...], Any]] | None = None,
        time_long_name: str | None = None,
        dims: dict[str, tuple[str | None, ...]] | None = None,
        axes: dict[str, str] | None = None,
        descriptions: dict[str, tuple[str, str]] | None = None,
    ):
        self.path = Path(path)
        refuse_non_regular(self.path)  # before the lock file: never beside or over a device node
        self._descriptions = dict(descriptions or {})
        self.t_start = _time.time()
        self.t_resumed = 0.0
        self._ckpt_seq = 0
        self._ckpt_slot = 1  # the next checkpoint goes to slot 0
        self._lock = WriterLock(self.path).acquire()  # WriterBusy while another process writes it
        ignore_sigxfsz()
        up_front = sum(np.asarray(a).nbytes for a in (static or {}).values())
        up_front += 2 * sum(
            int(np.prod(shape)) * np.dtype(dt).itemsize for shape, dt in (checkpoint or {}).values()
        )
        if _free_bytes(self.path) < up_front + RESERVE:
            self._lock.release()
            raise _not_written(DiskFull(self.path, up_front + RESERVE, _free_bytes(self.path)))
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        f = None
        try:
            f, self._io = open_failstop(tmp, "w")
            self._lock.hold(tmp)
            self._io.reserve(up_front + RESERVE)
        except BaseException as e:
            self._discard(f, tmp)
            if isinstance(e, OSError) and e.errno in _NO_ROOM:
                raise _not_written(DiskFull(self.path, up_front + RESERVE, code=e.errno)) from None
            raise
        try:
            _write_root_attrs(f, model, config_toml, seed, extra_attrs or {})
            tds = _create_axes(f, with_step, chunk_rows, (time_units, time_long_name))
            named = _Named(dims or {}, axes or {}, self._descriptions)
            _create_static(f, static or {}, scales or {}, named)
            _create_series(f, tds, series, scales or {}, chunk_rows, named)
            if checkpoint:
                _create_checkpoint(f, checkpoint)
            f.flush()
            f.swmr_mode = True
            self._io.sync()
            if self._io.error is not None:
                raise _write_failed(self.path, self._io.error)
            replaced = inode_key(self.path)  # an --overwrite: the old file, locked until now
            os.replace(tmp, self.path)
            undo.journal_path(self.path).unlink(missing_ok=True)  # an old close's: not this file's
            _fsync_dir(self.path)
            self._lock.drop(replaced)
        except BaseException as e:
            self._discard(f, tmp)
            if isinstance(e, OSError):
                e.nothing_written = True  # the output was not replaced (see write_error)
            if isinstance(e, WriteFailed) and e.errno in _NO_ROOM:
                raise _not_written(DiskFull(self.path, up_front + RESERVE, code=e.errno)) from None
            raise
        self._f = f
        self._names = [layout.TIME] + ([layout.STEP] if with_step else []) + list(series)
        self.n_rows = 0

    def _discard(self, f: h5py.File | None, scratch: Path) -> None:
        """After a failed open: close ``f`` and its I/O layer (when it was opened), remove the
        scratch file ``scratch`` (it never replaced the output), then release the lock."""
        try:
            if f is not None:
                try:
                    f.close()
                finally:
                    self._io.close()
        finally:
            scratch.unlink(missing_ok=True)
            self._lock.release()

    def _appender(self) -> Appender:
        if getattr(self, "_rows", None) is None:
            self._rows = Appender({n: self._f[n] for n in self._names})
        return self._rows

    def append(
        self, times: np.ndarray, rows: dict[str, np.ndarray], steps: np.ndarray | None = None
    ) -> None:
        """Append ``len(times)`` rows to every series, then flush (readers see them at once)."""
        k = len(times)
        if k == 0:
            return
        app = self._appender()
        n0, n1 = self.n_rows, self.n_rows + k
        given = {**rows, layout.TIME: times}
        if layout.STEP in self._names:
            given[layout.STEP] = steps
        missing = set(self._names) - set(given)
        if missing:
            raise ValueError(f"append: missing series {sorted(missing)}")
        data = app.rows(given, k)
        self._need(app.new_bytes(n0, n1))  # the bytes of the chunks this append allocates
        try:
            self._write_rows(app, data, n0, n1)
        except (RuntimeError, OSError) as e:
            self._broken = True
            raise _write_failed(self.path, e) from None
        self._check_io()
        self.n_rows = n1

    def _write_rows(self, app: Appender, data: list[np.ndarray], n0: int, n1: int) -> None:
        """Rows [n0, n1) of every series (:meth:`Appender.write`), then one flush."""
        app.write(n0, n1, data)
        self._f.flush()

    def rewrite(self, rows: dict[str, np.ndarray]) -> None:
        """Overwrite the first ``len`` rows of the written series in ``rows`` (in place, no
        resize), then flush: a grown run's closed form, recomputed on its longer grid."""
        self._need(0)
        try:
            for name, data in rows.items():
                ds = self._f[name]
                n = int(np.shape(data)[0])
                if n > self.n_rows:
                    raise ValueError(f"rewrite: {n} rows of {name}, {self.n_rows} written")
                ds[:n] = np.asarray(data, dtype=ds.dtype)
            self._f.flush()
        except (RuntimeError, OSError) as e:
            self._broken = True
            raise _write_failed(self.path, e) from None
        self._check_io()

    def rows(self, name: str) -> np.ndarray:
        """The rows of series ``name`` written so far (a copy)."""
        return self._f[name][: self.n_rows]

    def _need(self, nbytes: int) -> None:
        """DiskFull unless ``nbytes`` plus the reserve are free on the output's file system, and
        the file system has allocated them to this file (``fallocate``, where it can: a quota
        or a file-size limit is found here too, before anything is written). Nothing to ask
        when an earlier reservation still holds that much past the file's end."""
        if self._io.holds(nbytes + RESERVE):
            return
        free = _free_bytes(self.path) + self._io.reserved()  # what it reserved is ours to use
        if free < nbytes + RESERVE:
            raise DiskFull(self.path, nbytes + RESERVE, free)
        try:
            self._io.reserve(nbytes + RESERVE)
        except OSError as e:
            if e.errno not in _NO_ROOM:
                raise
            raise DiskFull(self.path, nbytes + RESERVE, code=e.errno) from None

    def _check_io(self) -> None:
        """WriteFailed when a write under the last HDF5 call failed (the disk keeps the file as
        of that moment; :mod:`fastdyn.h5.failstop`)."""
        if self._io.error is not None:
            self._broken = True
            raise _write_failed(self.path, self._io.error)

    def checkpoint(self, arrays: dict[str, np.ndarray]) -> None:
        """Write the resume state to the other slot, flush, then point ``current`` at it, flush."""
        self._need(0)  # the slots are allocated up front: only metadata is written
        try:
            self._write_checkpoint(arrays)
        except (RuntimeError, OSError) as e:
            self._broken = True
            raise _write_failed(self.path, e) from None
        self._check_io()

    def _write_checkpoint(self, arrays: dict[str, np.ndarray]) -> None:
        g = self._f[CHECKPOINT]
        slot = 1 - self._ckpt_slot
        s = g[f"slot{slot}"]
        clean = {}
        for k, v in arrays.items():
            ds = s[k]
            v = np.asarray(v, dtype=ds.dtype).reshape(ds.shape)
            ds[...] = v
            clean[k] = v
        seq = self._ckpt_seq + 1
        s["meta"][...] = np.array([seq, self.n_rows, _crc(clean, seq, self.n_rows)], dtype=np.int64)
        self._f.flush()
        g["current"][...] = np.array([slot, seq], dtype=np.int64)
        self._f.flush()
        self._ckpt_seq, self._ckpt_slot = seq, slot

    def close(
        self,
        status: str,
        timings: dict[str, float] | None = None,
        attrs: dict[str, Any] | None = None,
        datasets: dict[str, np.ndarray] | None = None,
        dims: dict[str, tuple[str | None, ...]] | None = None,
        axes: dict[str, str] | None = None,
        descriptions: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """Record the final status (and timings) in the root attributes, plus any end-of-run
        ``datasets`` (final weights; their axes named by ``dims`` and ``axes``, their units and
        long names by ``descriptions`` or the writer's own, as in :class:`RunWriter`); flush and
        close. Idempotent."""
        if self._f is None:
            return
        if getattr(self, "_broken", False):  # a write failed: add nothing, keep the last flush
            self.abandon()
            return
        try:
            self._need(0)
        except DiskFull:
            self.abandon()
            raise
        f, self._f = self._f, None
        failed = None
        self._io.journal = self.path  # the close rewrites the root group in place: undo-journaled
        try:
            f.attrs["status"] = str(status)  # a plain str (h5py stores no str subclass)
            t = dict(timings or {})
            t.setdefault("wall", _time.time() - self.t_start)
            if self.t_resumed:
                t["resumed_at"] = self.t_resumed
            f.attrs["timings"] = json.dumps(t)
            for k, v in (attrs or {}).items():
                f.attrs[k] = v
            for k, v in (datasets or {}).items():
                if k in f:
                    del f[k]
                ds = create_checked(f, k, v)  # a checksum on every dataset (fastdyn.h5.verify)
                _describe(ds, k, descriptions or getattr(self, "_descriptions", {}))
                if k in (dims or {}):
                    _attach_named(f, ds, dims[k], axes or {}, first=0)
                _index_scales(f, ds, first=0)
            f.flush()
        finally:
            try:
                f.close()
                self._io.sync()
                failed = self._io.error
                self._io.close()
                if failed is None and status.startswith(layout.STATUS_COMPLETE):
                    if not self.keep_checkpoint:
                        self._shed_checkpoint()
            finally:
                self._release()
        if failed is not None:
            raise _write_failed(self.path, failed)

    #: keep /checkpoint in a complete file (``output.keep_checkpoint``); else :meth:`close` rewrites it
    keep_checkpoint: bool = False

    def _shed_checkpoint(self) -> None:
        """Rewrite a complete file without /checkpoint (:func:`fastdyn.h5.compact.compact`): SWMR
        never frees space, and the slots can hold the whole state. A failure (disk full) keeps
        the complete original."""
        try:
            with h5py.File(self.path, "r") as f:
                if CHECKPOINT not in f:
                    return
            compact(self.path, drop=(CHECKPOINT,))
        except (OSError, RuntimeError):
            pass

    def abandon(self) -> None:
        """Close the handle as of the last flush (after a failed write nothing more reaches the
        disk: :mod:`fastdyn.h5.failstop`)."""
        if self._f is not None:
            f, self._f = self._f, None
            try:
                f.close()
            except Exception:  # noqa: BLE001 — the file is left as of its last flush
                pass
            self._io.close()
        self._release()

    def _release(self) -> None:
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()

    # ------------------------------------------------------------------------------------------
    @classmethod
    def reopen(
        cls,
        path: str | os.PathLike,
        config_toml: str | None = None,
        rebuilt: Rebuilt | None = None,
    ) -> tuple[RunWriter, dict[str, np.ndarray] | None]:
        """Reopen an interrupted or crashed file to continue it, copy-on-write: the file is copied
        to ``.NAME.resume-PID`` beside it, and the copy has its open flags cleared, its rows
        after the newest valid checkpoint dropped, ``status = running`` set and SWMR mode
        switched on; only then is it fsynced and renamed over the original. Until that rename
        the original is never opened for writing, so a kill or a failed write at any moment in
        between leaves it as it was (the copy is removed by the next writer). Costs one copy of
        the file: a killed 10^6-task ODE file (≈ 130 MB, mostly its two checkpoint slots) ≈ 0.1 s
        on a local disk. ``config_toml``: the config of a run that grows (more steps or output
        times), stored in the copy with its ``identity_crc32`` before the rename. ``rebuilt``:
        the resume state of a file that kept none (a complete file without /checkpoint, its state
        recomputed by a replay, :mod:`fastdyn.drive.replay`): the copy gets the two slots and the
        state as its newest checkpoint, its rows after that state dropped. Returns
        (writer, checkpoint arrays or None when none was completed)."""
        self = cls.__new__(cls)
        self.path = Path(path)
        self.t_start = _time.time()
        self.t_resumed = self.t_start
        self._lock = WriterLock(self.path).acquire()  # WriterBusy while another process writes it
        ignore_sigxfsz()
        real = Path(os.path.realpath(self.path))  # a symlink stays a symlink to the file
        copy = real.with_name(f".{real.name}.resume-{os.getpid()}")
        f = None
        try:
            undo.recover(real)  # a close cut off half-way: first the file as of its last flush
            need = real.stat().st_size + RESERVE
            if _free_bytes(real) < need:
                raise _not_written(DiskFull(self.path, need, _free_bytes(real)))
            shutil.copyfile(real, copy)
            shutil.copymode(real, copy)
            self._lock.hold(copy)
            clear_open_flags(copy)
            f, self._io = open_failstop(copy, "r+")
            self._io.reserve(RESERVE)
            repair_torn(f)  # before the resize below, which rewrites the last chunk
            if rebuilt is not None and CHECKPOINT not in f:
                _add_checkpoint(f, rebuilt)
            got = read_checkpoint(f)
            arrays, rows, seq = got if got is not None else (None, 0, 0)
            for name in [n for n in _resizable(f) if not n.startswith(CHECKPOINT)]:
                ds = f[name]
                if ds.shape[0] > rows:
                    ds.resize(rows, axis=0)
            self._ckpt_slot = 1  # the slot written last; the next checkpoint goes to the other
            if got is not None:
                for slot in (0, 1):
                    if int(f[CHECKPOINT][f"slot{slot}"]["meta"][0]) == seq:
                        self._ckpt_slot = slot
            self._ckpt_seq = seq
            f.attrs["status"] = layout.STATUS_RUNNING
            if config_toml is not None:
                f.attrs["config"] = config_toml
                f.attrs["identity_crc32"] = identity_crc(f.attrs)
            f.flush()
            f.swmr_mode = True
            self._io.sync()
            if self._io.error is not None:
                raise _write_failed(self.path, self._io.error)
            replaced = inode_key(real)
            os.replace(copy, real)
            _fsync_dir(real)
            self._lock.drop(replaced)
            try:  # a journal copy left beside the replaced file that could not be used
                undo.forget_beside(real)
            except OSError:
                pass
        except BaseException as e:
            self._discard(f, copy)
            if isinstance(e, OSError):
                e.nothing_written = False  # the file is untouched: as it was before --resume
            if isinstance(e, OSError) and e.errno in _NO_ROOM and not isinstance(e, DiskFull):
                raise DiskFull(self.path, RESERVE, code=e.errno) from None
            raise
        self._f = f
        self._names = [layout.TIME] + sorted(
            n
            for n in _resizable(f)
            if not n.startswith(CHECKPOINT) and n.rsplit("/", 1)[-1] != layout.TIME
        )
        self.n_rows = rows
        return self, arrays

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._f is not None:
            self.close("failed: " + (str(exc).splitlines()[0] if exc else "closed without status"))


# --- the layout of a new file (RunWriter's constructor, in this order) --------------------------


def _describe(
    ds: h5py.Dataset, name: str, described: dict[str, tuple[str, str]] | None = None
) -> None:
    """``units`` and ``long_name`` of ``ds``: the model's ``described[name]``, else
    :data:`layout.DESCRIPTIONS`."""
    units, long_name = (described or {}).get(name) or layout.DESCRIPTIONS.get(name, ("1", name))
    ds.attrs["units"] = units
    ds.attrs["long_name"] = long_name


@dataclass(frozen=True)
class _Named:
    """What the model says about its datasets: axis names (``dims``), each name's ``long_name``
    (``axes``) and the datasets' own units and long names (``described``)."""

    dims: dict[str, tuple[str | None, ...]]
    axes: dict[str, str]
    described: dict[str, tuple[str, str]]


def _write_root_attrs(
    f: h5py.File, model: str, config_toml: str, seed: int, extra_attrs: dict[str, Any]
) -> None:
    """The root attributes: format, provenance, identity, status ``running`` and ``extra_attrs``."""
    a = f.attrs
    a["format"] = layout.FORMAT_NAME
    a["format_version"] = layout.FORMAT_VERSION
    a["generated_by"] = f"fastdyn {__version__}"
    a["model"] = model
    a["config"] = config_toml
    a["versions"] = json.dumps(versions(model))
    a["seed"] = int(seed)
    a["identity_crc32"] = identity_crc(a)
    a["checksums"] = (
        "identity_crc32 fletcher32"  # what this file carries (a removed one is refused)
    )
    a["command_line"] = " ".join(  # bytes that are not UTF-8 (a --set value) as \xNN escapes
        os.fsencode(arg).decode("utf-8", "backslashreplace") for arg in sys.argv
    )
    a["created"] = _time.strftime("%Y-%m-%dT%H:%M:%S%z")
    a["status"] = layout.STATUS_RUNNING
    a["timings"] = "{}"
    for k, v in extra_attrs.items():
        a[k] = v


def _create_axes(
    f: h5py.File, with_step: bool, chunk_rows: int, time_units: tuple[str | None, str | None]
) -> h5py.Dataset:
    """The row axes: ``/time`` (a dimension scale; ``time_units``: its units and long name where
    given) and, ``with_step``, ``/step``; returns ``/time``."""
    tds = _row_axis(f, layout.TIME, "f8", chunk_rows)
    tds.make_scale(layout.TIME)
    _describe(tds, layout.TIME)
    for key, value in zip(("units", "long_name"), time_units, strict=True):
        if value:
            tds.attrs[key] = value
    if with_step:
        sds = _row_axis(f, layout.STEP, "i8", chunk_rows)
        _describe(sds, layout.STEP)
        sds.dims[0].attach_scale(tds)
    return tds


def _create_static(
    f: h5py.File, static: dict[str, np.ndarray], scales: dict, named: _Named
) -> None:
    """The datasets written once, the ``scales`` among them made dimension scales and attached,
    the axes ``named.dims`` names given their scales."""
    for name, arr in static.items():
        ds = create_checked(f, name, np.asarray(arr))
        _describe(ds, name, named.described)
    for name, (scale_name, _axis) in scales.items():
        f[name].make_scale(scale_name)
    for name in static:
        if name in named.dims:
            _attach_named(f, f[name], named.dims[name], named.axes, first=0)
        if name not in scales:
            _attach_group_scale(f, f[name], scales)
            _index_scales(f, f[name], first=0)


def _create_series(
    f: h5py.File,
    tds: h5py.Dataset,
    series: dict[str, tuple[int, ...]],
    scales: dict,
    chunk_rows: int,
    named: _Named,
) -> None:
    """The streamed series, empty and growing along rows (``tds`` their time axis), the axes
    ``named.dims`` names given their scales."""
    for name, trailing in series.items():
        width = int(np.prod(trailing)) if trailing else 1
        rows = max(1, min(chunk_rows, CHUNK_BYTES // (8 * width)))
        # No compression: in SWMR-write mode HDF5 never reuses freed file space, so a compressed
        # chunk rewritten on every append leaves its old copy behind (1000 appends of a 64-wide
        # row grew a file to 226 MB against 0.5 MB uncompressed; gzip saved 15% on such data).
        ds = f.create_dataset(
            name,
            shape=(0, *trailing),
            maxshape=(None, *trailing),
            dtype="f8",
            chunks=(rows, *trailing),
            fillvalue=np.nan,
            fletcher32=True,
        )
        _describe(ds, name, named.described)
        ds.dims[0].attach_scale(tds)
        _link_scale(f, name, layout.TIME)
        for sname, (_scale_label, where) in scales.items():
            axis = where.get(name, 0) if isinstance(where, dict) else where
            if 0 < axis < ds.ndim and ds.shape[axis] == f[sname].shape[0]:
                ds.dims[axis].attach_scale(f[sname])
                _link_scale(f, name, sname)
        if name in named.dims:
            _attach_named(f, ds, named.dims[name], named.axes, first=1)
        _index_scales(f, ds)


def _create_checkpoint(f: h5py.File, checkpoint: dict[str, tuple[tuple[int, ...], Any]]) -> None:
    """The two checkpoint slots, allocated now (not in SWMR mode), and ``current``."""
    g = f.create_group(CHECKPOINT)
    g.attrs["long_name"] = "resume state: two slots written alternately; current = [slot, sequence]"
    for slot in (0, 1):
        s = g.create_group(f"slot{slot}")
        for name, (shape, dtype) in checkpoint.items():
            s.create_dataset(name, data=np.zeros(shape, dtype=dtype))
        s.create_dataset("meta", data=np.zeros(3, dtype=np.int64)).attrs["long_name"] = (
            "[sequence, rows written, crc32]"
        )
    g.create_dataset("current", data=np.array([-1, 0], dtype=np.int64))


@dataclass(frozen=True)
class Rebuilt:
    """A resume state recomputed for a file that kept none: the slots' layout ``spec``
    (``{name: (shape, dtype)}``, as :class:`RunWriter` declares it) and, unless None, the
    ``arrays`` of the state after the file's first ``rows`` rows."""

    spec: dict[str, tuple[tuple[int, ...], Any]]
    arrays: dict[str, np.ndarray] | None = None
    rows: int = 0


def _add_checkpoint(f: h5py.File, rebuilt: Rebuilt) -> None:
    """The two slots of ``rebuilt.spec`` in ``f`` (not in SWMR mode), and its arrays, if any, as
    checkpoint #1 in slot 0 (as :meth:`RunWriter.checkpoint` writes one)."""
    _create_checkpoint(f, rebuilt.spec)
    if rebuilt.arrays is None:
        return
    g = f[CHECKPOINT]
    clean = {}
    for k, v in rebuilt.arrays.items():
        ds = g["slot0"][k]
        clean[k] = np.asarray(v, dtype=ds.dtype).reshape(ds.shape)
        ds[...] = clean[k]
    meta = [1, rebuilt.rows, _crc(clean, 1, rebuilt.rows)]
    g["slot0"]["meta"][...] = np.array(meta, dtype=np.int64)
    g["current"][...] = np.array([0, 1], dtype=np.int64)


def _row_axis(f: h5py.File, name: str, dtype: str, chunk_rows: int) -> h5py.Dataset:
    """An empty 1-d dataset ``name`` that grows by one entry a row (the time or step axis)."""
    return f.create_dataset(
        name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(chunk_rows,), fletcher32=True
    )


def _attach_group_scale(f: h5py.File, ds: h5py.Dataset, scales: dict) -> None:
    """A static dataset whose first axis runs along a dimension scale of its own group (e.g.
    ``tasks/emergence`` along ``tasks/index``) gets that scale, so netCDF readers align the two
    (one ``task`` dimension) instead of giving it an index axis of its own."""
    if not ds.ndim:
        return
    for sname in scales:
        group = sname.rsplit("/", 1)[0] if "/" in sname else None
        if (
            group
            and ds.name.lstrip("/").startswith(group + "/")
            and ds.shape[0] == f[sname].shape[0]
        ):
            ds.dims[0].attach_scale(f[sname])
            return


def _attach_named(
    f: h5py.File, ds: h5py.Dataset, names: tuple[str | None, ...], axes: dict[str, str], first: int
) -> None:
    """Axis ``first + k`` of ``ds`` gets the dimension scale called ``names[k]`` (None: none here;
    :func:`_index_scales` gives it an index). A name is one scale per file, whichever group holds
    it: the first dataset on it creates it in its own group (0, 1, …; units "1", ``long_name``
    ``axes[name]``), an existing scale of that base name (e.g. one declared by ``scales``) is
    reused, and it is hard-linked into the group of every other dataset on it (netCDF readers
    opening a group see its coordinates there; arrays on one axis share it). A length that
    differs from the scale's is a layout error of the model (ValueError)."""
    if len(names) != ds.ndim - first:
        raise ValueError(f"{ds.name}: {len(names)} axis names for {ds.ndim - first} axes")
    group = ds.parent.name.rstrip("/")
    for k, name in enumerate(names):
        if name is None:
            continue
        axis, n = first + k, ds.shape[first + k]
        here = f"{group}/{name}"
        sds = f[here] if here in f else _find_scale(f, name)
        if sds is None:
            sds = create_checked(f, here, np.arange(n, dtype=np.int64))
            sds.make_scale(name)
            sds.attrs["units"] = "1"
            sds.attrs["long_name"] = axes.get(name, f"index along the {name} axis")
        elif not sds.is_scale or sds.shape != (n,):
            raise ValueError(
                f"{ds.name}: axis {axis} ({name}, length {n}) does not fit the dimension scale "
                f"{sds.name} of shape {sds.shape}"
            )
        elif here not in f:
            f[here] = sds
        ds.dims[axis].attach_scale(sds)


def _find_scale(f: h5py.File, name: str) -> h5py.Dataset | None:
    """The dimension scale of base name ``name`` anywhere outside /checkpoint, or None."""
    found: list[h5py.Dataset] = []

    def visit(path: str, obj: Any) -> Any:
        if (
            path.rsplit("/", 1)[-1] == name
            and not path.startswith(CHECKPOINT)
            and isinstance(obj, h5py.Dataset)
            and obj.is_scale
        ):
            found.append(obj)
            return True
        return None

    f.visititems(visit)
    return found[0] if found else None


def _index_scales(f: h5py.File, ds: h5py.Dataset, first: int = 1) -> None:
    """Give every axis from ``first`` on of ``ds`` that has no dimension scale an index scale
    ``<name>_dim<axis>`` (0, 1, …) beside it: netCDF readers (xarray's h5netcdf engine) refuse a
    variable whose axes are partly labelled (time) and partly not, and warn on unlabelled ones."""
    for axis in range(first, ds.ndim):
        if len(ds.dims[axis]):
            continue
        sname = f"{ds.name}_dim{axis}"
        if sname in f and f[sname].shape == (ds.shape[axis],):  # written before a resume
            ds.dims[axis].attach_scale(f[sname])
            continue
        if sname in f:
            del f[sname]
        sds = create_checked(f, sname, np.arange(ds.shape[axis], dtype=np.int64))
        sds.make_scale(sname.rsplit("/", 1)[-1])
        sds.attrs["units"] = "1"
        sds.attrs["long_name"] = f"index along axis {axis} of {ds.name.rsplit('/', 1)[-1]}"
        ds.dims[axis].attach_scale(sds)


def _resizable(f: h5py.File) -> list[str]:
    out: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and obj.maxshape and obj.maxshape[0] is None:
            out.append(name)

    f.visititems(visit)
    return out
