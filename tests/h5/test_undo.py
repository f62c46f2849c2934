"""The undo journal of a close (fastdyn.h5.undo): two copies (inside the file, past what HDF5
addresses, and ``.NAME.undo`` beside it), each with its own CRC-32; either good one puts the old
bytes back, also over a put-back cut off part-way; a copy that is damaged, not a regular file,
or too large is never applied (nor opened), and never costs the file."""

from __future__ import annotations

import os
import threading

from fastdyn.h5 import undo


def _file(tmp_path, data: bytes):
    p = tmp_path / "run.h5"
    p.write_bytes(data)
    return p


def _cut_off_close(tmp_path, size=4096):
    """A file whose close wrote its journal and then rewrote its regions part-way (the first
    whole, the second torn after 200 bytes, the third not at all): (path, old bytes, inside_at)."""
    before = os.urandom(size)
    p = _file(tmp_path, before)
    new = [(48, os.urandom(131)), (1000, os.urandom(512)), (0, os.urandom(48))]
    fd = os.open(p, os.O_RDWR)
    try:
        undo.write(p, fd, size, [(at, before[at : at + len(b)], b) for at, b in new])
        os.pwrite(fd, new[0][1], 48)
        os.pwrite(fd, new[1][1][:200], 1000)
    finally:
        os.close(fd)
    return p, before, size


def test_recover_puts_the_old_bytes_back_and_drops_both_copies(tmp_path):
    p, before, n = _cut_off_close(tmp_path)
    assert p.stat().st_size > n and undo.journal_path(p).exists() and undo.pending(p)
    assert undo.recover(p) is True
    assert p.read_bytes() == before and not undo.journal_path(p).exists()
    assert not undo.pending(p) and undo.recover(p) is False  # nothing left to do


def test_a_put_back_cut_off_part_way_is_put_back_again(tmp_path):
    """A kill tearing a write of the put-back leaves old bytes, then new ones, in one region:
    neither "new up to a point, then old" nor anything else the former check accepted."""
    p, before, _n = _cut_off_close(tmp_path)
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, before[48:108], 48)  # the first region: old for 60 bytes, then new
    os.pwrite(fd, before[1000:1100], 1000)  # the second: old, new, then old again
    os.close(fd)
    assert undo.recover(p) is True and p.read_bytes() == before


def test_either_good_copy_takes_the_close_back(tmp_path):
    """``.NAME.undo`` emptied, cut off, bit-flipped or gone: the copy inside the file; the copy
    inside damaged: the one beside it."""
    for how in ("empty", "cut", "flip", "gone", "inside"):
        d = tmp_path / how
        d.mkdir()
        p, before, n = _cut_off_close(d)
        j = undo.journal_path(p)
        blob = j.read_bytes()
        if how == "empty":
            j.write_bytes(b"")
        elif how == "cut":
            j.write_bytes(blob[: len(blob) // 2])
        elif how == "flip":
            j.write_bytes(blob[:300] + bytes([blob[300] ^ 4]) + blob[301:])
        elif how == "gone":
            j.unlink()
        else:
            with open(p, "r+b") as fh:
                fh.seek(n + 300)
                b = fh.read(1)
                fh.seek(n + 300)
                fh.write(bytes([b[0] ^ 4]))
        fd = os.open(p, os.O_RDONLY)
        found = undo.find(fd, p)
        os.close(fd)
        assert found.regions is not None, how
        assert (found.where == "inside the file") == (how != "inside"), how
        assert undo.recover(p) is True, how
        assert p.read_bytes() == before and not os.path.lexists(j), how


def test_no_good_copy_leaves_everything_as_it_is(tmp_path):
    """Both copies damaged: nothing applied, nothing deleted (the evidence stays)."""
    p, _before, n = _cut_off_close(tmp_path)
    j = undo.journal_path(p)
    j.write_bytes(j.read_bytes()[:-1])
    with open(p, "r+b") as fh:
        fh.seek(n + 20)
        fh.write(b"\xff")
    torn = p.read_bytes()
    assert undo.recover(p) is False
    assert p.read_bytes() == torn and j.exists()
    fd = os.open(p, os.O_RDONLY)
    found = undo.find(fd, p)
    os.close(fd)
    assert found.regions is None and len(found.problems) == 2, found.problems


def test_a_journal_that_is_no_regular_file_is_refused_without_opening_it(tmp_path):
    """A FIFO (a read would block for ever), a link to /dev/zero (a read would never end) and a
    sparse 1 TiB file: each one phrase, found from ``os.lstat`` alone, and the copy inside the
    file takes the close back."""
    for kind in ("fifo", "zero", "huge"):
        d = tmp_path / kind
        d.mkdir()
        p, before, _n = _cut_off_close(d)
        j = undo.journal_path(p)
        j.unlink()
        if kind == "fifo":
            os.mkfifo(j)
        elif kind == "zero":
            j.symlink_to("/dev/zero")
        else:
            with open(j, "wb") as fh:
                fh.truncate(1 << 40)
        done: list = []
        t = threading.Thread(
            target=lambda out=done, at=p: out.append(undo.read_beside(at, 4096)), daemon=True
        )
        t.start()
        t.join(10)  # (a blocking open of the FIFO would never return)
        assert done, kind
        blob, why = done[0]
        assert blob is None and why is not None and str(j) in why, (kind, why)
        fd = os.open(p, os.O_RDONLY)
        found = undo.find(fd, p)
        os.close(fd)
        assert found.regions is not None and found.beside == "unusable", kind
        assert undo.recover(p) is True and p.read_bytes() == before, kind


def test_a_journal_of_another_file_is_not_applied(tmp_path):
    """A new run at the same path (a region holding neither the old nor the new bytes): the
    copy beside it is dropped by recover, and the file left alone."""
    before = os.urandom(2048)
    p = _file(tmp_path, before)
    fd = os.open(p, os.O_RDWR)
    undo.write(p, fd, 2048, [(10, before[10:110], b"n" * 100), (500, before[500:600], b"m" * 100)])
    os.close(fd)
    replaced = os.urandom(2048)
    p.write_bytes(replaced)  # (no copy inside the new file)
    assert undo.recover(p) is False
    assert p.read_bytes() == replaced and not undo.journal_path(p).exists()


def test_a_region_rewritten_twice_in_one_flush_qualifies(tmp_path):
    before = os.urandom(256)
    p = _file(tmp_path, before)
    regions = [(0, before[:16], b"a" * 16), (8, before[8:24], b"b" * 16)]
    with open(p, "r+b") as fh:
        fh.write(b"a" * 8 + b"b" * 16)  # both written, the second over the first's end
    fd = os.open(p, os.O_RDONLY)
    assert undo.qualifies(fd, regions)
    os.close(fd)
    other = [(0, before[:16], b"c" * 16)]
    fd = os.open(p, os.O_RDONLY)
    assert not undo.qualifies(fd, other)
    os.close(fd)


def test_the_journal_lies_beside_the_file_a_symlink_points_to(tmp_path):
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "run.h5"
    real.write_bytes(b"0" * 64)
    link = tmp_path / "link.h5"
    link.symlink_to(real)
    assert undo.journal_path(link) == tmp_path / "data" / ".run.h5.undo"
