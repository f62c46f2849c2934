"""Appending rows (``fastdyn.h5.rows``): through ctypes the file gets the rows h5py writes, the
chunks an append allocates are counted right, a bad row set writes nothing, an error inside a
direct call is raised as the writer's WriteFailed, and one save writes at most a small chunk and
a header per series."""

from __future__ import annotations

import errno
import os

import h5py
import numpy as np
import pytest

from fastdyn.h5 import failstop, rows, writer
from fastdyn.h5.libhdf5 import library
from fastdyn.h5.writer import RunWriter, WriteFailed

#: a scalar series, a matrix series and one whose row (5.5 KiB) fills most of a chunk
SERIES = {"loss/a": (), "m": (3, 2), "wide": (700,)}


def _appends(rng: np.random.Generator) -> list[tuple[np.ndarray, dict, np.ndarray]]:
    """Row sets of 1, 3 (a row given once, repeated), 1 and 1500 rows: chunks fill and new ones
    are allocated within one append."""
    out = []
    step = 0
    for k, once in ((1, False), (3, True), (1, False), (1500, False)):
        t = np.arange(step, step + k, dtype=np.float64) * 0.5
        data = {
            name: rng.standard_normal((1 if once else k, *shape)) for name, shape in SERIES.items()
        }
        out.append((t, data, np.arange(step, step + k)))
        step += k
    return out


def _write(path, appends, monkeypatch, direct: bool) -> None:
    with monkeypatch.context() as m:
        if not direct:
            m.setattr(rows, "_calls", lambda: None)  # the h5py path
        w = RunWriter(path, model="t", config_toml="", seed=0, series=SERIES, with_step=True)
        for t, data, steps in appends:
            w.append(t, data, steps)
        assert w._appender().direct is direct
        w.close("complete")


def test_direct_appends_write_the_rows_h5py_writes(tmp_path, monkeypatch):
    assert library() is not None  # this install (h5py's wheel): the direct way
    appends = _appends(np.random.default_rng(7))
    a, b = tmp_path / "direct.h5", tmp_path / "h5py.h5"
    _write(a, appends, monkeypatch, direct=True)
    _write(b, appends, monkeypatch, direct=False)
    want = {  # the rows as appended, a row given once repeated k times
        name: np.concatenate([np.broadcast_to(d[name], (len(t), *shape)) for t, d, _ in appends])
        for name, shape in SERIES.items()
    }
    want["time"] = np.concatenate([t for t, _, _ in appends])
    want["step"] = np.concatenate([s for _, _, s in appends])
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        for name, rows_ in want.items():
            assert fa[name].dtype == fb[name].dtype == rows_.dtype
            assert np.array_equal(fa[name][()], rows_), name
            assert np.array_equal(fb[name][()], rows_), name
            assert fa[name].chunks == fb[name].chunks


def test_new_bytes_are_the_chunks_an_append_allocates(tmp_path):
    """HDF5's own count of the storage allocated (each Fletcher32 chunk 4 bytes longer) against
    :meth:`Appender.new_bytes`, for appends that do and do not cross chunk boundaries."""
    w = RunWriter(tmp_path / "x.h5", model="t", config_toml="", seed=0, series=SERIES)
    names = ["time", *SERIES]
    rng = np.random.default_rng(1)

    def storage() -> tuple[int, int]:
        ds = [w._f[n] for n in names]
        return sum(d.id.get_storage_size() for d in ds), sum(d.id.get_num_chunks() for d in ds)

    for k in (1, 1, 2, 1, 300, 1024, 5):
        n0 = w.n_rows
        expect = w._appender().new_bytes(n0, n0 + k)
        (b0, c0) = storage()
        w.append(
            np.arange(k, dtype=float),
            {n: rng.standard_normal((k, *s)) for n, s in SERIES.items()},
        )
        (b1, c1) = storage()
        assert b1 - b0 == expect + 4 * (c1 - c0), (n0, k)
    w.close("complete")


