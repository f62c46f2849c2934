"""⑤ The file object under every HDF5 file fastdyn writes: it stops at the first failed write.

HDF5 does not survive its own write errors. Measured with HDF5 2.0 under an injected EDQUOT at
the n-th ``pwrite`` (``tests/reliability/faultfs``): the flush that hit it, or the close after
it, segfaulted in 9 of 16 trials, and others left "slist already enabled?" errors behind, while
the bytes already on disk were always a consistent SWMR file. So fastdyn hands HDF5 a Python
file object (h5py's ``fileobj`` driver) that never reports an error to it:

- Until a write fails, every call goes straight to the file descriptor (``pread``/``pwrite``).
- The first write that fails (ENOSPC, EDQUOT, EFBIG, EIO, …; a partial write counts) is
  recorded in :attr:`FailStopFile.error`, and from then on *nothing* reaches the disk: HDF5's
  later writes and truncations go to an in-memory overlay that its reads see. The file on disk
  stays exactly as a process killed at that write leaves it (every flushed row kept, readable by
  SWMR readers, ``fastdyn repair`` and ``--resume``), and HDF5, which saw no error, closes
  cleanly.
- The caller checks :attr:`error` after each HDF5 call that writes, and reports it.
- A write that fails part-way and rewrote metadata in place has its old bytes put back, and the
  superblock's end-of-file address is kept at or past every byte written, so the file never
  holds an object its superblock does not cover (``clear_open_flags`` repairs older files).
- Through a file-object driver HDF5 marks the superblock "open for SWMR write" but not "open for
  write", which SWMR readers refuse; :meth:`FailStopFile.write` adds the write bit (and redoes
  the checksum), so the file on disk carries the flags the ``sec2`` driver writes.

:meth:`FailStopFile.reserve` asks the file system for the blocks the next write needs
(``fallocate`` with ``FALLOC_FL_KEEP_SIZE``), so that a full disk or an exceeded quota is found
before anything is written, where the file system supports it. SIGXFSZ (a file-size limit,
``ulimit -f``) is ignored while a writer lives, so that limit is an EFBIG write error like any
other instead of a core dump.

Cost: the ``fileobj`` driver calls back into Python for each I/O, ≈ 30 calls per appended row set
of five series (≈ 18 % more than the ``sec2`` driver per append in that case; a few µs per call).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import io
import os
import signal
import threading

import h5py

from .superblock import mark_write_access, with_end_address

_FALLOC_FL_KEEP_SIZE = 1
#: writes up to this size that rewrite bytes inside the file (metadata entries) keep the old
#: bytes, to put them back if the write fails part-way
_UNDO_MAX = 64 << 10
_libc = None


def _fallocate():
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _libc.fallocate.argtypes = (
                ctypes.c_int,
                ctypes.c_int,
                ctypes.c_int64,
                ctypes.c_int64,
            )
        except (OSError, AttributeError):
            _libc = False
    return _libc.fallocate if _libc else None


def ignore_sigxfsz() -> None:
    """A file-size limit becomes an EFBIG write error instead of killing the process (SIGXFSZ's
    default action). Only the main thread can set a handler; elsewhere this does nothing."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class FailStopFile(io.RawIOBase):
    """A read/write binary file for h5py's ``fileobj`` driver that stops writing at the first
    failure (module docstring). ``create``: create or truncate ``path``; else it must exist."""

    def __init__(self, path: str | os.PathLike, create: bool = False):
        super().__init__()
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT | os.O_TRUNC
        self.path = os.fspath(path)
        self.fd = os.open(self.path, flags, 0o644)
        self.pos = 0
        #: the first write error, or None while every write has reached the disk
        self.error: OSError | None = None
        self._overlay: list[tuple[int, bytes]] = []  # (offset, bytes) HDF5 wrote after it
        self._size = 0  # the size HDF5 sees after the failure
        self._superblock: bytes | None = None  # as last written at offset 0
        self._covered = 0  # the end-of-file address that superblock records

    # io.RawIOBase --------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self.pos = offset
        elif whence == os.SEEK_CUR:
            self.pos += offset
        else:
            self.pos = self._end() + offset
        return self.pos

    def _end(self) -> int:
        return self._size if self.error is not None else os.fstat(self.fd).st_size

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        n = len(view)
        data = os.pread(self.fd, n, self.pos)
        if self.error is None:
            view[: len(data)] = data
            self.pos += len(data)
            return len(data)
        end = min(self.pos + n, self._size)
        got = max(0, end - self.pos)
        view[:got] = bytes(got)
        view[: min(len(data), got)] = data[:got]
        for off, blob in self._overlay:  # later writes win: applied in order
            lo, hi = max(off, self.pos), min(off + len(blob), end)
            if lo < hi:
                view[lo - self.pos : hi - self.pos] = blob[lo - off : hi - off]
        self.pos += got
        return got

    def write(self, buf) -> int:
        data = memoryview(buf).cast("B")
        n, at = len(data), self.pos
        if at == 0 and n >= 16:  # the superblock: flags as the sec2 driver writes them
            fixed = mark_write_access(data)
            data = data if fixed is None else memoryview(fixed)
        if self.error is None:
            old = b""
            if 0 < n <= _UNDO_MAX and at < os.fstat(self.fd).st_size:
                old = os.pread(self.fd, n, at)  # metadata rewritten in place: kept for an undo
            done = 0
            try:
                while done < n:
                    k = os.pwrite(self.fd, data[done:], at + done)
                    if k <= 0:
                        raise OSError(errno.EIO, "write made no progress")
                    done += k
            except OSError as e:
                if 0 < done and old:
                    self._undo(at, old[:done])
                self._fail(e)
            else:
                if at == 0:
                    self._superblock = bytes(data)
                    self._covered = 0
                if at + n > self._covered:
                    self._cover(at + n)
        if self.error is not None:
            self._overlay.append((at, bytes(data)))
            self._size = max(self._size, at + n)
        self.pos = at + n
        return n

    def _undo(self, at: int, old: bytes) -> None:
        """Put back the bytes a failed, partly done write replaced (a torn metadata entry would
        fail its checksum where the old one still matches its parents); best effort."""
        try:
            os.pwrite(self.fd, old, at)
        except OSError:
            pass

    def _cover(self, end: int) -> None:
        """Keep the superblock's end-of-file address at or past every byte written (HDF5 writes
        it after the objects it covers, so a file stopped between the two had objects past its
        recorded end, which readers refuse: "addr overflow")."""
        if self._superblock is None:
            return
        raised = with_end_address(self._superblock, end)
        if raised is None:  # it covers ``end`` already (or is no superblock we know)
            self._covered = max(self._covered, end)
            return
        try:
            os.pwrite(self.fd, raised, 0)
        except OSError as e:
            self._fail(e)
            return
        self._superblock = raised
        self._covered = end

    def truncate(self, size: int | None = None) -> int:
        size = self.pos if size is None else size
        if self.error is None:
            try:
                if os.fstat(self.fd).st_size != size:  # HDF5 asks at every flush; mostly a no-op
                    os.ftruncate(self.fd, size)  # (and on ext4 it drops the reserved blocks)
                return size
            except OSError as e:
                self._fail(e)
        self._size = size
        return size

    def flush(self) -> None:
        """Nothing is buffered here (HDF5's flush has written through ``pwrite`` already)."""

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self.fd)
            finally:
                super().close()

    # fastdyn -------------------------------------------------------------------------------
    def _fail(self, e: OSError) -> None:
        self.error = e
        self._size = os.fstat(self.fd).st_size

    def reserve(self, nbytes: int) -> None:
        """Have the file system allocate ``nbytes`` beyond the current end (the size is
        unchanged): OSError (ENOSPC, EDQUOT, EFBIG) when it cannot, before anything is written.
        A file system without ``fallocate`` (EOPNOTSUPP) is left to the writes themselves."""
        fallocate = _fallocate()
        if fallocate is None or nbytes <= 0 or self.error is not None:
            return
        end = os.fstat(self.fd).st_size
        if fallocate(self.fd, _FALLOC_FL_KEEP_SIZE, end, nbytes) != 0:
            code = ctypes.get_errno()
            if code in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV):
                return
            raise OSError(code, os.strerror(code), self.path)

    def reserved(self) -> int:
        """Bytes the file system holds for this file beyond its end (earlier :meth:`reserve`
        calls): free space for the next write that ``statvfs`` counts as used."""
        st = os.fstat(self.fd)
        return max(0, getattr(st, "st_blocks", 0) * 512 - st.st_size)

    def sync(self) -> None:
        """fsync the descriptor (a write error found here is recorded like any other)."""
        if self.error is None:
            try:
                os.fsync(self.fd)
            except OSError as e:
                self._fail(e)


def open_failstop(path: str | os.PathLike, mode: str) -> tuple[h5py.File, FailStopFile]:
    """``h5py.File`` in ``mode`` ("w" or "r+", ``libver="latest"``) over a :class:`FailStopFile`,
    and that file object (its ``error`` says whether a write failed)."""
    io = FailStopFile(path, create=mode == "w")
    try:
        return h5py.File(io, mode, libver="latest"), io
    except BaseException:
        io.close()
        raise
