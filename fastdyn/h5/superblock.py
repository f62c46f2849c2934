"""⑤ The superblock's status flags (what ``h5clear --status`` clears), and HDF5's lookup3 checksum.

A version 2/3 superblock (the one ``libver="latest"`` writes) sits at offset 0: the signature,
version, sizes of offsets and lengths, the status flags byte (1: open for write, 4: open for SWMR
write), four addresses and a lookup3 checksum of everything before it.
"""

from __future__ import annotations

import os

_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_M32 = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M32


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    for x, y, z, k in (
        (0, 2, 1, 4),
        (1, 0, 2, 6),
        (2, 1, 0, 8),
        (0, 2, 1, 16),
        (1, 0, 2, 19),
        (2, 1, 0, 4),
    ):
        v = [a, b, c]
        v[x] = ((v[x] - v[y]) & _M32) ^ _rot(v[y], k)
        v[y] = (v[y] + v[z]) & _M32
        a, b, c = v
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    for x, y, k in (
        (2, 1, 14),
        (0, 2, 11),
        (1, 0, 25),
        (2, 1, 16),
        (0, 2, 4),
        (1, 0, 14),
        (2, 1, 24),
    ):
        v = [a, b, c]
        v[x] = ((v[x] ^ v[y]) - _rot(v[y], k)) & _M32
        a, b, c = v
    return c


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``: the checksum HDF5 puts on its version ≥ 2 metadata."""
    n = len(data)
    a = b = c = (0xDEADBEEF + n + initval) & _M32
    i = 0
    while n - i > 12:
        a = (a + int.from_bytes(data[i : i + 4], "little")) & _M32
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & _M32
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & _M32
        a, b, c = _mix(a, b, c)
        i += 12
    if n - i == 0:
        return c
    rest = data[i:] + bytes(12 - (n - i))
    a = (a + int.from_bytes(rest[0:4], "little")) & _M32
    b = (b + int.from_bytes(rest[4:8], "little")) & _M32
    c = (c + int.from_bytes(rest[8:12], "little")) & _M32
    return _final(a, b, c)


def clear_open_flags(path: str | os.PathLike) -> bool:
    """Clear the "file is open for (SWMR) write" flags a killed writer leaves in a version 2/3
    superblock (at offset 0, as fastdyn writes it), re-checksummed, and raise its end-of-file
    address to the file's size where it is below it (what ``h5clear --increment`` does: an
    SWMR writer stopped mid-flush can leave objects written past the address its superblock
    last recorded). Returns whether the flags were set. Raises OSError/ValueError for a file that
    is not such an HDF5 file."""
    with open(path, "r+b") as fh:
        head = bytearray(fh.read(12 + 4 * 8 + 4))
        if head[:8] != _SIGNATURE or len(head) < 16:
            raise ValueError("not an HDF5 file with its superblock at offset 0")
        if head[8] not in (2, 3):
            return False  # older superblocks keep no such flags
        so = head[9]
        end = 12 + 4 * so
        head += fh.read(max(0, end + 4 - len(head)))
        if int.from_bytes(head[end : end + 4], "little") != lookup3(bytes(head[:end])):
            raise ValueError("damaged superblock (checksum mismatch)")
        if head[11] == 0:
            return False
        head[11] = 0
        size = os.fstat(fh.fileno()).st_size
        at = 12 + 2 * so
        if int.from_bytes(head[at : at + so], "little") < size:
            head[at : at + so] = size.to_bytes(so, "little")
        head[end : end + 4] = lookup3(bytes(head[:end])).to_bytes(4, "little")
        fh.seek(0)
        fh.write(bytes(head[: end + 4]))
        fh.flush()
        os.fsync(fh.fileno())
    return True


WRITE_ACCESS, SWMR_WRITE_ACCESS = 1, 4


def mark_write_access(data: bytes | memoryview) -> bytes | None:
    """A superblock (``data``, written at offset 0) that says "open for SWMR write" without "open
    for write", with the write bit added and its checksum redone; None for anything else. HDF5
    leaves that bit out through a file-object driver, and SWMR readers then refuse the file
    ("file is not already open for SWMR writing"); the sec2 driver sets both (flags 5)."""
    if len(data) < 16 or bytes(data[:8]) != _SIGNATURE or data[8] not in (2, 3):
        return None
    flags = data[11]
    if not flags & SWMR_WRITE_ACCESS or flags & WRITE_ACCESS:
        return None
    end = 12 + 4 * data[9]
    if len(data) < end + 4:
        return None
    head = bytearray(data)
    if int.from_bytes(head[end : end + 4], "little") != lookup3(bytes(head[:end])):
        return None
    head[11] = flags | WRITE_ACCESS
    head[end : end + 4] = lookup3(bytes(head[:end])).to_bytes(4, "little")
    return bytes(head)


def end_address(data: bytes | memoryview) -> int | None:
    """The end-of-file address a version 2/3 superblock ``data`` records, or None."""
    if len(data) < 16 or bytes(data[:8]) != _SIGNATURE or data[8] not in (2, 3):
        return None
    so = data[9]
    at = 12 + 2 * so
    if len(data) < at + so:
        return None
    return int.from_bytes(data[at : at + so], "little")


def with_end_address(data: bytes | memoryview, end: int) -> bytes | None:
    """The superblock ``data`` with its end-of-file address raised to at least ``end`` (checksum
    redone); None when ``data`` is no version 2/3 superblock or already covers ``end``."""
    if len(data) < 16 or bytes(data[:8]) != _SIGNATURE or data[8] not in (2, 3):
        return None
    so = data[9]
    at, stop = 12 + 2 * so, 12 + 4 * so
    if len(data) < stop + 4 or int.from_bytes(data[at : at + so], "little") >= end:
        return None
    head = bytearray(data[: stop + 4])
    head[at : at + so] = end.to_bytes(so, "little")
    head[stop : stop + 4] = lookup3(bytes(head[:stop])).to_bytes(4, "little")
    return bytes(head) + bytes(data[stop + 4 :])