def test_a_row_set_that_does_not_fit_writes_nothing(tmp_path):
    p = tmp_path / "x.h5"
    w = RunWriter(p, model="t", config_toml="", seed=0, series=SERIES)
    w.append(np.zeros(1), {n: np.ones((1, *s)) for n, s in SERIES.items()})
    bad = {n: np.ones((1, *s)) for n, s in SERIES.items()} | {"m": np.ones((1, 4))}
    with pytest.raises(ValueError):
        w.append(np.zeros(2), bad)
    assert w.n_rows == 1 and all(w._f[n].shape[0] == 1 for n in ["time", *SERIES])
    w.close("complete")


def test_a_failed_read_inside_a_direct_write_is_a_write_failure(tmp_path, monkeypatch):
    """A reopened file's last chunk is read back by HDF5 inside H5Dwrite; a read error raised by
    the fail-stop file object there reaches the writer (through the PyDLL call) as WriteFailed,
    not as a SystemError, and leaves the file as of its last flush."""
    p = tmp_path / "x.h5"
    w = RunWriter(
        p, model="t", config_toml="", seed=0, series=SERIES, checkpoint={"x": ((1,), "f8")}
    )
    for i in range(3):
        w.append(np.array([float(i)]), {n: np.full((1, *s), i) for n, s in SERIES.items()})
    w.checkpoint({"x": np.zeros(1)})
    w._f.close()  # as a kill leaves it (no close)
    w._io.close()
    w._release()
    w, _ = RunWriter.reopen(p)
    assert w._appender().direct

    def fail(self, buf):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(failstop.FailStopFile, "readinto", fail)
    with pytest.raises(WriteFailed) as e:
        w.append(np.array([3.0]), {n: np.ones((1, *s)) for n, s in SERIES.items()})
    assert e.value.errno == errno.EIO
    monkeypatch.undo()
    w.abandon()
    with h5py.File(p, "r", libver="latest", swmr=True) as f:
        assert np.array_equal(f["loss/a"][()], [0.0, 1.0, 2.0])


def test_a_save_of_eight_series_writes_a_small_chunk_and_a_header_each(tmp_path, monkeypatch):
    """ICL Fig. 1's layout: every flush rewrites the last chunk of each series whole, so the
    chunk size bounds what a save writes (264 KiB a save with chunks of up to 2 MiB)."""
    series = {"l1": (), "l2": (), "l3": (), "G": (4, 4), "e": (4,), "v": (8,)}
    w = RunWriter(
        tmp_path / "x.h5", model="t", config_toml="", seed=0, series=series, with_step=True
    )
    for i in range(10):
        w.append(
            np.array([float(i)]), {n: np.ones((1, *s)) for n, s in series.items()}, np.array([i])
        )
    written = []
    orig = failstop.FailStopFile.write

    def write(self, data):
        written.append(len(memoryview(data).cast("B")))
        return orig(self, data)

    monkeypatch.setattr(failstop.FailStopFile, "write", write)
    w.append(np.array([10.0]), {n: np.ones((1, *s)) for n, s in series.items()}, np.array([10]))
    monkeypatch.undo()
    w.close("complete")
    assert len(written) <= 2 * 8 + 1  # a chunk and a header per series (and the superblock)
    assert sum(written) <= 8 * ((8 << 10) + 4 + 1024), written  # 8 KiB chunks (and checksum)


def test_appends_within_the_room_already_reserved_ask_the_file_system_nothing(
    tmp_path, monkeypatch
):
    """The free-space check (``statvfs``) and ``fallocate`` of every append are skipped while
    the room an earlier reservation allocated covers the chunks it needs and the reserve; an
    append that needs more asks again."""
    narrow = {"a": (), "m": (3, 2)}  # chunks of 1024 and 341 rows
    w = RunWriter(tmp_path / "x.h5", model="t", config_toml="", seed=0, series=narrow)
    one = {n: np.ones((1, *s)) for n, s in narrow.items()}
    for i in range(2):  # the first chunks (and, after them, the room for the file's new end)
        w.append(np.array([float(i)]), one)
    asked = []
    real = writer._free_bytes
    monkeypatch.setattr(writer, "_free_bytes", lambda p: asked.append(p) or real(p))
    for i in range(2, 20):  # within those chunks: nothing new allocated
        w.append(np.array([float(i)]), one)
    assert asked == [] and w._io.holds(writer.RESERVE)
    k = 2000  # 8 new chunks: more than the room reserved for the first append
    w.append(np.arange(k, dtype=float), {n: np.ones((k, *s)) for n, s in narrow.items()})
    assert len(asked) == 1
    w.close("complete")


