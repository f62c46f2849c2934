"""⑤ A file as of its last flush, for readers, without writing it: the bytes of the file with the
old bytes of its undo journal (:mod:`fastdyn.h5.undo`) shown in place of the regions a cut-off
close rewrote.

:func:`open_view` returns a read-only file object for h5py's ``fileobj`` driver
(``h5py.File(view, "r")``) when a journal applies, else None (read the file itself). Nothing is
written, locked or deleted, so any number of readers, on a read-only mount too, see the same
file; only the writer, ``fastdyn repair`` and ``--resume`` put the old bytes back on the disk
(:func:`fastdyn.h5.undo.recover`, under the writer lock).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from . import undo
from .fd_file import FdFile


class RolledBack(FdFile):
    """The file at ``path`` read through ``fd``, with ``regions``' old bytes over its own; its
    size is where the inside copy of the journal starts (HDF5 addresses nothing past it)."""

    def __init__(self, path: Path, fd: int, found: undo.Found):
        super().__init__()
        self.path, self.fd, self.where = path, fd, found.where
        self.regions = [(at, old) for at, old, _new in found.regions or []]
        size = os.fstat(fd).st_size
        self.size = size if found.inside_at is None else found.inside_at
        self.pos = 0

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def pread(self, n: int, at: int) -> bytes:
        """``n`` bytes from ``at`` (fewer at the end), the journal's old bytes laid over."""
        n = max(0, min(n, self.size - at))
        buf = bytearray(os.pread(self.fd, n, at))
        for off, old in self.regions:  # (one region's bytes never overlap another's in effect)
            lo, hi = max(off, at), min(off + len(old), at + len(buf))
            if lo < hi:
                buf[lo - at : hi - at] = old[lo - off : hi - off]
        return bytes(buf)

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        data = self.pread(len(view), self.pos)
        view[: len(data)] = data
        self.pos += len(data)
        return len(data)

    def mapped(self) -> mmap.mmap:
        """A private copy-on-write map of the view (pages the journal touches copied, the rest
        shared with the page cache). OSError/ValueError where files cannot be mapped."""
        m = mmap.mmap(self.fd, self.size, access=mmap.ACCESS_COPY)
        for off, old in self.regions:
            m[off : off + len(old)] = old
        return m

    def close(self) -> None:
        if not self.closed:
            fd, self.fd = self.fd, -1
            try:
                os.close(fd)
            finally:
                super().close()


def open_view(path: str | os.PathLike) -> tuple[RolledBack | None, undo.Found]:
    """(the view of ``path`` as of its last flush, what was found) when a copy of its journal
    applies; (None, what was found) otherwise. OSError when the file cannot be opened."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        found = undo.find(fd, p)
    except BaseException:
        os.close(fd)
        raise
    if found.regions is None:
        os.close(fd)
        return None, found
    return RolledBack(p, fd, found), found
