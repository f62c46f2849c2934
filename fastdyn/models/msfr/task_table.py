"""① ``task.table = FILE``: a user's MSFR task table, read in row ranges, never whole.

Columns (by name): ``weight`` (or ``P``; any non-negative scale, normalised to P(s) like the
built-in Zipf weights), ``strength`` (Λ_s), ``psi`` (ψ_s, whole tokens ≥ 1) and optionally
``counts`` (#_s, the training set itself: N = Σ #_s). Row s−1 is task s; the table's length is
N_s. Formats, by suffix:

- ``.npz`` (``np.savez``): uncompressed members are read by row ranges straight from the file
  (only the rows read are in memory); members of ``np.savez_compressed`` files are read into memory whole (small tables);
- ``.h5`` / ``.hdf5``: 1-d datasets at the file's root, read by slices;
- ``.csv``: a header line naming the columns, then one row per task, no blank lines; one pass
  at open records where every block of rows starts, and reads parse those byte ranges only.

This module only opens files and reads raw columns (one-line :class:`ConfigError` naming
``task.table`` for unreadable files, missing columns, length mismatch and unparsable rows); the
values are checked (finite, ≥ 0, ψ ≥ 1) by the problem as it streams them.
"""

from __future__ import annotations

import io
import os
import stat
import struct
import zipfile

import numpy as np

from ...config.npz_shape import read_npy_header
from ...config.schema import ConfigError

#: rows per CSV index entry (the problems' block size; chunks start on its multiples)
ROW_BLOCK = 1024
#: the longest CSV line accepted, bytes: a row of a task table is a few numbers (four float64 in
#: full precision take < 100 bytes), so a longer line is no table row; it bounds the bytes one
#: read of ROW_BLOCK rows holds (64 MiB)
MAX_LINE = 1 << 16
WEIGHT_NAMES = ("weight", "P")
REQUIRED = ("strength", "psi")
OPTIONAL = ("counts",)
_CACHE: dict = {}


def err(path: str, what: str) -> ConfigError:
    """The one-line error about table ``path``."""
    return ConfigError(f"task.table: {path}: {what}")


