"""Inputs are checked before they are read: a FIFO or a device given for any input path is
refused at once (it used to block the first read for ever), compressed task-table columns and
data files are sized from their headers before anything is decompressed, and the sizes that
grow memory without bound (save count, test context lengths, a data file's shape) are counted
in the estimate, so an impossible run is exit 2 naming its field instead of an allocation
failure."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
ICL = str(ROOT / "data" / "configs" / "icl_fig1.toml")


def _check(*args: str, limit: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    if limit:
        env["FASTDYN_MEMORY_LIMIT"] = limit
    return subprocess.run(
        [sys.executable, "-m", "fastdyn", "simulate", *args, "--check"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip


def _one_line_2(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize(
    "args,field",
    [
        (["{fifo}"], "config file"),
        (["--set", "task.table='{fifo}'", "--set", "task.n_tasks=10"], "task.table"),
        ([ICL, "--set", "data.from_file='{fifo}'"], "data.from_file"),
        ([ICL, "--set", "init.from_file='{fifo}'"], "init.from_file"),
        (["--set", "model='msfr-h'", "--set", "h.file='{fifo}'"], "h.file"),
        ([ICL, "--set", "data.from_file='/dev/zero'"], "data.from_file"),
    ],
)
def test_a_fifo_or_device_is_refused_at_once(args, field, tmp_path):
    fifo = tmp_path / "in.npz"
    os.mkfifo(fifo)
    r = _check(*[a.format(fifo=fifo) for a in args])  # a read would block: the timeout fails it
    _one_line_2(r, field, "not a regular file")


def _npz_claiming(path: Path, rows: int) -> None:
    """A compressed .npz whose column ``weight`` holds ``rows`` zeros (streamed: small on disk)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("weight.npy", "w") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<f8", "fortran_order": False, "shape": (rows,)}
        )
        block = bytes(8 << 20)
        left = 8 * rows
        while left:
            fh.write(block[: min(left, len(block))])
            left -= min(left, len(block))


def test_a_compressed_table_is_sized_before_it_is_decompressed(tmp_path):
    p = tmp_path / "table.npz"
    _npz_claiming(p, 20_000_000)  # 160 MB of columns in a file of ~160 kB
    assert p.stat().st_size < 1 << 20
    r = _check("--set", f"task.table='{p}'", "--set", "task.n_tasks=20000000", limit="100MB")
    _one_line_2(r, "task.table", "decompressed whole")


def test_a_data_file_counts_with_its_own_shape(tmp_path):
    """x of shape (400 000, 32, 4), compressed to a few kB: its P comes from the header and the
    estimate refuses it under a 300 MB limit (``data.P`` from the file)."""
    p = tmp_path / "data.npz"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, shape in (("x", (400_000, 32, 4)), ("y", (400_000, 32))):
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array_header_1_0(
                    fh, {"descr": "<f8", "fortran_order": False, "shape": shape}
                )
                fh.write(bytes(8 * int(np.prod(shape))))
    r = _check(ICL, "--set", f"data.from_file='{p}'", limit="300MB")
    _one_line_2(r, "data.P", "400000 (from data.from_file")


@pytest.mark.parametrize(
    "sets,field",
    [
        (["schedule.epochs=1000000000000", "schedule.save_every=1"], "schedule.save_every"),
        (["test.context_lengths=[100000]", "data.n_test=20000"], "test.context_lengths"),
    ],
)
def test_sizes_that_grow_memory_are_counted(sets, field):
    r = _check(ICL, *[a for s in sets for a in ("--set", s)], limit="8GiB")
    _one_line_2(r, field, "more than the")


#: runs the CLI, then prints its peak resident set (VmHWM, KiB). Not ru_maxrss: Linux carries
#: the parent's RSS at fork into the child's maxrss across exec (a child of a 1 GB pytest
#: process reported 1 GB)
_PEAK = (
    "import sys\nfrom fastdyn.cli import main\n"
    "try:\n    main(sys.argv[1:])\nfinally:\n"
    "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
    "    print(hwm.split()[1], flush=True)"
)


