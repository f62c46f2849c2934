"""⑤ A raw binary file over an open descriptor with its own position: the part of
:class:`~fastdyn.h5.failstop.FailStopFile` (the writer's file) and
:class:`~fastdyn.h5.rollback.RolledBack` (a reader's view) that h5py's ``fileobj`` driver asks
for besides reading and seeking."""

from __future__ import annotations

import io


class FdFile(io.RawIOBase):
    """Readable and seekable, at position ``pos`` of descriptor ``fd`` (set by the subclass)."""

    fd: int
    pos: int

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def tell(self) -> int:
        return self.pos
