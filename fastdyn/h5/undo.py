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
``journal`` set; the writer sets it for its close) first writes the old bytes of every region to
``.NAME.undo`` beside the file and fsyncs it, then rewrites the regions, fsyncs the file and
deletes the journal. A write that fails part-way is undone at once from the old bytes; where the
disk takes no write at all, the journal stays, and :func:`recover` puts the old bytes back later:
``fastdyn.load`` (so ``inspect``, ``fit``, ``plot``), ``repair`` and ``--resume`` call it under the
writer lock before they read. The file is then exactly as of its last flush.

Format: ``MAGIC``, the device and inode numbers of the file it belongs to (u64 each), then per
region ``offset`` (u64) ``length`` (u32) and the bytes, then the CRC-32 of everything before it
(u32). A journal that fails its CRC was cut off while being written, before any region was
touched; one whose inode is not the file's (the file was replaced since: a new run, a copy) is
stale. Both are deleted without touching the file.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

MAGIC = b"fastdyn-undo-1\n"


def journal_path(path: str | os.PathLike) -> Path:
    """``.NAME.undo`` beside the file ``path`` is (a symlink's target)."""
    p = Path(os.path.realpath(path))
    return p.with_name(f".{p.name}.undo")


def encode(regions: list[tuple[int, bytes]], inode: tuple[int, int] = (0, 0)) -> bytes:
    """The journal's bytes for ``regions`` [(offset, old bytes)] of the file ``inode``
    (st_dev, st_ino)."""
    body = bytearray(MAGIC) + struct.pack("<QQ", *inode)
    for at, old in regions:
        body += struct.pack("<QI", at, len(old)) + old
    return bytes(body) + struct.pack("<I", zlib.crc32(body))


def decode(blob: bytes) -> tuple[tuple[int, int], list[tuple[int, bytes]]] | None:
    """The file inode and the regions of a journal, or None when it is not a whole one (cut off
    while written)."""
    if len(blob) < len(MAGIC) + 20 or not blob.startswith(MAGIC):
        return None
    body, (crc,) = blob[:-4], struct.unpack("<I", blob[-4:])
    if zlib.crc32(body) != crc:
        return None
    inode = struct.unpack_from("<QQ", body, len(MAGIC))
    out, at = [], len(MAGIC) + 16
    while at < len(body):
        off, n = struct.unpack_from("<QI", body, at)
        at += 12
        out.append((off, bytes(body[at : at + n])))
        at += n
    return (inode[0], inode[1]), out


def write(path: str | os.PathLike, regions: list[tuple[int, bytes]]) -> Path:
    """Write and fsync the journal of ``path`` (OSError when the disk refuses it: then nothing
    was rewritten yet, and the caller writes nothing)."""
    j = journal_path(path)
    st = os.stat(path)
    fd = os.open(j, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        data = memoryview(encode(regions, (st.st_dev, st.st_ino)))
        while data:
            n = os.write(fd, data)
            if n <= 0:
                raise OSError(5, "journal write made no progress", str(j))
            data = data[n:]
        os.fsync(fd)
    except OSError:
        os.close(fd)
        j.unlink(missing_ok=True)
        raise
    os.close(fd)
    fsync_dir(j)
    return j


def put_back(fd: int, regions: list[tuple[int, bytes]]) -> bool:
    """Write the old bytes back through ``fd`` (last region first) and fsync; False when a write
    fails (the journal must then stay)."""
    try:
        for at, old in reversed(regions):
            done = 0
            while done < len(old):
                n = os.pwrite(fd, old[done:], at + done)
                if n <= 0:
                    return False
                done += n
        os.fsync(fd)
    except OSError:
        return False
    return True


def recover(path: str | os.PathLike) -> bool:
    """Put back what a cut-off flush of ``path`` rewrote, if its journal is there; True when it
    did. The caller holds the writer lock (no live writer is in its close). OSError when the file
    cannot be written (a read-only place): the journal stays."""
    p = Path(path)
    j = journal_path(p)
    try:
        blob = j.read_bytes()
    except FileNotFoundError:
        return False
    found = decode(blob)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    if found is None or st is None or found[0] != (st.st_dev, st.st_ino):
        j.unlink(missing_ok=True)  # cut off while written (nothing rewritten yet), or stale
        return False
    regions = found[1]
    fd = os.open(p, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        if not put_back(fd, regions):
            raise OSError(5, "cannot write the old bytes back", str(p))
    finally:
        os.close(fd)
    j.unlink(missing_ok=True)
    return True


def recover_unlocked(path: str | os.PathLike) -> None:
    """:func:`recover` for a reader: only where a journal is there, and under the writer lock
    (taken for the moment; a live writer holding it is still in its close, and the journal is
    its own). An unwritable file raises OSError."""
    if not journal_path(path).exists():
        return
    from .lock import WriterBusy, WriterLock

    try:
        with WriterLock(path, announce=False):
            recover(path)
    except WriterBusy:
        return


def fsync_dir(path: Path) -> None:
    """fsync the directory holding ``path`` (after a file was created or renamed into it, else a
    power cut can undo that); where directories cannot be opened or synced, nothing."""
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