def open_table(path: str) -> TaskTable:
    """The table at ``path`` (cached per path, size and modification time: the CSV index is built
    once per process)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise err(path, f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the first read for ever
        raise err(path, "not a regular file (a FIFO, socket, device or directory); give a file")
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = TaskTable(path)
    return _CACHE[key]


class TaskTable:
    """Columns of one table file: :attr:`n` rows, :attr:`has_counts`, :meth:`read`."""

    def __init__(self, path: str):
        self.path = str(path)
        low = self.path.lower()
        if low.endswith(".npz"):
            cols = self._open_npz()
        elif low.endswith((".h5", ".hdf5")):
            cols = self._open_h5()
        elif low.endswith(".csv"):
            cols = self._open_csv()
        else:
            raise err(self.path, "unknown format; use a .npz, .csv, .h5 or .hdf5 file")
        names = list(cols)
        wname = next((w for w in WEIGHT_NAMES if w in cols), None)
        missing = ([] if wname else ["weight (or P)"]) + [c for c in REQUIRED if c not in cols]
        if missing:
            raise err(
                self.path,
                f"missing column {', '.join(missing)}; has {', '.join(names) or 'none'} (needs weight or P, strength, psi, optional counts)",
            )
        self.weight_name = wname
        self.has_counts = "counts" in cols
        use = [wname, *REQUIRED] + (["counts"] if self.has_counts else [])
        lengths = {c: cols[c] for c in use}
        self.n = lengths[wname]
        for c, m in lengths.items():
            if m != self.n:
                raise err(
                    self.path,
                    f"column {c} has {m} rows, column {wname} has {self.n}; every column needs one row per task",
                )
        if self.n < 1:
            raise err(self.path, "has no rows; needs one row per task")

    def __del__(self) -> None:
        """Close the open CSV/HDF5 handle when the table is dropped (its read closure makes a
        reference cycle, collected at an arbitrary later moment: an unclosed-file ResourceWarning
        then landed in whatever command was running, e.g. inside a ``--json`` output)."""
        for name in ("_fh", "_h5"):
            h = self.__dict__.get(name)
            if h is not None:
                try:
                    h.close()
                except Exception:  # noqa: BLE001 (interpreter shutdown)
                    pass

    # -- formats -------------------------------------------------------------------------------
    def _open_npz(self) -> dict[str, int]:
        try:
            zf = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as e:
            raise err(self.path, f"not a readable .npz file ({e})") from None
        self._arrays = {}
        with zf:
            _check_compressed_size(self.path, zf)
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                name = info.filename[:-4]
                try:
                    arr = _npz_member(self.path, zf, info)
                except (ValueError, OSError) as e:
                    raise err(self.path, f"column {name}: not a readable array ({e})") from None
                if arr.ndim != 1:
                    raise err(
                        self.path,
                        f"column {name}: must be 1-d (one value per task), has shape {arr.shape}",
                    )
                self._arrays[name] = arr
        self._read = lambda c, a, b: self._arrays[c][a:b]
        return {k: v.shape[0] for k, v in self._arrays.items()}

    def _open_h5(self) -> dict[str, int]:
        import h5py

        try:
            self._h5 = h5py.File(self.path, "r")
        except OSError as e:
            raise err(self.path, f"not a readable HDF5 file ({e})") from None
        out = {}
        for k, v in self._h5.items():
            if isinstance(v, h5py.Dataset):
                if v.ndim != 1:
                    raise err(
                        self.path,
                        f"column {k}: must be 1-d (one value per task), has shape {v.shape}",
                    )
                out[k] = v.shape[0]
        self._read = lambda c, a, b: self._h5[c][a:b]
        return out

    def _open_csv(self) -> dict[str, int]:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 (kept open for reads)
        except OSError as e:
            raise err(self.path, f"cannot be read ({e.strerror or e})") from None
        self._fh = fh
        raw = fh.readline(MAX_LINE + 1)  # bounded: a file without line breaks is not read whole
        self._check_text(raw, 0, 0, len(raw) > MAX_LINE)
        header = raw.decode("utf-8", "replace").strip()
        self._csv_names = [h.strip() for h in header.split(",")]
        starts = [np.array([fh.tell()], dtype=np.int64)]  # offsets of rows 0, ROW_BLOCK, …
        rows = 0  # newlines seen
        pos = fh.tell()
        line_at = pos  # where the current line starts
        last = b"\n"
        while True:
            buf = fh.read(1 << 22)
            if not buf:
                break
            last = buf[-1:]
            arr = np.frombuffer(buf, dtype=np.uint8)
            nl = np.flatnonzero(arr == 10)
            ends = np.concatenate([pos + nl, [pos + len(buf)]])  # a line's end; the last: so far
            begins = np.concatenate([[line_at], pos + nl + 1])
            long = np.flatnonzero(ends - begins > MAX_LINE)
            self._check_text(buf, pos, rows, long.size > 0, int(long[0]) if long.size else 0)
            # the newline ending row r (0-based) starts row r+1: index it when r+1 is a block start
            first = (-(rows + 1)) % ROW_BLOCK
            starts.append(pos + nl[first::ROW_BLOCK] + 1)
            if nl.size:
                line_at = pos + int(nl[-1]) + 1
            rows += len(nl)
            pos += len(buf)
        if last != b"\n":
            rows += 1  # a last row without its newline
        self._starts = np.concatenate(starts)
        self._end = pos
        self._read = self._read_csv
        return dict.fromkeys(self._csv_names, rows)

    def _check_text(
        self, buf: bytes, pos: int, rows: int, too_long: bool, long_line: int = 0
    ) -> None:
        """ConfigError when ``buf`` (read at byte ``pos``, after ``rows`` line breaks) cannot be
        part of a CSV table: a NUL byte (binary data, or a region of a sparse file never
        written) or a line longer than :data:`MAX_LINE`, found as the index pass meets it, so
        such a file is refused in bounded memory and time, however large it claims to be."""
        nul = buf.find(b"\0")
        if nul >= 0:
            line = (rows + 1 if pos else 0) + buf.count(b"\n", 0, nul) + 1  # the header: line 1
            raise err(
                self.path,
                f"byte {pos + nul} (line {line}) is a NUL byte: not a text CSV table (a binary file, or a sparse region never written)",
            )
        if too_long:
            line = rows + long_line + 2  # the header is line 1
            raise err(
                self.path,
                f"line {line if pos else 1} is longer than {MAX_LINE} bytes: not a CSV table of numbers (one row per task, a header line of column names)",
            )

    def _read_csv(self, col: str, a: int, b: int) -> np.ndarray:
        if a % ROW_BLOCK:
            raise ValueError("task table: CSV reads start on a multiple of ROW_BLOCK")
        key = (a, b)
        if getattr(self, "_csv_last", (None,))[0] != key:
            lo = self._starts[a // ROW_BLOCK]
            j = -(-b // ROW_BLOCK)
            hi = self._starts[j] if j < len(self._starts) else self._end
            self._fh.seek(lo)
            raw = self._fh.read(hi - lo)
            try:
                data = np.loadtxt(
                    io.BytesIO(raw), delimiter=",", ndmin=2, max_rows=b - a, dtype=np.float64
                )
            except ValueError as e:
                raise err(
                    self.path, f"rows {a + 1}–{b}: cannot parse ({str(e).splitlines()[0]})"
                ) from None
            if data.shape != (b - a, len(self._csv_names)):
                raise err(
                    self.path,
                    f"rows {a + 1}–{b}: expected {b - a} rows of {len(self._csv_names)} values, got shape {data.shape} (blank lines or missing values?)",
                )
            self._csv_last = (key, data)
        return self._csv_last[1][:, self._csv_names.index(col)]

    # -- reading -------------------------------------------------------------------------------
    def read(self, a: int, b: int) -> dict[str, np.ndarray]:
        """Rows a … b−1 as float64 arrays: ``weight``, ``strength``, ``psi`` (and ``counts``)."""
        out = {"weight": self._read(self.weight_name, a, b)}
        for c in REQUIRED + (OPTIONAL if self.has_counts else ()):
            out[c] = self._read(c, a, b)
        for c, v in out.items():
            if v.dtype.kind not in "fiub":
                raise err(self.path, f"column {c}: must be numbers, has dtype {v.dtype}")
            out[c] = np.asarray(v, dtype=np.float64)
        return out

    def counts_total(self, step: int = 1 << 20) -> int:
        """Σ counts (whole numbers ≥ 0, else the one-line error naming the row)."""
        total = 0
        for a in range(0, self.n, step):
            c = self.read(a, min(a + step, self.n))["counts"]
            bad = np.flatnonzero(~np.isfinite(c) | (c < 0) | (c != np.floor(c)))
            if bad.size:
                raise err(
                    self.path,
                    f"column counts, row {a + int(bad[0]) + 1}: must be a whole number ≥ 0, got {c[bad[0]]!r}",
                )
            total += int(np.sum(c.astype(np.int64)))
        if total < 1:
            raise err(
                self.path, "column counts: sums to 0; the training set needs at least one sequence"
            )
        return total


def _check_compressed_size(path: str, zf: zipfile.ZipFile) -> None:
    """ConfigError naming task.table when the compressed columns, which are decompressed whole,
    would not fit in memory: their sizes come from each member's .npy header (read from the
    first bytes of its stream), before anything is decompressed."""
    from ...config.schema import check_memory

    total = 0
    for info in zf.infolist():
        if not info.filename.endswith(".npy") or info.compress_type == zipfile.ZIP_STORED:
            continue
        try:
            with zf.open(info) as fh:
                shape, dtype = read_npy_header(fh)
        except (OSError, ValueError, zipfile.BadZipFile):
            continue  # reported by the read itself, in its own words
        total += int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    check_memory(
        total,
        "task.table",
        f"the compressed columns of {path}, decompressed whole,",
        "store the .npz uncompressed (np.savez, which is read in chunks) or as .h5",
    )


def _npz_member(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """A member of an .npz: memory-mapped when stored uncompressed, else read whole."""
    if info.compress_type != zipfile.ZIP_STORED:
        with zf.open(info) as fh:
            return np.lib.format.read_array(fh, allow_pickle=False)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        local = fh.read(30)
        if local[:4] != b"PK\x03\x04":
            raise ValueError("bad zip member header")
        n_name, n_extra = struct.unpack("<HH", local[26:30])
        fh.seek(info.header_offset + 30 + n_name + n_extra)
        shape, dtype = read_npy_header(fh)
        offset = fh.tell()
    if dtype.hasobject:
        raise ValueError("object arrays are not allowed")
    return _FileColumn(path, dtype, shape, offset)


class _FileColumn:
    """A 1-d array stored raw in a file at ``offset``, read by ranges with ordinary reads (not a
    memory map: mapped pages would count towards the process's resident memory)."""

    def __init__(self, path: str, dtype: np.dtype, shape: tuple, offset: int):
        self.path, self.dtype, self.shape, self.offset = path, dtype, shape, offset
        self.ndim = len(shape)

    def __getitem__(self, sl: slice) -> np.ndarray:
        a, b, _ = sl.indices(self.shape[0])
        n = max(b - a, 0)
        out = np.fromfile(
            self.path, dtype=self.dtype, count=n, offset=self.offset + a * self.dtype.itemsize
        )
        if out.shape[0] != n:
            raise OSError(f"file ends inside rows {a + 1}–{b}")
        return out