def test_a_deeply_dotted_key_is_refused_before_it_is_built(tmp_path):
    """A key of millions of dotted names (a config file, or a --set) is refused before any table
    is built for it: one line, and the process stays small (it reached 8.2 GiB)."""
    deep = tmp_path / "deep.toml"
    deep.write_text("a." * 2_000_000 + "b = 1\n")  # 4 MB: under the size cap
    for args in ([str(deep)], ["--set", "a." * 60_000 + "b=1"]):
        r = subprocess.run(
            [sys.executable, "-c", _PEAK, "simulate", *args, "--check"],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
            env=dict(os.environ, NUMBA_NUM_THREADS="1"),
        )  # fmt: skip
        _one_line_2(r, "dotted names")
        peak_kib = int(r.stdout.split()[-1])
        assert peak_kib < 400 << 10, peak_kib  # measured ≈ 60 MiB; the tables took 8.2 GiB


def test_a_config_path_that_is_not_utf8_is_one_line(tmp_path):
    """An existing config file whose name is not UTF-8: the run crashed (exit 1, "'utf-8' codec
    can't encode") when it recorded its command line in the output. Refused in one line, exit 2,
    nothing written."""
    cfg = os.path.join(os.fsencode(tmp_path), b"c\xff.toml")
    with open(cfg, "wb") as fh:
        fh.write(b'model = "msfr"\ntask.n_tasks = 2048\ntime.n_times = 8\ntheory.level = "none"\n')
    out = tmp_path / "o.h5"
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "fastdyn", "simulate", cfg, "-o", str(out)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    _one_line_2(r, "CONFIG ", "c\\xff.toml: the file name is not valid UTF-8")
    assert not out.exists()


def test_a_command_line_that_is_not_utf8_is_recorded_with_escapes(tmp_path, monkeypatch):
    """The output records the command line as UTF-8 text; bytes that are not UTF-8 (a sweep
    file's name, say) are written as \\x escapes instead of crashing the writer."""
    from click.testing import CliRunner

    import fastdyn
    from fastdyn.cli import main

    monkeypatch.setattr(sys, "argv", ["fastdyn", "sweep", os.fsdecode(b"s\xff.toml")])
    out = tmp_path / "o.h5"
    sets = ["task.n_tasks=2048", "time.n_times=8", "theory.level='none'"]
    res = CliRunner().invoke(
        main, ["-q", "simulate", *[a for s in sets for a in ("--set", s)], "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert fastdyn.load(out).attrs["command_line"] == "fastdyn sweep s\\xff.toml"


def test_a_huge_sparse_csv_table_is_refused_at_its_first_bytes(tmp_path):
    """A 20 GiB sparse CSV (a header, one row, then a hole never written: NUL bytes) ended in
    MemoryError after 53 s: the index pass read it all, then one read of its "first rows" took
    the whole file. Now the pass refuses what no CSV table holds (a NUL byte, a line longer than
    64 KiB) as it meets it: one line naming task.table and the byte, in a process whose address
    space is capped at 1 GiB (a twentieth of the file); the timeout bounds the time."""
    import resource

    p = tmp_path / "sparse.csv"
    with open(p, "wb") as fh:
        fh.write(b"weight,strength,psi\n1,1,1\n")
        fh.truncate(20 << 30)  # sparse: no block of the hole is allocated

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    r = subprocess.run(
        [sys.executable, "-m", "fastdyn", "simulate", "--set", f"task.table='{p}'", "--check"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, preexec_fn=cap,
        env=dict(os.environ, NUMBA_NUM_THREADS="1"),
    )  # fmt: skip
    _one_line_2(r, "task.table", "byte 26 (line 3) is a NUL byte: not a text CSV table")


@pytest.mark.parametrize("where", ["header", "row"])
def test_a_csv_line_longer_than_any_table_row_is_refused(tmp_path, where):
    """A line of 70 000 bytes (no line break where a table has one): one line naming it."""
    p = tmp_path / "long.csv"
    rows = "1,1,1\n" * 3000
    text = (
        "w" * 70_000
        if where == "header"
        else "weight,strength,psi\n" + rows + "1,1," + "1" * 70_000
    )
    p.write_text(text + "\n")
    r = _check("--set", f"task.table='{p}'")
    line = 1 if where == "header" else 3002
    _one_line_2(r, "task.table", f"line {line} is longer than 65536 bytes")
