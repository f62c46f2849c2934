"""The undo journal of a close (fastdyn.h5.undo): what it records comes back byte for byte, and
a journal cut off while it was written (before any rewrite) is dropped without touching the file."""

from __future__ import annotations

import os

from fastdyn.h5 import undo


def test_recover_puts_the_old_bytes_back_and_drops_the_journal(tmp_path):
    p = tmp_path / "run.h5"
    before = os.urandom(4096)
    p.write_bytes(before)
    regions = [(48, before[48:179]), (1000, before[1000:1512]), (0, before[:48])]
    undo.write(p, regions)
    torn = bytearray(before)
    torn[48:179] = bytes(131)  # the close rewrote two places, then the disk refused the rest
    torn[1000:1512] = b"\xff" * 512
    p.write_bytes(bytes(torn))
    assert undo.recover(p) is True
    assert p.read_bytes() == before
    assert not undo.journal_path(p).exists()
    assert undo.recover(p) is False  # nothing left to do


def test_a_cut_off_journal_is_dropped_and_the_file_left_alone(tmp_path):
    p = tmp_path / "run.h5"
    data = os.urandom(2048)
    p.write_bytes(data)
    st = p.stat()
    blob = undo.encode([(10, b"x" * 100)], (st.st_dev, st.st_ino))
    assert undo.decode(blob) == ((st.st_dev, st.st_ino), [(10, b"x" * 100)])
    for cut in (5, len(undo.MAGIC) + 3, len(blob) - 1):
        undo.journal_path(p).write_bytes(blob[:cut])
        assert undo.decode(blob[:cut]) is None
        assert undo.recover(p) is False
        assert p.read_bytes() == data and not undo.journal_path(p).exists()


def test_a_journal_of_a_replaced_file_is_dropped_and_the_new_file_left_alone(tmp_path):
    """A new run (or a copy) at the same path is another inode: an old journal never touches it."""
    p = tmp_path / "run.h5"
    p.write_bytes(b"a" * 256)
    undo.write(p, [(0, b"a" * 16), (100, b"a" * 16)])
    new = tmp_path / "new.h5"
    new.write_bytes(b"b" * 256)
    new.replace(p)  # the path now names another file
    assert undo.recover(p) is False
    assert p.read_bytes() == b"b" * 256 and not undo.journal_path(p).exists()


def test_the_journal_lies_beside_the_file_a_symlink_points_to(tmp_path):
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "run.h5"
    real.write_bytes(b"0" * 64)
    link = tmp_path / "link.h5"
    link.symlink_to(real)
    assert undo.journal_path(link) == tmp_path / "data" / ".run.h5.undo"