def test_the_room_is_what_the_file_system_holds_and_a_truncation_forgets_it(tmp_path):
    io = failstop.FailStopFile(tmp_path / "f", create=True)
    io.write(b"x" * 8192)
    io.flush()
    io.reserve(1 << 20)
    st = os.fstat(io.fd)
    assert io.holds(1 << 20) == (st.st_blocks * 512 - st.st_size >= 1 << 20)
    assert not io.holds((1 << 20) + 1)
    io.truncate(4096)  # HDF5 asks for a smaller file at a flush: ext4 drops the reserved blocks
    io.flush()
    assert not io.holds(1)
    io.close()


def _held_file(tmp_path, size: int = 64 << 10) -> tuple[failstop.FailStopFile, bytes]:
    """A fail-stop file of ``size`` known bytes, flushed (every later write inside it is a
    rewrite in place, held until the next flush)."""
    old = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8).tobytes()
    io = failstop.FailStopFile(tmp_path / "f", create=True)
    io.write(old)
    io.flush()
    return io, old


def _rewrite(io: failstop.FailStopFile, writes) -> None:
    for at, blob in writes:
        io.seek(at)
        io.write(blob)


#: held rewrites in HDF5's order: three close together going up (one write), one going back
#: (written on its own, after them), one far away (on its own), one overlapping an earlier one
WRITES = [(1000, b"a" * 300), (1500, b"b" * 200), (5000, b"c" * 100), (900, b"d" * 50),
          (40000, b"e" * 10), (1600, b"f" * 20)]  # fmt: skip


def test_held_rewrites_close_together_go_in_one_write_in_hdf5s_order(tmp_path, monkeypatch):
    io, old = _held_file(tmp_path)
    want = bytearray(old)
    for at, blob in WRITES:  # each in turn: later ones win
        want[at : at + len(blob)] = blob
    calls = []
    real = os.pwrite
    monkeypatch.setattr(
        os, "pwrite", lambda fd, b, at: calls.append((at, len(b))) or real(fd, b, at)
    )
    _rewrite(io, WRITES)
    io.flush()
    monkeypatch.undo()
    assert calls == [(1000, 4100), (900, 50), (40000, 10), (1600, 20)]
    assert os.pread(io.fd, len(old), 0) == bytes(want)
    io.close()


def test_a_merged_write_that_fails_part_way_is_put_back(tmp_path, monkeypatch):
    """The first (merged) write stops after 1000 bytes, then ENOSPC: its old bytes are put back,
    nothing after it reaches the disk (the file as of the last flush), and reads through the
    file object still see every rewrite."""
    io, old = _held_file(tmp_path)
    real = os.pwrite
    state = {"failed": False}

    def pwrite(fd, b, at):  # the merged write: 1000 bytes written, then no space
        if state["failed"] is False and len(b) > 1000:
            state["failed"] = at + 1000
            return real(fd, bytes(b)[:1000], at)
        if at == state["failed"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, b, at)

    monkeypatch.setattr(os, "pwrite", pwrite)
    _rewrite(io, WRITES)
    io.flush()
    monkeypatch.undo()
    assert io.error is not None and io.error.errno == errno.ENOSPC
    assert os.pread(io.fd, len(old), 0) == old
    seen = bytearray(len(old))
    io.seek(0)
    io.readinto(seen)
    want = bytearray(old)
    for at, blob in WRITES:
        want[at : at + len(blob)] = blob
    assert bytes(seen) == bytes(want)
    io.close()
