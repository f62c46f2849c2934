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
``ulimit -f``) is ignored from the first writer on, so that limit is an EFBIG write error like any
other instead of a core dump.

Cost: the ``fileobj`` driver calls back into Python for each I/O: one save of eight series (the
benchmark's trained run) makes 16 writes and a flush, which this object turns into 2-4 ``pread``/``pwrite`` pairs
(held rewrites close together go as one). That save takes 0.14 ms against 0.08 ms through the
``sec2`` driver (``bench/h5_append.py``, the flush 0.085 against 0.035 ms).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
import signal
import threading

import h5py

from . import undo
from .fd_file import FdFile
from .superblock import end_address, mark_write_access, with_end_address

_FALLOC_FL_KEEP_SIZE = 1
#: rewrites inside the file up to this size are metadata (object headers, indexes, heaps): held
#: until the flush's end, and their old bytes put back if one fails part-way; larger ones are
#: chunks of rows, written at once
_UNDO_MAX = 64 << 10
#: held rewrites that follow each other in the file with at most this many bytes between them are
#: written as one (the bytes between as they are): one save of eight series rewrites eight
#: object headers within 7 KiB and eight chunks within 70 KiB, 2 + 2 system calls instead of
#: 16 + 16 (each ≈ 2-3 µs)
_GAP = 4 << 10
#: the most bytes such a merged write spans
_RUN_MAX = 256 << 10
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
    default action). From the main thread through :mod:`signal`; from any other (a Dask worker
    runs points in threads) through libc's ``signal``, which sets the same process-wide action."""
    if not hasattr(signal, "SIGXFSZ"):
        return
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(int(signal.SIGXFSZ), ctypes.c_void_p(1))  # SIG_IGN is (void (*)(int)) 1
    except (OSError, AttributeError):
        pass


