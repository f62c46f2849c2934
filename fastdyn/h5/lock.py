"""⑤ One writer per output file: a lock file beside it, held for the whole run.

HDF5 holds no lock in SWMR-write mode, so two processes could both write one file (a second
``--resume`` of a file still being written) and leave it unreadable. :class:`WriterLock` takes an
exclusive ``fcntl.flock`` on ``.NAME.lock`` next to ``NAME`` for as long as the writer lives and
records ``pid host`` in it. The operating system drops the lock when the process dies, so the
file a ``kill -9`` leaves behind is stale and the next writer simply takes it over; a live holder
makes the second writer fail at once with :class:`WriterBusy` naming its pid and host. (On file
systems without flock support, e.g. some NFS mounts, the lock is only as good as their flock.)
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path


class WriterBusy(BlockingIOError):
    """Another live process writes this output (message: one line naming its pid and host)."""


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of output ``path``: ``.NAME.lock`` in the same directory."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


#: locks this process holds, by lock file: a second acquire in the same process (the CLI's resume
#: checks, then the writer) shares the first one instead of conflicting with it
_HELD: dict[str, list] = {}


class WriterLock:
    """Exclusive lock of output ``path`` (``acquire`` raises :class:`WriterBusy` when another
    process holds it; re-entrant within one process)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.file = lock_path(path)
        self.fd: int | None = None
        self._key = str(self.file.resolve())

    def acquire(self) -> WriterLock:
        held = _HELD.get(self._key)
        if held is not None:
            held[1] += 1
            self.fd = held[0]
            return self
        for _ in range(100):  # retried only if the holder removed the file between open and flock
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").split()
                os.close(fd)
                who = f"pid {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process"
                raise WriterBusy(
                    f"{self.path}: being written by {who} (lock {self.file}); wait for that run to end or stop it"
                ) from None
            try:
                same = os.stat(self.file).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # locked an unlinked file: its holder just released it; take the new one
        else:  # pragma: no cover — a lock file that keeps disappearing
            raise WriterBusy(f"{self.path}: cannot take the lock {self.file}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self.fd = fd
        _HELD[self._key] = [fd, 1]
        return self

    def release(self) -> None:
        """Drop this hold; the last one removes the lock file (while still holding it) and
        unlocks. Idempotent."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        held = _HELD.get(self._key)
        if held is not None:
            held[1] -= 1
            if held[1] > 0:
                return
            del _HELD[self._key]
        try:
            self.file.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
