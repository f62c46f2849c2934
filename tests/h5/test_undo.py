"""The undo journal of a close (fastdyn.h5.undo): it puts the old bytes back where a close was
cut off (a torn write included), and never touches a file it does not belong to: one replaced
since (a new run at the same path) or a journal cut off while it was written."""

from __future__ import annotations

import os

from fastdyn.h5 import undo


def _file(tmp_path, data: bytes):
    p = tmp_path / "run.h5"
    p.write_bytes(data)
    return p


def test_recover_puts_the_old_bytes_back_after_a_cut_off_close(tmp_path):
    before = os.urandom(4096)
    new = [(48, os.urandom(131)), (1000, os.urandom(512)), (0, os.urandom(48))]
    p = _file(tmp_path, before)
    undo.write(p, [(at, before[at : at + len(b)], b) for at, b in new])
    undo.done(p, remove=False)  # the disk refused the rest: the journal stays
    torn = bytearray(before)
    torn[48:179] = new[0][1]  # the first region written
    torn[1000:1200] = new[1][1][:200]  # the second torn after 200 bytes
    p.write_bytes(bytes(torn))
    assert undo.recover(p) is True
    assert p.read_bytes() == before and not undo.journal_path(p).exists()
    assert undo.recover(p) is False  # nothing left to do


def test_a_journal_that_does_not_fit_the_file_is_dropped_and_the_file_left_alone(tmp_path):
    """A new run at the same path (a region holding neither the old nor the new bytes), and
    journals cut off while they were written."""
    before = os.urandom(2048)
    p = _file(tmp_path, before)
    undo.write(p, [(10, before[10:110], b"n" * 100), (500, before[500:600], b"m" * 100)])
    undo.done(p, remove=False)
    replaced = os.urandom(2048)
    p.write_bytes(replaced)
    assert undo.recover(p) is False
    assert p.read_bytes() == replaced and not undo.journal_path(p).exists()
    blob = undo.encode([(10, replaced[10:110], b"n" * 100)])
    assert undo.decode(blob) == [(10, replaced[10:110], b"n" * 100)]
    for cut in (5, len(undo.MAGIC) + 3, len(blob) - 1):
        undo.journal_path(p).write_bytes(blob[:cut])
        assert undo.decode(blob[:cut]) is None
        assert undo.recover(p) is False
        assert p.read_bytes() == replaced and not undo.journal_path(p).exists()


def test_readers_leave_a_journal_that_a_flush_of_this_process_is_using(tmp_path):
    """A thread reading while another closes the file must not take the close's rewrites back."""
    before = os.urandom(512)
    p = _file(tmp_path, before)
    undo.write(p, [(0, before[:16], b"x" * 16), (100, before[100:116], b"y" * 16)])
    p.write_bytes(b"x" * 16 + before[16:])  # the flush is half-way through its rewrites
    undo.recover_unlocked(p)
    assert p.read_bytes()[:16] == b"x" * 16 and undo.journal_path(p).exists()
    undo.done(p, remove=True)
    assert not undo.journal_path(p).exists()


def test_the_journal_lies_beside_the_file_a_symlink_points_to(tmp_path):
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "run.h5"
    real.write_bytes(b"0" * 64)
    link = tmp_path / "link.h5"
    link.symlink_to(real)
    assert undo.journal_path(link) == tmp_path / "data" / ".run.h5.undo"
