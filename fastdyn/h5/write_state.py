"""⑤ Whether a file's writer left it open: the superblock's "open for write" flags and the
live process holding the writer's lock (read by the reader and by ``fastdyn repair``)."""

from __future__ import annotations

import os

from .lock import holder


def open_flags_set(path: str | os.PathLike) -> bool:
    """Whether the superblock still says "open for write" (a live or killed writer)."""
    with open(path, "rb") as fh:
        head = fh.read(12)
    return (
        len(head) == 12 and head[:8] == b"\x89HDF\r\n\x1a\n" and head[8] in (2, 3) and head[11] != 0
    )


def writer_alive(path: str | os.PathLike) -> str | None:
    """``"pid N on HOST"`` when a live process writes the file, else None; asked without taking
    the writer's locks (:func:`fastdyn.h5.lock.holder`)."""
    return holder(path)
