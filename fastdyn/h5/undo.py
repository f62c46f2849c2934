"""⑤ The undo journal of a file's last flush: the bytes a flush rewrites in place, kept beside the
file until every one of them is on the disk.

An append under SWMR rewrites metadata in an order in which any prefix is a consistent file (a
kill or a failed write at any moment leaves the file as of the last flush). Closing a run does
not: it changes the root attributes (``status``, ``timings``) and adds datasets, and HDF5 then
rewrites the root object header, the attribute heap and its index in place, in several writes.
A failure between two of them (EIO, ENOSPC/EDQUOT on a file system that allocates on overwrite,
a kill) left a root group that no reader opens ("incorrect metadata checksum"), every flushed row
with it.

So a flush that rewrites more than one place (:class:`fastdyn.h5.failstop.FailStopFile` with
``journal`` set; the writer sets it for its close) first writes the old and the new bytes of
every region to ``.NAME.undo`` beside the file and fsyncs it, then rewrites the regions, fsyncs
the file and deletes the journal. A write that fails part-way is undone at once from the old
bytes; where the disk takes no write at all, the journal stays, and :func:`recover` puts the old
bytes back later: ``fastdyn.load`` (so ``inspect``, ``fit``, ``plot``), ``repair`` and
``--resume`` call it under the writer lock before they read. The file is then exactly as of its
last flush.

A journal applies to a file only where each region holds its new bytes up to some point and its
old bytes after it (written up to there, a torn write included): checked by content, not by
inode, so it holds across the nodes of a cluster file system and for copies. A journal that does
not apply (the file was replaced since, by a new run at the same path) or that is not whole (cut
off while written, before any region was touched) is deleted without touching the file.

Format: ``MAGIC``, then per region ``offset`` (u64), ``length`` (u32), the old bytes and the new
bytes, then the CRC-32 of everything before it (u32).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from pathlib import Path

MAGIC = b"fastdyn-undo-2\n"
#: journals a flush of this process is writing or applying right now (readers leave them alone)
_ACTIVE: set[str] = set()
_ACTIVE_LOCK = threading.Lock()

Region = tuple[int, bytes, bytes]  # (offset, old bytes, new bytes)


def journal_path(path: str | os.PathLike) -> Path:
    """``.NAME.undo`` beside the file ``path`` is (a symlink's target)."""
    p = Path(os.path.realpath(path))
    return p.with_name(f".{p.name}.undo")


def encode(regions: list[Region]) -> bytes:
    """The journal's bytes for ``regions``; old and new bytes of a region have one length."""
    body = bytearray(MAGIC)
    for at, old, new in regions:
        if len(old) != len(new):
            raise ValueError("a region's old and new bytes must have one length")
        body += struct.pack("<QI", at, len(old)) + old + new
    return bytes(body) + struct.pack("<I", zlib.crc32(body))


def decode(blob: bytes) -> list[Region] | None:
    """The regions of a journal, or None when it is not a whole one (cut off while written)."""
    if len(blob) < len(MAGIC) + 4 or not blob.startswith(MAGIC):
        return None
    body, (crc,) = blob[:-4], struct.unpack("<I", blob[-4:])
    if zlib.crc32(body) != crc:
        return None
    out, at = [], len(MAGIC)
    while at < len(body):
        off, n = struct.unpack_from("<QI", body, at)
        at += 12
        out.append((off, bytes(body[at : at + n]), bytes(body[at + n : at + 2 * n])))
        at += 2 * n
    return out


def _applies(now: bytes, old: bytes, new: bytes) -> bool:
    """Whether a region that reads ``now`` was written with ``new`` up to some point and still
    holds ``old`` after it (nothing written, all written, or a torn write in between)."""
    if len(now) != len(old):
        return False
    k = 0
    while k < len(now) and now[k] == new[k]:
        k += 1
    return now[k:] == old[k:]


def write(path: str | os.PathLike, regions: list[Region]) -> Path:
    """Write and fsync the journal of ``path`` and mark it in use by this process until
    :func:`done` (OSError when the disk refuses it: then nothing was rewritten yet, and the
    caller writes nothing)."""
    j = journal_path(path)
    with _ACTIVE_LOCK:
        _ACTIVE.add(str(j))
    try:
        fd = os.open(j, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            data = memoryview(encode(regions))
            while data:
                n = os.write(fd, data)
                if n <= 0:
                    raise OSError(5, "journal write made no progress", str(j))
                data = data[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(j)
    except OSError:
        done(path, remove=True)
        raise
    return j


def done(path: str | os.PathLike, remove: bool) -> None:
    """The flush that wrote the journal of ``path`` is over: delete the journal (``remove``: the
    rewrites are all on the disk, or all taken back) or leave it for :func:`recover`."""
    j = journal_path(path)
    try:
        if remove:
            j.unlink(missing_ok=True)
            fsync_dir(j)
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(str(j))


def put_back(fd: int, regions: list[Region]) -> bool:
    """Write the old bytes back through ``fd`` (last region first) and fsync; False when a write
    fails (the journal must then stay)."""
    try:
        for at, old, _new in reversed(regions):
            done_ = 0
            while done_ < len(old):
                n = os.pwrite(fd, old[done_:], at + done_)
                if n <= 0:
                    return False
                done_ += n
        os.fsync(fd)
    except OSError:
        return False
    return True


def recover(path: str | os.PathLike) -> bool:
    """Put back what a cut-off flush of ``path`` rewrote, if its journal is there and applies;
    True when it did. The caller holds the writer lock. OSError when the file cannot be written
    (a read-only place): the journal stays."""
    p = Path(path)
    j = journal_path(p)
    try:
        blob = j.read_bytes()
    except FileNotFoundError:
        return False
    regions = decode(blob)
    fd = os.open(p, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        if regions is None or not all(
            _applies(os.pread(fd, len(old), at), old, new) for at, old, new in regions
        ):  # cut off while written (nothing rewritten yet), or another file's
            j.unlink(missing_ok=True)
            return False
        if not put_back(fd, regions):
            raise OSError(5, "cannot write the old bytes back", str(p))
    finally:
        os.close(fd)
    j.unlink(missing_ok=True)
    fsync_dir(j)
    return True


def recover_unlocked(path: str | os.PathLike) -> None:
    """:func:`recover` for a reader: only where a journal is there that no flush of this process
    is using, and under the writer lock (taken for the moment; a live writer of another process
    holding it is still in its close, and the journal is its own). An unwritable file raises
    OSError."""
    j = journal_path(path)
    if not j.exists():
        return
    with _ACTIVE_LOCK:
        if str(j) in _ACTIVE:
            return
    from .lock import WriterBusy, WriterLock

    try:
        with WriterLock(path, announce=False):
            recover(path)
    except WriterBusy:
        return


def fsync_dir(path: Path) -> None:
    """fsync the directory holding ``path`` (after a file was created, renamed or deleted in it,
    else a power cut can undo that); where directories cannot be opened or synced, nothing."""
    try:
        fd = os.open(path.parent if str(path.parent) else ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
