"""⑤ One writer per output file: a lock on its name and a lock on the file itself.

HDF5 holds no lock in SWMR-write mode, so two processes could both write one file (a second
``--resume`` of a file still being written) and leave it unreadable. :class:`WriterLock` holds,
for as long as the writer lives:

- an exclusive ``fcntl.flock`` on ``.NAME.lock`` next to the output's resolved path (a symlink
  leads to its target's lock), with ``pid host`` recorded in it;
- an exclusive open-file-description lock (``F_OFD_SETLK``, one byte at offset 2^62, far past
  any data) on the output file itself, and on each file the writer renames into its place. It
  follows the inode, not the name: a hard link to a running file, or a lock file someone
  deleted, still meets it. The holder is also written to the file's ``user.fastdyn.writer``
  extended attribute where the file system keeps them, so the refusal can name it.

The operating system drops both when the process dies, so what a ``kill -9`` leaves behind is
stale and the next writer takes it over; a live holder makes a second writer fail at once with
:class:`WriterBusy` naming its pid and host. (On file systems without flock or OFD lock support,
e.g. some NFS mounts, the lock is only as good as theirs.)
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import struct
from pathlib import Path

#: where the inode lock sits: one byte far beyond any data, so it never meets a reader's range
_INODE_LOCK_AT = 1 << 62
_XATTR = "user.fastdyn.writer"


class WriterBusy(BlockingIOError):
    """Another live process writes this output (message: one line naming its pid and host)."""


class NotRegularFile(ValueError):
    """The output path names something other than a regular file (a device, a FIFO, a socket,
    a directory): a writer never replaces it (message: one line naming the path and its kind)."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def non_regular_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` (followed through links) is when it exists and is not a regular file, e.g.
    "a character device" for ``/dev/null``; None for a regular file or a missing path."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def refuse_non_regular(path: str | os.PathLike) -> None:
    """Raise :class:`NotRegularFile` unless ``path`` is a regular file or missing: an output
    written over ``/dev/null`` or a FIFO would replace the node itself (as root: the host's)."""
    kind = non_regular_kind(path)
    if kind is not None:
        raise NotRegularFile(f"{path}: is {kind}, not a regular file; give a file path")


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of output ``path``: ``.NAME.lock`` beside the file ``path`` resolves to."""
    p = Path(os.path.realpath(path))
    return p.with_name(f".{p.name}.lock")


def _holder() -> str:
    return f"{os.getpid()} {socket.gethostname()}"


def _who(words: list[str]) -> str:
    return f"pid {words[0]} on {words[1]}" if len(words) >= 2 else "another process"


#: inode locks this process holds: (st_dev, st_ino) → [fd, holds, announced, generation]
_INODES: dict[tuple[int, int], list] = {}


def _ofd_lock(fd: int) -> bool:
    """Take the exclusive inode lock on ``fd`` (dropped when the description is closed); False
    when another open file description holds it. True where it cannot be taken at all (no OFD
    locks on this platform or file system, or a read-only descriptor): the name lock remains."""
    cmd = getattr(fcntl, "F_OFD_SETLK", None)
    if cmd is None:
        return True
    arg = struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, _INODE_LOCK_AT, 1, 0)
    try:
        fcntl.fcntl(fd, cmd, arg)
    except OSError as e:
        return e.errno not in (errno.EAGAIN, errno.EACCES)  # those two: held elsewhere
    return True


#: locks this process holds, by lock file: a second acquire in the same process (the CLI's resume
#: checks, then the writer) shares the first one instead of conflicting with it
_HELD: dict[str, list] = {}


def _unhold(key: tuple[int, int], gen: int, force: bool = False) -> None:
    """One hold fewer on inode ``key`` (all of them with ``force``); the last closes its
    descriptor. ``gen`` tells this hold from a later one on a reused inode number."""
    held = _INODES.get(key)
    if held is None or held[3] != gen:
        return
    held[1] = 0 if force else held[1] - 1
    if held[1] == 0:
        del _INODES[key]
        if held[2]:
            try:
                os.removexattr(held[0], _XATTR)
            except (OSError, AttributeError):
                pass
        os.close(held[0])  # closing the description drops its OFD lock


_GEN = [0]


def inode_key(path: str | os.PathLike) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file ``path`` names, or None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _fs_type(path: str | os.PathLike) -> str:
    """The file system type of the mount holding ``path`` (``/proc/self/mounts``), or ""."""
    real = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                f = line.split()
                if len(f) < 3:
                    continue
                mnt = f[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(
                    best
                ):
                    best, kind = mnt, f[2]
    except OSError:
        pass
    return kind


def holder(path: str | os.PathLike) -> str | None:
    """``"pid N on HOST"`` (or "another process") when a live writer holds ``path``, else None,
    found without taking anything: the inode lock by ``F_OFD_GETLK``, the name lock in
    ``/proc/locks``. A reader asking never gets in the way of a writer starting."""
    words: list[str] = []
    try:  # a regular file only: opening a FIFO would block
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            cmd = getattr(fcntl, "F_OFD_GETLK", None)
            if cmd is not None:
                arg = struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, _INODE_LOCK_AT, 1, 0)
                got = fcntl.fcntl(fd, cmd, arg)
                if struct.unpack("hhxxxxqqixxxx", got)[0] != fcntl.F_UNLCK:
                    try:
                        words = os.getxattr(fd, _XATTR).decode(errors="replace").split()
                    except (OSError, AttributeError):
                        words = []
                    return _who(words or _lock_file_words(path))
        except OSError:
            pass
        finally:
            os.close(fd)
    lock = lock_path(path)
    try:
        st = os.stat(lock)
        with open("/proc/locks") as fh:
            table = fh.read().splitlines()
    except OSError:
        return None
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table:
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5] == where:
            return _who(_lock_file_words(path) or [f[4], "this host"])
    return None


def _lock_file_words(path: str | os.PathLike) -> list[str]:
    try:
        return lock_path(path).read_text(errors="replace").split()
    except OSError:
        return []


#: temporary siblings a writer makes beside ``NAME`` (always under the lock): a new file before
#: its rename, a resume's copy, a compaction's copy; ``-PID`` follows each
_SIBLINGS = (".tmp-", ".resume-", ".compact-")


def remove_stale(path: str | os.PathLike) -> list[str]:
    """Remove the temporary siblings of ``path`` (and of the file it resolves to) that a killed
    writer left; call only while holding its lock, which every maker of them holds. Returns the
    names removed."""
    gone = []
    for p in {Path(path), Path(os.path.realpath(path))}:
        try:
            names = os.listdir(p.parent if str(p.parent) else ".")
        except OSError:
            continue
        for name in names:
            for kind in _SIBLINGS:
                head = f".{p.name}{kind}"
                if name.startswith(head) and name[len(head) :].isdigit():
                    if int(name[len(head) :]) == os.getpid():
                        continue
                    try:
                        (p.parent / name).unlink()
                        gone.append(name)
                    except OSError:
                        pass
    return gone


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` lives on this host (one we may not signal lives too)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_stale_beside(path: str | os.PathLike) -> list[str]:
    """Remove, in the directory of ``path``, the temporary siblings of OTHER files that a killed
    writer left (a ``.NAME.compact-PID`` copy of a kill inside the final compaction, say):
    those whose PID is no live process on this host and whose file no live writer holds
    (:func:`holder`: neither its inode lock nor its name lock). Never on NFS, where the maker may
    live on another host under the same PID. For writers only (the next ``simulate`` into that
    directory): readers write nothing. Returns the names removed."""
    where = Path(path).parent if str(Path(path).parent) else Path(".")
    if _fs_type(where).startswith("nfs"):
        return []
    try:
        names = os.listdir(where)
    except OSError:
        return []
    gone = []
    own = Path(path).name
    for name in names:
        for kind in _SIBLINGS:
            head, sep, pid = name.rpartition(kind)
            if not (sep and head.startswith(".") and len(head) > 1 and pid.isdigit()):
                continue
            target = head[1:]
            if target == own or _pid_alive(int(pid)) or holder(where / target) is not None:
                continue
            try:
                (where / name).unlink()
                gone.append(name)
            except OSError:
                pass
    return gone


class WriterLock:
    """Exclusive lock of output ``path`` (``acquire`` raises :class:`WriterBusy` when another
    process holds it; re-entrant within one process). ``announce=False``: a probe, which leaves
    the file's extended attributes alone."""

    def __init__(self, path: str | os.PathLike, announce: bool = True):
        self.path = Path(path)
        self.announce = announce
        self.file = lock_path(path)
        self.fd: int | None = None
        self._key = str(self.file)
        self._inodes: list[tuple[tuple[int, int], int]] = []  # (inode, generation)

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
                who = _who(holder)
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
        os.pwrite(fd, f"{_holder()}\n".encode(), 0)
        self.fd = fd
        _HELD[self._key] = [fd, 1]
        if self.announce:  # a writer; a reader's probe writes nothing
            remove_stale(self.path)
            remove_stale_beside(self.path)
        if self.path.exists():
            try:
                self.hold(self.path, announce=self.announce)
            except BaseException:
                self.release()
                raise
        return self

    def hold(self, target: str | os.PathLike, announce: bool = True) -> None:
        """Also lock the inode of the file ``target`` (the output, or the file about to be
        renamed into its place) until :meth:`release`; WriterBusy when another writer holds it.
        ``announce``: record this process in the file's extended attribute (a writer's own file)."""
        if _fs_type(target).startswith("nfs"):
            return  # NFS clients emulate HDF5's flock as whole-file fcntl locks: they would meet
            # this one and refuse every reader of the running file; the name lock remains
        try:
            fd = os.open(target, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            try:  # a read-only file: no exclusive lock through this descriptor (nor writes)
                fd = os.open(target, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                return  # gone, or not ours to open: the caller's own checks report it
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        held = _INODES.get(key)
        if held is not None:
            os.close(fd)
            held[1] += 1
            self._inodes.append((key, held[3]))
            return
        if not _ofd_lock(fd):
            try:
                words = os.getxattr(fd, _XATTR).decode(errors="replace").split()
            except (OSError, AttributeError):
                words = []
            if not words:
                try:
                    words = lock_path(target).read_text(errors="replace").split()
                except OSError:
                    words = []
                if words[:2] == _holder().split():  # our own, after the holder's was deleted
                    words = []
            os.close(fd)
            raise WriterBusy(
                f"{self.path}: being written by {_who(words)} (it holds a lock on the file itself); wait for that run to end or stop it"
            )
        if announce:
            try:
                os.setxattr(fd, _XATTR, _holder().encode())
            except (OSError, AttributeError):
                pass  # a file system without user extended attributes: the holder goes unnamed
        _GEN[0] += 1
        _INODES[key] = [fd, 1, announce, _GEN[0]]
        self._inodes.append((key, _GEN[0]))

    def drop(self, key: tuple[int, int] | None) -> None:
        """Let go of the inode lock on ``key`` = (st_dev, st_ino), a file this process has just
        replaced (every hold of it in this process): its descriptor would keep the unlinked
        file's space (and an NFS ``.nfs`` file) for the whole run."""
        held = _INODES.get(key) if key is not None else None
        if held is not None:
            _unhold(key, held[3], force=True)

    def release(self) -> None:
        """Drop this hold; the last one removes the lock file (while still holding it) and
        unlocks. Idempotent."""
        if self.fd is None:
            return
        for key, gen in self._inodes:
            _unhold(key, gen)
        self._inodes.clear()
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
