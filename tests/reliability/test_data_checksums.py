"""A flipped bit in the data of any dataset is found and named: every model's datasets, the ones
written once (static arrays, axes, scalars, the final weights and theory levels written at the
close) as well as the streamed series.

The bit is flipped in the file's raw bytes at the dataset's first stored element (its lowest
byte: a change of one unit in the last place of a float64, the flip no plausibility check can
see), found with h5py (``get_offset`` for contiguous storage, ``get_chunk_info`` for the first
chunk). Every reader (``fastdyn.load``, ``inspect``, ``fit``, ``plot``) and ``simulate --resume``
of a killed file must then refuse the file in one line naming the dataset, exit 2. Before the
checksums, the datasets written at the close and the scalars were read silently with the flipped
value (and ``--resume`` finished a killed file carrying it), and a flip in an array the filter
caught was reported without its dataset.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.reader import FileFormatError

from .test_every_model import _DIE, CASES, _args

#: the models of this package and the logistic plug-in (examples/logistic)
MODELS = sorted(m for m in CASES if m != "deep-linear")


def _datasets(path: Path) -> list[list[str]]:
    """Every dataset of ``path`` holding data, but the checkpoint slots (their own crc32), once
    each, as the list of its paths (a scale hard-linked into a series group has two)."""
    by_addr: dict[int, list[str]] = {}

    def visit(name: str, link) -> None:
        obj = f[name]
        if isinstance(obj, h5py.Dataset) and obj.size and not name.startswith("checkpoint"):
            by_addr.setdefault(h5py.h5o.get_info(obj.id).addr, []).append(name)

    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        f.visititems_links(visit)
    return list(by_addr.values())


def _first_byte(path: Path, name: str) -> tuple[int, bool]:
    """(file offset of the first stored byte of dataset ``name``, whether it is chunked)."""
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        ds = f[name]
        if ds.chunks is None:
            return ds.id.get_offset(), False
        return ds.id.get_chunk_info(0).byte_offset, True


def _flipped(src: Path, name: str, dst: Path) -> Path:
    """A copy of ``src`` with bit 0 of the first data byte of ``name`` flipped, after checking
    that the flip landed in that dataset's data (a plain HDF5 read now differs or fails)."""
    off, chunked = _first_byte(src, name)
    shutil.copyfile(src, dst)
    with dst.open("r+b") as fh:
        fh.seek(off)
        b = fh.read(1)[0]
        fh.seek(off)
        fh.write(bytes([b ^ 1]))
    with (
        h5py.File(src, "r", libver="latest", swmr=True) as a,
        h5py.File(dst, "r", libver="latest", swmr=True) as b,
    ):
        if chunked:  # the filter (Fletcher32) refuses the chunk
            assert a[name].id.read_direct_chunk((0,) * a[name].ndim) != b[
                name
            ].id.read_direct_chunk((0,) * b[name].ndim)
        else:  # unfiltered: plain h5py reads the flipped value
            assert not np.array_equal(a[name][()], b[name][()]), name
    return dst


def _names(text: str, paths: list[str]) -> bool:
    """Whether ``text`` names the dataset of the paths ``paths`` (by any of them)."""
    return any(f"dataset /{p} " in text or f"dataset /{p}:" in text for p in paths)


def _cli_problem(res, paths: list[str]) -> str | None:
    """What is wrong with a command's answer to a damaged file (None: one line naming the
    dataset, exit 2)."""
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    if (
        res.exit_code == 2
        and len(lines) == 1
        and lines[0].startswith("fastdyn: error:")
        and _names(lines[0], paths)
        and "Traceback" not in res.output
    ):
        return None
    return f"exit {res.exit_code}: {res.output.strip()[-240:]!r}"


def _load_problem(path: Path, paths: list[str]) -> str | None:
    """What is wrong with ``fastdyn.load``'s answer (None: a one-line FileFormatError naming it)."""
    try:
        fastdyn.load(path)
    except FileFormatError as e:
        return None if _names(str(e), paths) and "\n" not in str(e) else f"not named: {e}"
    return "read without an error"


@pytest.mark.parametrize("model", MODELS)
def test_a_flipped_bit_in_any_dataset_is_refused_by_every_reader_naming_it(
    model, model_reference, tmp_path
):
    src = model_reference(model, _args(model))
    names = _datasets(src)
    with h5py.File(src, "r") as f:  # the datasets written at the close are among them
        once = [p[0] for p in names if not (f[p[0]].maxshape and f[p[0]].maxshape[0] is None)]
        assert once and any(f[n].ndim == 0 for n in once) == (
            model in ("attn-m", "attn-s", "mlp-cubic")
        )
    problems: list[str] = []
    for k, paths in enumerate(names):
        bad = _flipped(src, paths[0], tmp_path / f"bad{k}.h5")
        if why := _load_problem(bad, paths):
            problems.append(f"/{paths[0]} load: {why}")
        for cmd in (["inspect"], ["fit"], ["plot", "-o", str(tmp_path / "p.png")]):
            if why := _cli_problem(CliRunner().invoke(main, [*cmd, str(bad)]), paths):
                problems.append(f"/{paths[0]} {cmd[0]}: {why}")
        bad.unlink()
    assert not problems, f"{len(problems)} of {4 * len(names)}:\n" + "\n".join(problems)
    assert not (tmp_path / "p.png").exists()
    assert fastdyn.load(src).status == "complete"  # the undamaged file reads


@pytest.mark.parametrize("model", MODELS)
def test_resume_refuses_a_killed_file_with_a_flipped_bit_naming_the_dataset(
    model, model_reference, tmp_path
):
    model_reference(model, _args(model))  # the numba cache, filled once per session
    killed = tmp_path / "killed.h5"
    proc = subprocess.run(
        [sys.executable, "-c", _DIE, str(killed), "3", *_args(model)],
        capture_output=True,
        text=True,
        env=dict(os.environ, NUMBA_NUM_THREADS="1"),
        timeout=600,
    )
    assert proc.returncode == 9, proc.stderr
    names = _datasets(killed)
    assert len(names) >= 4
    problems: list[str] = []
    for k, paths in enumerate(names):
        bad = _flipped(killed, paths[0], tmp_path / f"bad{k}.h5")
        res = CliRunner().invoke(main, ["-q", "simulate", "--resume", str(bad)])
        if why := _cli_problem(res, paths):
            problems.append(f"/{paths[0]}: {why}")
        else:
            with h5py.File(bad, "r", libver="latest", swmr=True) as f:
                assert f.attrs["status"] == "running"  # refused before anything was written
        bad.unlink()
    assert not problems, f"{len(problems)} of {len(names)}:\n" + "\n".join(problems)