class FailStopFile(FdFile):
    """A read/write binary file for h5py's ``fileobj`` driver that stops writing at the first
    failure (module docstring). ``create``: create or truncate ``path``; else it must exist.

    Writes into new space (at or past the file's size at the last flush) go to the disk at once;
    writes up to 64 KiB that change bytes already there (metadata rewritten in place) are held
    in memory and written, in order, when HDF5 flushes. So the in-place pointers reach
    the disk only after the new blocks they point to, whatever order HDF5 wrote them in: a
    failure in between leaves the file as of the last flush plus unreferenced new blocks."""

    def __init__(self, path: str | os.PathLike, create: bool = False):
        super().__init__()
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT | os.O_TRUNC
        self.path = os.fspath(path)
        self.fd = os.open(self.path, flags, 0o666)  # the umask applies, as for h5py's own files
        self.pos = 0
        #: the first write error, or None while every write has reached the disk
        self.error: OSError | None = None
        self._mem: list[tuple[int, bytes]] = []  # writes not on the disk (yet), in order
        self._mem_end = 0  # the end of the furthest of them
        self._trunc: int | None = None  # a size HDF5 asked for, applied at the next flush
        self._base = os.fstat(self.fd).st_size  # the size at the last flush
        self._size = 0  # the size HDF5 sees after a failure
        self._superblock: bytes | None = None  # as last written at offset 0
        self._covered = 0  # the end-of-file address that superblock records
        #: where a flush that rewrites several places first keeps their old bytes
        #: (:mod:`fastdyn.h5.undo`); None: no journal (appends need none)
        self.journal: str | os.PathLike | None = None
        self._journal_at = 0  # where the inside copy of the journal starts
        self._room = 0  # the file system holds the bytes up to here for this file (reserve)

    # io.RawIOBase (readable, seekable, fileno, tell: FdFile) ----------------------------------
    def writable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self.pos = offset
        elif whence == os.SEEK_CUR:
            self.pos += offset
        else:
            self.pos = self._end() + offset
        return self.pos

    def _end(self) -> int:
        """The size HDF5 sees: the disk's, with what is held in memory on top."""
        if self.error is not None:
            return self._size
        if self._trunc is not None:
            return self._trunc
        return max(os.fstat(self.fd).st_size, self._mem_end)

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        n = len(view)
        data = os.pread(self.fd, n, self.pos)
        if self.error is None and not self._mem and self._trunc is None:
            view[: len(data)] = data
            self.pos += len(data)
            return len(data)
        end = min(self.pos + n, self._end())
        got = max(0, end - self.pos)
        view[:got] = bytes(got)
        view[: min(len(data), got)] = data[:got]
        for off, blob in self._mem:  # later writes win: applied in order
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
        if self.error is None and (at >= self._base or n > _UNDO_MAX):
            # new space (nothing on disk points there yet), or a whole chunk of rows rewritten
            # in place: its flushed rows do not change, and a write torn by a failure is
            # verified and rebuilt (fastdyn.h5.torn); holding it would copy every append's chunk
            if self._put(at, data):
                self._cover(at + n)
        else:  # a rewrite in place (held until the flush), or anything after a failure
            self._mem.append((at, bytes(data)))
            self._mem_end = max(self._mem_end, at + n)
            if self.error is not None:
                self._size = max(self._size, at + n)
        self.pos = at + n
        return n

    def _run(self, held: list[tuple[int, bytes]], i: int) -> int:
        """The end of the run of held rewrites from ``held[i]`` that one write can carry: each
        after the one before it in the file (so the file's order is HDF5's), at most
        :data:`_GAP` bytes apart, all inside the file as of the last flush, the superblock
        alone, at most :data:`_RUN_MAX` bytes from the first byte to the last."""
        at, blob = held[i]
        end = at + len(blob)
        j = i + 1
        if at == 0 or end > self._base:
            return j
        while j < len(held):
            a, b = held[j]
            e = a + len(b)
            if a < end or a - end > _GAP or e > self._base or e - at > _RUN_MAX:
                break
            end, j = e, j + 1
        return j

    def _merged(
        self, held: list[tuple[int, bytes]], i: int, j: int
    ) -> tuple[memoryview, bytes] | None:
        """The rewrites ``held[i:j]`` (a :meth:`_run`) as one block, the bytes between them as
        the disk holds them now, and the block's old bytes (for an undo); None when the disk
        does not hold all of them."""
        at = held[i][0]
        n = held[j - 1][0] + len(held[j - 1][1]) - at
        old = os.pread(self.fd, n, at)
        if len(old) != n:
            return None
        block = bytearray(old)
        for a, b in held[i:j]:
            block[a - at : a - at + len(b)] = b
        return memoryview(block), old

    def _put(self, at: int, data: memoryview | bytes) -> bool:
        """Write ``data`` at ``at``; on a failure record it, put back the bytes a partial
        in-place write replaced (best effort), keep ``data`` in memory, and return False."""
        n = len(data)
        old = b""
        if 0 < n <= _UNDO_MAX and at < self._base:
            old = os.pread(self.fd, n, at)  # rewritten in place: kept for an undo
        return self._write_at(at, data, old)

    def _write_at(self, at: int, data: memoryview | bytes, old: bytes) -> bool:
        """:meth:`_put` with the bytes to put back after a partial write given (``old``)."""
        n = len(data)
        done = 0
        try:
            while done < n:
                k = os.pwrite(self.fd, data[done:], at + done)
                if k <= 0:
                    raise OSError(errno.EIO, "write made no progress")
                done += k
        except OSError as e:
            if 0 < done and old:
                try:
                    os.pwrite(self.fd, old[:done], at)
                except OSError:
                    pass
            self._fail(e)
            self._mem.append((at, bytes(data)))
            self._mem_end = max(self._mem_end, at + n)
            self._size = max(self._size, at + n)
            return False
        return True

    def _cover(self, end: int) -> None:
        """Keep the superblock's end-of-file address at or past every byte written (HDF5 writes
        it after the objects it covers, so a file stopped between the two had objects past its
        recorded end, which readers refuse: "addr overflow")."""
        if self._superblock is None or end <= self._covered:
            return
        raised = with_end_address(self._superblock, end)
        if raised is None:  # it covers ``end`` already (or is no superblock we know)
            self._covered = end
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
        if self.error is not None:
            self._size = size
        elif size != self._end():  # HDF5 asks at every flush; mostly for the size it has
            self._trunc = size  # applied after the held writes, at the flush
        return size

    def flush(self) -> None:
        """Write what is held (the in-place rewrites, in order), then a pending truncation;
        HDF5 calls this at the end of each of its flushes."""
        if self.error is not None or self.fd < 0:
            return
        held, self._mem, self._mem_end = self._mem, [], 0
        regions = self._journal(held)
        if regions is False:  # the journal could not be written: nothing rewritten, all held
            self._hold_failed(held)
            return
        i = 0
        while i < len(held):
            at, blob = held[i]
            j, old = i + 1, None
            if not regions:  # (a journaled close writes them one by one)
                j = self._run(held, i)
                merged = self._merged(held, i, j) if j > i + 1 else None
                if merged is None:
                    j = i + 1
                else:
                    blob, old = merged
            # (a failed one is kept in memory by _put)
            written = self._put(at, blob) if old is None else self._write_at(at, blob, old)
            if written:
                if at == 0:
                    self._superblock, self._covered = blob, 0
                self._cover(at + len(blob))
            if self.error is not None:  # this write, or the superblock's raise, failed
                if regions and undo.put_back(self.fd, regions):  # the rewrites so far taken
                    self._journal_done()  # back; the journal stays where they cannot be
                self._hold_failed(held if regions else held[j:])
                return
            i = j
        if regions:
            try:
                os.fsync(self.fd)  # every rewrite on the disk before the journal goes
            except OSError as e:
                self._fail(e)
                return  # the journal stays
            self._journal_done()
        if self._trunc is not None:
            size, self._trunc = self._trunc, None
            try:
                if os.fstat(self.fd).st_size != size:
                    self._room = 0
                    os.ftruncate(self.fd, size)  # (on ext4 this also drops reserved blocks)
            except OSError as e:
                self._fail(e)
                self._size = size
                return
        self._base = os.fstat(self.fd).st_size

    def close(self) -> None:
        if not self.closed:
            try:
                self.flush()
            finally:
                fd, self.fd = self.fd, -1
                try:
                    os.close(fd)
                finally:
                    super().close()  # (calls flush again: a no-op without a descriptor)

    def _journal(self, held: list[tuple[int, bytes]]) -> list[undo.Region] | bool | None:
        """With :attr:`journal` set and more than one place to rewrite: the old and new bytes of
        each, written to the journal first (:mod:`fastdyn.h5.undo`); False when that failed
        (recorded as the error); None when no journal is needed."""
        if self.journal is None or len(held) < 2:
            return None
        try:
            regions = []
            for at, blob in held:
                old = os.pread(self.fd, len(blob), at)
                n = len(old)  # (a rewrite that runs past the end: its part inside the file)
                regions.append((at, old, blob[:n]))
            # the inside copy goes past every byte HDF5 addresses or this flush writes
            ends = [os.fstat(self.fd).st_size, self._trunc or 0, self._covered]
            ends += [at + len(blob) for at, blob in held]
            ends += [end_address(blob) or 0 for at, blob in held if at == 0]
            self._journal_at = max(ends)
            undo.write(self.journal, self.fd, self._journal_at, regions)  # type: ignore[arg-type]
        except OSError as e:
            self._fail(e)
            return False
        return regions

    def _journal_done(self) -> None:
        """Drop both copies of the journal of the flush just over (best effort: a copy left
        behind by a failure here only takes the file back to this flush's start)."""
        self._room = 0  # (cutting the inside copy off may drop the reserved blocks)
        try:
            undo.done(self.journal, self.fd, self._journal_at)  # type: ignore[arg-type]
        except OSError as e:
            self._fail(e)

    def _hold_failed(self, rest: list[tuple[int, bytes]]) -> None:
        """After a failed write: ``rest`` (writes not on the disk) kept in memory, in order, for
        HDF5's reads."""
        self._mem = self._mem + rest
        self._mem_end = max((o + len(b) for o, b in self._mem), default=0)
        self._size = max(self._size, self._mem_end)

    # fastdyn -------------------------------------------------------------------------------
    def _fail(self, e: OSError) -> None:
        if self.error is None:
            self.error = e
            self._size = max(self._size, os.fstat(self.fd).st_size, self._mem_end)

    def reserve(self, nbytes: int) -> None:
        """Make sure ``nbytes`` more can be written past the current end: within the file-size
        limit (``ulimit -f``, which ``fallocate`` does not check), and allocated by the file
        system (``fallocate`` keeping the size; a full disk or a quota says so here). OSError
        (EFBIG, ENOSPC, EDQUOT) when not, before anything is written. A file system without
        ``fallocate`` (EOPNOTSUPP) is left to the writes themselves."""
        if nbytes <= 0 or self.error is not None:
            return
        end = os.fstat(self.fd).st_size
        if end + nbytes <= self._room:  # allocated by an earlier call (and under the limit)
            return
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and end + nbytes > limit:
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), self.path)
        fallocate = _fallocate()
        if fallocate is None:
            return
        while fallocate(self.fd, _FALLOC_FL_KEEP_SIZE, end, nbytes) != 0:
            code = ctypes.get_errno()
            if code == errno.EINTR:  # a signal arrived (tmpfs checks for one): try again
                continue
            if code in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV):
                return
            raise OSError(code, os.strerror(code), self.path)
        self._room = end + nbytes

    def holds(self, nbytes: int) -> bool:
        """Whether an earlier :meth:`reserve` left ``nbytes`` past the file's end allocated to
        it (no truncation since, no failed write): the next write of that many needs no new
        check. One ``fstat``; False where ``fallocate`` is not supported."""
        return self.error is None and os.fstat(self.fd).st_size + nbytes <= self._room

    def reserved(self) -> int:
        """Bytes the file system holds for this file beyond its end (earlier :meth:`reserve`
        calls): free space for the next write that ``statvfs`` counts as used."""
        st = os.fstat(self.fd)
        return max(0, getattr(st, "st_blocks", 0) * 512 - st.st_size)

    def sync(self) -> None:
        """Write what is held, then fsync (a write error found here is recorded like any other)."""
        self.flush()
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
