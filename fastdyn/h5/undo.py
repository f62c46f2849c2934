"""⑤ The undo journal of a file's last flush: the bytes a flush rewrites in place, kept in two
copies until every one of them is on the disk.

An append under SWMR rewrites metadata in an order in which any prefix is a consistent file (a
kill or a failed write at any moment leaves the file as of the last flush). Closing a run does
not: it changes the root attributes (``status``, ``timings``) and adds datasets, and HDF5 then
rewrites the root object header, the attribute heap and its index in place, in several writes.
A failure between two of them (EIO, ENOSPC/EDQUOT on a file system that allocates on overwrite,
a kill) left a root group that no reader opens ("incorrect metadata checksum"), every flushed row
with it.

So a flush that rewrites more than one place (:class:`fastdyn.h5.failstop.FailStopFile` with
``journal`` set; the writer sets it for its close) first writes the old and the new bytes of
every region twice, each copy with its own CRC-32: *inside* the file, past every byte HDF5
addresses (in the room the writer reserved, so a full disk cannot refuse it), and *beside* it
as ``.NAME.undo``; both are fsynced before the first rewrite. After the last rewrite the file is
fsynced, the inside copy cut off and ``.NAME.undo`` deleted. Either good copy takes the close
back, so a damaged, emptied or lost ``.NAME.undo`` (a file copied without it) costs nothing.

Who uses it:

- readers (``fastdyn.load``, ``inspect``, ``fit``, ``plot``) never write: :func:`find` tells
  them which old bytes to show in place of the file's (:mod:`fastdyn.h5.rollback`);
- the writer, ``repair`` and ``--resume``, under the writer lock, call :func:`recover`, which
  writes the old bytes back. That is idempotent: a region qualifies when each of its bytes holds
  the old or the new value (a rewrite or a put-back cut off anywhere, a torn page included), and
  writing the old bytes again over such a region is always right.

A journal copy is read only when it is a regular file of plausible size (``os.lstat`` first; a
FIFO, a symlink, a device or a huge file is refused without being opened), and used only when
its CRC holds and its regions qualify. A good copy whose regions do not qualify belongs to
another file (one replaced since, by a new run at the same path). A copy that is not good is
never applied, and never deleted by a reader.

Format of a copy: ``MAGIC``, then per region ``offset`` (u64), ``length`` (u32), the old bytes
and the new bytes, then the CRC-32 of everything before it (u32). The inside copy is followed by
a footer: its offset (u64), its length (u64) and ``FOOTER`` (16 bytes), the file's last bytes.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = b"fastdyn-undo-3\n"
_OLD_MAGIC = b"fastdyn-undo-2\n"  # the same layout, written beside the file only
FOOTER = b"fastdyn-undo-end"
_FOOT = struct.Struct("<QQ16s")
#: a journal copy larger than this is not one (a close rewrites a few KiB of metadata)
MAX_BYTES = 64 << 20

Region = tuple[int, bytes, bytes]  # (offset, old bytes, new bytes)


def journal_path(path: str | os.PathLike) -> Path:
    """``.NAME.undo`` beside the file ``path`` is (a symlink's target)."""
    p = Path(os.path.realpath(path))
    return p.with_name(f".{p.name}.undo")


def encode(regions: list[Region]) -> bytes:
    """The bytes of one journal copy for ``regions``; old and new bytes of a region have one length."""
    body = bytearray(MAGIC)
    for at, old, new in regions:
        if len(old) != len(new):
            raise ValueError("a region's old and new bytes must have one length")
        body += struct.pack("<QI", at, len(old)) + old + new
    return bytes(body) + struct.pack("<I", zlib.crc32(body))


def decode(blob: bytes) -> list[Region] | None:
    """The regions of a journal copy, or None when it is not a whole, undamaged one."""
    if len(blob) < len(MAGIC) + 4 or not blob.startswith((MAGIC, _OLD_MAGIC)):
        return None
    body, (crc,) = blob[:-4], struct.unpack("<I", blob[-4:])
    if zlib.crc32(body) != crc:
        return None
    out, at = [], len(MAGIC)
    while at < len(body):
        if at + 12 > len(body):
            return None
        off, n = struct.unpack_from("<QI", body, at)
        at += 12
        if at + 2 * n > len(body):
            return None
        out.append((off, bytes(body[at : at + n]), bytes(body[at + n : at + 2 * n])))
        at += 2 * n
    return out


def qualifies(fd: int, regions: list[Region]) -> bool:
    """Whether each byte of every region of the file open at ``fd`` holds its old value or the
    new value of a region that covers it (a flush may rewrite one place twice): what any rewrite
    or put-back cut off at any point (a torn page included) leaves."""
    for at, old, _new in regions:
        now = os.pread(fd, len(old), at)
        if len(now) != len(old):
            return False
        a = np.frombuffer(now, np.uint8)
        ok = a == np.frombuffer(old, np.uint8)
        for at2, _old2, new2 in regions:
            lo, hi = max(at, at2), min(at + len(old), at2 + len(new2))
            if lo < hi:
                ok[lo - at : hi - at] |= a[lo - at : hi - at] == np.frombuffer(
                    new2, np.uint8, hi - lo, lo - at2
                )
        if not ok.all():
            return False
    return True


@dataclass
class Found:
    """What the journal of a file says: ``regions`` from a good copy that qualifies (None: no
    journal applies), ``where`` that copy came from, ``inside_at`` where the inside copy starts
    (None: there is none), and ``problems``: one phrase per copy that could not be used."""

    regions: list[Region] | None = None
    where: str = ""
    inside_at: int | None = None
    beside: str = "missing"  # "missing", "good", "stale" (another file's) or "unusable"
    problems: list[str] = field(default_factory=list)


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _plausible(size: int, file_size: int) -> bool:
    return size <= min(MAX_BYTES, 4 * file_size + (1 << 20))


def read_beside(path: str | os.PathLike, file_size: int) -> tuple[bytes | None, str | None]:
    """(bytes of ``.NAME.undo``, None), (None, None) when there is none, or (None, why) when it
    is not a regular file of plausible size: checked with ``os.lstat`` and never opened then
    (a FIFO would block a read, a link to /dev/zero never end), opened non-blocking otherwise."""
    j = journal_path(path)
    try:
        st = os.lstat(j)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{j} cannot be read ({e.strerror or e})"
    if not stat.S_ISREG(st.st_mode):
        return None, f"{j} is {_kind(st.st_mode)}, not an undo journal"
    if not _plausible(st.st_size, file_size):
        return None, f"{j} is too large for an undo journal ({st.st_size} bytes)"
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(j, flags | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{j} cannot be read ({e.strerror or e})"
    try:
        st = os.fstat(fd)  # (replaced between the lstat and the open)
        if not stat.S_ISREG(st.st_mode) or not _plausible(st.st_size, file_size):
            return None, f"{j} is not a regular file of plausible size"
        return os.pread(fd, st.st_size, 0), None
    except OSError as e:
        return None, f"{j} cannot be read ({e.strerror or e})"
    finally:
        os.close(fd)


def read_inside(fd: int) -> tuple[bytes | None, int | None]:
    """(the copy inside the file open at ``fd``, where it starts), or (None, None) when the
    file ends in no footer."""
    size = os.fstat(fd).st_size
    if size < _FOOT.size:
        return None, None
    at, n, magic = _FOOT.unpack(os.pread(fd, _FOOT.size, size - _FOOT.size))
    if magic != FOOTER or at + n + _FOOT.size != size or not _plausible(n, size):
        return None, None
    return os.pread(fd, n, at), at


def find(fd: int, path: str | os.PathLike) -> Found:
    """Read both copies of the journal of the file open (for reading) at ``fd`` and choose the
    one that applies; writes nothing."""
    out = Found()
    size = os.fstat(fd).st_size
    candidates: list[tuple[str, list[Region]]] = []
    inside, out.inside_at = read_inside(fd)
    if inside is not None:
        regions = decode(inside)
        if regions is None:
            out.problems.append("the copy inside the file is damaged (CRC-32 mismatch)")
        else:
            candidates.append(("inside the file", regions))
    blob, why = read_beside(path, size)
    j = journal_path(path)
    if why is not None:
        out.beside = "unusable"
        out.problems.append(why)
    elif blob is not None:
        regions = decode(blob)
        if regions is None:
            out.beside = "unusable"
            out.problems.append(f"{j} is damaged or cut off ({len(blob)} bytes, CRC-32 mismatch)")
        else:
            candidates.append((str(j), regions))
    for where, regions in candidates:
        fits = qualifies(fd, regions)
        if where == str(j):
            out.beside = "good" if fits else "stale"
        if fits and out.regions is None:
            out.regions, out.where = regions, where
    return out


def pending(path: str | os.PathLike) -> bool:
    """Whether a journal of ``path`` is left (beside it, or inside it): a close was cut off."""
    if os.path.lexists(journal_path(path)):
        return True
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return read_inside(fd)[0] is not None
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        if n <= 0:
            raise OSError(errno.EIO, "journal write made no progress")
        view, at = view[n:], at + n


def write(path: str | os.PathLike, fd: int, at: int, regions: list[Region]) -> None:
    """Write and fsync both copies of the journal of ``path``: inside the file open at ``fd``
    (read-write) from byte ``at``, past everything HDF5 addresses, then ``.NAME.undo``. OSError
    when the disk refuses the inside copy (then nothing is rewritten yet and the caller writes
    nothing). A refused ``.NAME.undo`` (a full disk outside the file's reservation) leaves the
    inside copy alone to take the close back."""
    blob = encode(regions)
    size = os.fstat(fd).st_size
    try:
        _write_all(fd, blob + _FOOT.pack(at, len(blob), FOOTER), at)
        os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
        raise
    j = journal_path(path)
    try:
        jfd = os.open(j, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            _write_all(jfd, blob, 0)
            os.fsync(jfd)
        finally:
            os.close(jfd)
        fsync_dir(j)
    except OSError:
        try:
            j.unlink(missing_ok=True)
        except OSError:
            pass


def done(path: str | os.PathLike, fd: int, at: int) -> None:
    """The flush whose journal starts at ``at`` inside the file open at ``fd`` is over, its
    rewrites all on the disk or all taken back: cut off the inside copy, delete ``.NAME.undo``."""
    if os.fstat(fd).st_size > at:
        os.ftruncate(fd, at)
    j = journal_path(path)
    j.unlink(missing_ok=True)
    fsync_dir(j)


def put_back(fd: int, regions: list[Region]) -> bool:
    """Write the old bytes back through ``fd`` (last region first) and fsync; False when a write
    fails (the journal must then stay)."""
    try:
        for at, old, _new in reversed(regions):
            _write_all(fd, old, at)
        os.fsync(fd)
    except OSError:
        return False
    return True


def recover(path: str | os.PathLike) -> bool:
    """Put back what a cut-off flush of ``path`` rewrote, where a good copy of its journal
    applies; True when it did. Then, or where the copy beside it belongs to another file, the
    journal goes. The caller holds the writer lock. OSError when the file cannot be written (a
    read-only place): everything stays."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        found = find(fd, p)
    finally:
        os.close(fd)
    j = journal_path(p)
    if found.regions is None:
        if found.beside == "stale":  # whole, but not this file's: a new run at the same path
            try:
                j.unlink(missing_ok=True)
                fsync_dir(j)
            except OSError:  # (a read-only place: readers ignore it as well)
                pass
        return False
    fd = os.open(p, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        if not put_back(fd, found.regions):
            raise OSError(errno.EIO, "cannot write the old bytes back", str(p))
        if found.inside_at is not None:
            os.ftruncate(fd, found.inside_at)
            os.fsync(fd)
    finally:
        os.close(fd)
    if os.path.lexists(j):
        j.unlink()
        fsync_dir(j)
    return True


def forget_beside(path: str | os.PathLike) -> None:
    """Delete whatever lies at ``.NAME.undo`` (a writer's, or ``repair``'s once the file read
    whole: a journal copy that could not be used, or a node that is none)."""
    j = journal_path(path)
    if os.path.lexists(j):
        j.unlink()
        fsync_dir(j)


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
