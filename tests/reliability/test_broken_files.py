"""Truncated and bit-flipped files given to inspect, fit, plot and --resume exit 2 with one clear
line (issue 6, acceptance 5); a disk that fills up mid-run leaves a readable file, a clear
message and exit 1 (acceptance 6, simulated by a writer that raises ENOSPC)."""

from __future__ import annotations

import errno

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5 import RunWriter

from .conftest import MSFR

COMMANDS = [["inspect"], ["fit"], ["plot"], ["simulate", "--resume"]]


def _run(cmd, path, tmp_path):
    args = [*cmd, str(path)]
    if cmd == ["plot"]:
        args += ["-o", str(tmp_path / "p.png")]
    return CliRunner().invoke(main, args)


def _exit2_one_line(res) -> None:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert (
        len(lines) == 1
        and lines[0].startswith("fastdyn: error: ")
        and "Traceback" not in res.output
    ), res.output


@pytest.mark.parametrize("frac", np.linspace(0.0, 0.95, 10))
def test_truncated_files_exit_2(msfr_reference, tmp_path, frac):
    raw = msfr_reference[0].read_bytes()
    p = tmp_path / "t.h5"
    p.write_bytes(raw[: int(frac * len(raw))])
    for cmd in COMMANDS:
        _exit2_one_line(_run(cmd, p, tmp_path))


def _offsets(path) -> dict[str, int]:
    """File offsets of places that matter: the superblock, the root object header, and the raw
    chunks of /time and /loss/test (fletcher32-checked)."""
    with h5py.File(path, "r") as f:
        out = {"superblock": 20, "root header": f.id.get_vfd_handle() and 0}
        out["root header"] = (
            h5py.h5o.get_info(f.id).addr if hasattr(h5py.h5o.get_info(f.id), "addr") else 48
        )
        for name in ("time", "loss/test"):
            info = f[name].id.get_chunk_info(0)
            out[name] = info.byte_offset + 3
    return out


def test_bit_flipped_files_exit_2(msfr_reference, tmp_path):
    # an "interrupted" copy, so that --resume gets past "complete" to the damaged data
    src = tmp_path / "interrupted.h5"
    src.write_bytes(msfr_reference[0].read_bytes())
    with h5py.File(src, "r+") as f:
        f.attrs["status"] = "interrupted"
    for base in (msfr_reference[0], src):
        raw = base.read_bytes()
        for where, off in _offsets(base).items():
            b = bytearray(raw)
            b[off] ^= 0x10
            p = tmp_path / f"f{off}.h5"
            p.write_bytes(bytes(b))
            for cmd in COMMANDS:
                res = _run(cmd, p, tmp_path)
                assert res.exit_code == 2, (base.name, where, cmd, res.output)
                _exit2_one_line(res)


def test_a_full_disk_mid_run_leaves_a_readable_file_and_a_clear_message(
    msfr_reference, tmp_path, monkeypatch
):
    orig = RunWriter.append
    count = {"n": 0}

    def append(self, *a, **k):
        count["n"] += 1
        if count["n"] == 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        orig(self, *a, **k)

    monkeypatch.setattr(RunWriter, "append", append)
    p = tmp_path / "full.h5"
    res = CliRunner().invoke(main, ["simulate", *MSFR, "-o", str(p)])
    assert res.exit_code == 1, res.output
    assert "No space left on device" in res.output and f"--resume {p}" in res.output
    monkeypatch.undo()
    r = fastdyn.load(p)
    ref = fastdyn.load(msfr_reference[0])
    assert len(r.time) == 9 * 2  # the 9 chunks before the failing one
    np.testing.assert_array_equal(r["loss/test"], ref["loss/test"][:18])
    assert CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)]).exit_code == 0
    np.testing.assert_array_equal(fastdyn.load(p)["loss/test"], ref["loss/test"])


def test_a_fifo_is_refused_at_once_by_every_reader(tmp_path):
    """A named pipe given as the file: one line, exit 2, no hang (issue 22, item 3)."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)
    for args in (
        ["inspect", str(fifo)],
        ["fit", str(fifo)],
        ["plot", str(fifo), "-o", str(tmp_path / "x.png")],
        ["simulate", "--resume", str(fifo)],
    ):
        # a subprocess with a timeout: a reader that blocked on the pipe would hang this test otherwise
        proc = subprocess.run(
            [sys.executable, "-m", "fastdyn", *args], capture_output=True, text=True, timeout=120
        )
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1, (args, proc.returncode, proc.stderr)
        assert "not a regular file" in lines[0], lines[0]
