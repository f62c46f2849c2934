"""Dataset checksums (fastdyn.h5.verify): which one each kind of dataset gets, that it leaves the
stored values as given, that one flipped bit fails the read naming the dataset, and that files
written without them still read."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import fastdyn
from fastdyn.h5 import RunWriter, verify
from fastdyn.h5.reader import FileFormatError

#: written once at the start (static) and at the close (final): every kind the writer meets
STATIC = {
    "s/vector": np.linspace(0.0, 1.0, 7),
    "s/scalar": np.float64(0.1),
    "s/empty": np.zeros((0, 2)),
}
FINAL = {
    "f/matrix": np.arange(12.0).reshape(3, 4),
    "f/int": np.arange(5, dtype=np.int32),
    "f/scalar": np.float64(2.0) / 3.0,
    "f/count": np.int64(7),
}


def _write(path: Path) -> None:
    w = RunWriter(
        path,
        model="m",
        config_toml='model = "m"\n',
        seed=0,
        series={"loss/test": ()},
        static=STATIC,
    )
    w.append(np.array([0.0, 1.0]), {"loss/test": np.array([1.0, 0.5])})
    w.close("complete", datasets=FINAL)


def _flip_first_byte(path: Path, name: str) -> None:
    """Flip bit 0 of the first stored byte of dataset ``name`` (contiguous or its first chunk)."""
    with h5py.File(path, "r") as f:
        ds = f[name]
        off = ds.id.get_offset() if ds.chunks is None else ds.id.get_chunk_info(0).byte_offset
    with path.open("r+b") as fh:
        fh.seek(off)
        b = fh.read(1)[0]
        fh.seek(off)
        fh.write(bytes([b ^ 1]))


def test_each_dataset_gets_a_checksum_and_keeps_its_values(tmp_path):
    p = tmp_path / "r.h5"
    _write(p)
    with h5py.File(p, "r") as f:
        for name, want in (STATIC | FINAL).items():
            ds, want = f[name], np.asarray(want)
            assert ds.dtype == want.dtype and ds.shape == want.shape, name
            assert ds[()].tobytes() == want.tobytes(), name  # bytes unchanged: golden hashes
            if want.ndim and want.size:
                assert ds.fletcher32 and verify.CRC_ATTR not in ds.attrs, name
            else:  # HDF5 refuses filters on scalars; an empty array holds nothing to filter
                assert not ds.fletcher32 and int(ds.attrs[verify.CRC_ATTR]) == verify.data_crc(want)
        for name in FINAL:  # written in SWMR mode: one chunk (see create_checked)
            if f[name].ndim:
                assert f[name].chunks == f[name].shape, name
    run = fastdyn.load(p)
    assert run["f/scalar"] == np.float64(2.0) / 3.0 and run["f/matrix"].sum() == 66.0


@pytest.mark.parametrize(
    "name", ["s/vector", "s/scalar", "f/matrix", "f/int", "f/scalar", "f/count"]
)
def test_a_flipped_bit_fails_the_read_naming_the_dataset(tmp_path, name):
    p = tmp_path / "r.h5"
    _write(p)
    _flip_first_byte(p, name)
    with (
        h5py.File(p, "r") as f,
        pytest.raises(verify.DamagedData, match=f"^dataset /{name}: its data does not match"),
    ):
        verify.read_verified(f[name])
    with pytest.raises(FileFormatError, match=f"damaged file \\(dataset /{name}: "):
        fastdyn.load(p)


def test_an_array_over_one_chunk_written_at_the_close_carries_a_crc(tmp_path, monkeypatch):
    monkeypatch.setattr(verify, "ONE_CHUNK", 64)  # bytes: f/matrix (96 B) is over it
    p = tmp_path / "r.h5"
    _write(p)
    with h5py.File(p, "r") as f:
        assert f["f/matrix"].chunks is None and verify.CRC_ATTR in f["f/matrix"].attrs
        assert f["f/int"].fletcher32  # 20 B: one chunk
    _flip_first_byte(p, "f/matrix")
    with pytest.raises(FileFormatError, match="dataset /f/matrix: "):
        fastdyn.load(p)


def test_a_file_without_dataset_checksums_still_reads_unchecked(tmp_path, monkeypatch):
    """Files written before these checksums: final datasets and scalars stored plain."""
    import fastdyn.h5.writer as w

    monkeypatch.setattr(
        w, "create_checked", lambda f, name, data: f.create_dataset(name, data=data)
    )
    p = tmp_path / "old.h5"
    _write(p)
    with h5py.File(p, "r") as f:
        assert not f["f/matrix"].fletcher32 and verify.CRC_ATTR not in f["f/scalar"].attrs
    _flip_first_byte(p, "f/scalar")  # not detectable: no checksum to check it against
    assert fastdyn.load(p)["f/scalar"] != np.float64(2.0) / 3.0
