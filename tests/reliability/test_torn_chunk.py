"""A kill during the rewrite of a series' last chunk tears it (new bytes up to a page boundary, old
after it, checksum stale): its flushed rows are still read, verified against the stored checksum,
and ``--resume`` / ``fastdyn repair`` write the chunk back (fastdyn.h5.torn).

How often: 7 of 120 kills of a process appending 256-wide rows to 2 MiB chunks tore one; the
random-kill test in test_signals.py failed a CI run this way once (``filter returned failure``).
The torn files here are made deterministically, as the kernel leaves them: the extent and the
checksum as of the last flush, and the bytes of the next rows (or any prefix of them) written.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.reader import FileFormatError
from fastdyn.h5.torn import read_rows, repair_torn
from fastdyn.h5.writer import lookup3

from .conftest import assert_same_series


def _tear(path, name: str, n_new: int, cut: float = 1.0, flip_row: int | None = None) -> None:
    """Write ``n_new`` rows of non-fill bytes after the extent of ``name``'s last chunk (the first
    ``cut`` of them, byte-wise: a tear part-way), leaving its extent and checksum as they were;
    ``flip_row``: also flip one bit inside that flushed row (damage that must still fail)."""
    with h5py.File(path, "r") as f:
        ds = f[name]
        per, rows = ds.chunks[0], ds.shape[0]
        start = (rows - 1) // per * per
        info = ds.id.get_chunk_info_by_coord((start,) + (0,) * (ds.ndim - 1))
        row_bytes = int(np.prod(ds.chunks[1:], dtype=np.int64)) * ds.dtype.itemsize
    at = info.byte_offset + (rows - start) * row_bytes
    new = np.arange(1.0, 1.0 + n_new * row_bytes // 8).tobytes()[: int(cut * n_new * row_bytes)]
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(new)
        if flip_row is not None:
            fh.seek(info.byte_offset + (flip_row - start) * row_bytes + 2)
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ 0x10]))


def _plain_read_fails(path, name: str) -> None:
    with h5py.File(path, "r") as f, pytest.raises(OSError, match="filter returned failure"):
        f[name][()]


@pytest.mark.parametrize("ncols", [1, 7])
@pytest.mark.parametrize("cut", [0.3, 1.0])
def test_a_torn_last_chunk_reads_its_flushed_rows_and_is_repaired(tmp_path, ncols, cut):
    p = tmp_path / "t.h5"
    shape = (11,) if ncols == 1 else (11, ncols)
    want = np.random.default_rng(1).standard_normal(shape)
    with h5py.File(
        p, "w", libver="latest"
    ) as f:  # as the writer makes series: chunked, checksummed
        f.create_dataset(
            "s", data=want, maxshape=(None, *shape[1:]), chunks=(4, *shape[1:]), fletcher32=True
        )
    _tear(p, "s", n_new=1)  # rows 8..10 flushed in the last chunk, row 11 half-written
    if cut < 1.0:
        _tear(p, "s", n_new=1, cut=cut)
    _plain_read_fails(p, "s")
    with h5py.File(p, "r") as f:
        np.testing.assert_array_equal(read_rows(f["s"]), want)
    with h5py.File(p, "r+") as f:
        assert repair_torn(f) == ["s"]
    with h5py.File(p, "r") as f:
        np.testing.assert_array_equal(f["s"][()], want)  # any reader again


def test_damage_to_a_flushed_row_of_a_torn_chunk_still_fails(tmp_path):
    p = tmp_path / "t.h5"
    with h5py.File(p, "w", libver="latest") as f:
        f.create_dataset("s", data=np.arange(11.0), maxshape=(None,), chunks=(4,), fletcher32=True)
    _tear(p, "s", n_new=1, flip_row=9)
    with h5py.File(p, "r") as f, pytest.raises(OSError):
        read_rows(f["s"])
    with h5py.File(p, "r+") as f:
        assert repair_torn(f) == []  # nothing verified, nothing written


def _torn_copy(msfr_reference, tmp_path):
    """The reference run as a kill during the last append leaves it: status ``running`` and the
    last chunks of /time and /loss/test torn."""
    p = tmp_path / "torn.h5"
    p.write_bytes(msfr_reference[0].read_bytes())
    with h5py.File(p, "r+") as f:
        f.attrs["status"] = "running"
    for name in ("time", "loss/test"):
        _tear(p, name, n_new=2)
        _plain_read_fails(p, name)
    return p


def test_a_killed_run_with_torn_chunks_loads_and_resumes_identically(msfr_reference, tmp_path):
    ref = fastdyn.load(msfr_reference[0])
    p = _torn_copy(msfr_reference, tmp_path)
    assert_same_series(ref, fastdyn.load(p))
    res = CliRunner().invoke(main, ["inspect", str(p)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    assert res.exit_code == 0, res.output
    assert fastdyn.load(p).status == "complete"
    with h5py.File(p, "r") as f:
        np.testing.assert_array_equal(f["loss/test"][()], ref["loss/test"])  # plain read works
    assert_same_series(ref, fastdyn.load(p))


def _set_open_flags(path) -> None:
    """Set the superblock's "open for SWMR write" flags, re-checksummed, as a killed writer
    leaves them (the reverse of fastdyn.h5.writer.clear_open_flags)."""
    with open(path, "r+b") as fh:
        head = bytearray(fh.read(48))
        end = 12 + 4 * head[9]
        head[11] = 0x05  # write access | SWMR write
        head[end : end + 4] = lookup3(bytes(head[:end])).to_bytes(4, "little")
        fh.seek(0)
        fh.write(bytes(head[: end + 4]))


def test_repair_writes_back_torn_chunks(msfr_reference, tmp_path):
    ref = fastdyn.load(msfr_reference[0])
    p = _torn_copy(msfr_reference, tmp_path)
    _set_open_flags(p)
    res = CliRunner().invoke(main, ["repair", str(p)])
    assert res.exit_code == 0, res.output
    with h5py.File(p, "r") as f:  # a plain reader, which the open flags and the tear both stopped
        for name in ("time", "loss/test"):
            np.testing.assert_array_equal(f[name][()], ref[name])


def test_a_flipped_bit_in_a_flushed_row_of_a_torn_chunk_exits_2(msfr_reference, tmp_path):
    p = _torn_copy(msfr_reference, tmp_path)
    _tear(p, "loss/test", n_new=2, flip_row=100)
    with pytest.raises(FileFormatError):
        fastdyn.load(p)
    res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)])
    assert res.exit_code == 2, res.output


@pytest.mark.parametrize("short", ["time", "loss/test"])
def test_a_kill_inside_an_append_loads_the_rows_every_series_holds(msfr_reference, tmp_path, short):
    """A kill inside an append's flush can leave one series' new extent on disk and not another's
    (a CI run: time 78 rows, loss/test 76): fastdyn.load cuts every time-indexed series to the
    rows all of them hold, so a killed file loads as a consistent prefix of the reference."""
    ref = fastdyn.load(msfr_reference[0])
    p = tmp_path / "uneven.h5"
    p.write_bytes(msfr_reference[0].read_bytes())
    with h5py.File(p, "r+") as f:
        f.attrs["status"] = "running"
        n = f["time"].shape[0] - 2
        f[short].resize(n, axis=0)
    got = fastdyn.load(p)
    along_time = [k for k in ref.series if ref[k].shape[0] == ref.time.shape[0]]
    assert {"time", "loss/test", "loss/train"} <= set(along_time)
    for k in along_time:
        np.testing.assert_array_equal(got[k], ref[k][:n], err_msg=k)  # also the length
    for k in set(ref.series) - set(along_time):
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)  # static: whole
    # (resuming such a file is test_signals.py's: its checkpoint precedes the torn append)
