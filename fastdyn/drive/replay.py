"""④ Growing a file that kept no resume state: replay the run, check every row, continue.

A complete file is rewritten without ``/checkpoint`` unless ``output.keep_checkpoint = true``.
Every run is deterministic (minibatches and initial weights are pure functions of the seed and
the step, the loss over the tasks is added in a fixed block order), so the state after the
file's last row is recomputed by running the grown config from its start: the driver writes into
a :class:`ReplayWriter`, which compares each row of the first N (the file's) with the file's,
bit for bit, and writes nothing. The driver checkpoints at every chunk boundary while it replays
(:class:`CaptureSchedule`); the first row after the file's (or the state at row N) opens the file
(:meth:`fastdyn.h5.writer.RunWriter.reopen`, copy-on-write) with that state as its checkpoint,
and the run continues into it as a resumed one does. Until then the file is never opened for
writing: a replayed row that differs (another fastdyn version or machine code, or a file changed
since) raises :class:`ReplayMismatch` naming the series and the row, and the file is left as it
was, as is a replay stopped by a signal.

The closed form's rows (``recomputed``) are not compared: growing recomputes them on the grown
grid and rewrites them (:func:`fastdyn.drive.ode_run.run_ode`). The replay costs about the time of
the original run.
"""

from __future__ import annotations

import contextlib
import tomllib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np

from ..h5 import layout
from ..h5.writer import CHECKPOINT, RunWriter
from .checkpoint import Schedule

#: where a replay says that it starts (:func:`announcing`); None: it says nothing
_say: ContextVar[Callable[[str], None] | None] = ContextVar("fastdyn_replay_say", default=None)


@contextlib.contextmanager
def announcing(say: Callable[[str], None] | None) -> Iterator[None]:
    """Within the block, a replay that starts passes its one line (:func:`note`) to ``say``
    (``fastdyn simulate --resume`` prints it; it is said once the grid of the grown config was
    checked against the file's, so a refused config is not announced as replayed)."""
    token = _say.set(say)
    try:
        yield
    finally:
        _say.reset(token)


def note(config: dict[str, Any]) -> str:
    """The line saying that a file of (stored) ``config`` kept no resume state and is replayed."""
    epochs = config.get("schedule", {}).get("epochs")
    what = (
        f"{epochs} epochs"
        if isinstance(epochs, int)
        else f"its integration to t = {config.get('time', {}).get('t_max', float('nan')):g}"
    )
    return (
        f"no resume state kept: replaying {what} to rebuild it (≈ the original run's time; every "
        "replayed row is checked against the file's, bit for bit); set output.keep_checkpoint = true to skip this"
    )


class ReplayMismatch(ValueError):
    """A replayed row is not the file's bit for bit (one line: the series, the row and both
    values); nothing was written."""


def needs_replay(path: Path) -> bool:
    """Whether the file ``path`` kept no resume state (no ``/checkpoint`` group)."""
    from ..h5.reader import open_file

    f = open_file(path)
    try:
        return CHECKPOINT not in f
    finally:
        f.close()


def _file_rows(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every row series of the file (``/time``, ``/step`` and the datasets growing along rows;
    ``/time`` is also hard-linked beside the series, as :meth:`RunWriter.reopen` finds them),
    verified against their checksums; and its stored config."""
    import h5py

    from ..h5.reader import open_file
    from ..h5.verify import read_verified

    f = open_file(path)
    try:
        names = [n for n in (layout.TIME, layout.STEP) if n in f]

        def visit(name: str, obj: Any) -> None:
            if (
                isinstance(obj, h5py.Dataset)
                and not name.startswith(CHECKPOINT)
                and obj.maxshape
                and obj.maxshape[0] is None
                and name.rsplit("/", 1)[-1] not in (layout.TIME, layout.STEP)
            ):
                names.append(name)

        f.visititems(visit)
        n = f[layout.TIME].shape[0]
        text = f.attrs.get("config", "")
        config = tomllib.loads(text.decode() if isinstance(text, bytes) else str(text))
        return {name: np.asarray(read_verified(f[name]))[:n] for name in names}, config
    finally:
        f.close()


def _as_written(name: str, data: Any, k: int, like: np.ndarray) -> np.ndarray:
    """``k`` rows of ``data`` as :class:`RunWriter` writes them (dtype and broadcast)."""
    dtype = np.int64 if name == layout.STEP else np.float64
    shape = (k, *like.shape[1:])
    a = np.asarray(data, dtype=dtype)
    return np.ascontiguousarray(np.broadcast_to(a.reshape(-1, *shape[1:]), shape))


def _first_difference(old: np.ndarray, new: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """(row, index within it) of the first element whose bits differ, or None."""
    k = old.shape[0]
    a = np.ascontiguousarray(old).view(np.uint8).reshape(k, -1, old.dtype.itemsize)
    b = np.ascontiguousarray(new).view(np.uint8).reshape(k, -1, new.dtype.itemsize)
    bad = (a != b).any(axis=2)
    rows = np.flatnonzero(bad.any(axis=1))
    if not rows.size:
        return None
    i = int(rows[0])
    j = int(np.flatnonzero(bad[i])[0])
    return i, tuple(int(x) for x in np.unravel_index(j, old.shape[1:])) if old.ndim > 1 else ()


class ReplayWriter:
    """The writer a driver gets when it continues a file that kept no resume state: it takes the
    rows of the replay, checks the first :attr:`n_file` against the file, and opens the file for
    writing only once the state after them is known (see the module's docstring). ``spec`` is
    the checkpoint layout the driver declares; ``recomputed`` the series the grown run rewrites
    (not compared); ``config_toml`` the config the grown file takes."""

    keep_checkpoint: bool = False

    def __init__(
        self,
        path: Path,
        spec: dict[str, tuple[tuple[int, ...], Any]],
        config_toml: str | None,
        recomputed: tuple[str, ...] = (),
    ):
        self.path, self.spec, self.config_toml = Path(path), spec, config_toml
        self.file, config = _file_rows(self.path)
        say = _say.get()
        if say is not None:
            say(note(config))
        self.n_file = int(self.file[layout.TIME].shape[0])
        self.recomputed = tuple(r for r in recomputed if r in self.file)
        self.real: RunWriter | None = None
        self._n = 0
        #: the state of the last checkpoint the driver took while replaying: (arrays, rows)
        self._state: tuple[dict[str, np.ndarray], int] | None = None
        #: the rows appended since that state (re-appended when the file opens)
        self._since: list[tuple[Any, dict[str, Any], Any]] = []
        #: every replayed row of the recomputed series, rewritten into the file when it opens
        self._new: dict[str, list[np.ndarray]] = {r: [] for r in self.recomputed}

    @property
    def replaying(self) -> bool:
        """Still before the file opens: the driver checkpoints at every chunk boundary."""
        return self.real is None

    @property
    def n_rows(self) -> int:
        return self._n if self.real is None else self.real.n_rows

    def _check(self, times: Any, rows: dict[str, Any], steps: Any, n0: int, k: int) -> None:
        """ReplayMismatch unless rows ``n0 … n0+k−1`` replayed are the file's, bit for bit."""
        given = {layout.TIME: times, layout.STEP: steps, **rows}
        for name, old in self.file.items():
            if name in self.recomputed:
                continue
            if given.get(name) is None:
                raise ReplayMismatch(f"the replay writes no {name} (the file has it)")
            new = _as_written(name, given[name], len(times), old)[:k]
            hit = _first_difference(old[n0 : n0 + k], new)
            if hit is not None:
                i, j = hit
                row = n0 + i
                at = f"{name}{list(j) if j else ''}"
                where = f"row {row} ({layout.TIME} {self.file[layout.TIME][row].item()!r}"
                if layout.STEP in self.file:
                    where += f", step {int(self.file[layout.STEP][row])}"
                raise ReplayMismatch(
                    f"{at} differs at {where}): {old[(row, *j)].item()!r} in the file, "
                    f"{new[(i, *j)].item()!r} replayed"
                )

    def append(self, times: Any, rows: dict[str, Any], steps: Any = None) -> None:
        if self.real is not None:
            self.real.append(times, rows, steps)
            return
        n0, k = self._n, len(times)
        if n0 < self.n_file:
            self._check(times, rows, steps, n0, min(k, self.n_file - n0))
        for name in self.recomputed:
            self._new[name].append(np.asarray(rows[name], dtype=np.float64))
        self._since.append((times, rows, steps))
        self._n = n0 + k
        if self._n > self.n_file:  # past the file's rows: open it and write
            self._open()

    def checkpoint(self, arrays: dict[str, np.ndarray]) -> None:
        if self.real is not None:
            self.real.checkpoint(arrays)
            return
        if self._n > self.n_file:  # cannot happen: the file opened at the append
            raise AssertionError("replay: a checkpoint past the file's rows before it opened")
        self._state = ({k: np.array(v, copy=True) for k, v in arrays.items()}, self._n)
        self._since = []
        if self._n == self.n_file:  # the state at the file's end: continue in the file
            self._open()

    def _open(self) -> None:
        """Reopen the file at the last state the replay took (all its rows verified), rewrite
        the recomputed rows before it and append the replayed rows after it."""
        from ..h5.writer import Rebuilt

        arrays, rows = self._state if self._state is not None else (None, 0)
        real, _ = RunWriter.reopen(
            self.path, config_toml=self.config_toml, rebuilt=Rebuilt(self.spec, arrays, rows)
        )
        real.keep_checkpoint = self.keep_checkpoint
        self.real = real
        if rows and self.recomputed:
            real.rewrite({r: np.concatenate(self._new[r])[:rows] for r in self.recomputed})
        self._new = {}
        since, self._since = self._since, []
        for times, r, steps in since:
            real.append(times, r, steps)

    def rewrite(self, rows: dict[str, np.ndarray]) -> None:
        if self.real is None:
            raise AssertionError("replay: rewrite before the file opened")
        self.real.rewrite(rows)

    def rows(self, name: str) -> np.ndarray:
        return self.real.rows(name) if self.real is not None else self.file[name][: self._n]

    def close(self, status: str, timings: Any = None, **kw: Any) -> None:
        """Delegated once the file is open. Before: a complete run (no rows after the file's)
        opens it at its last state and closes it; any other end leaves the file as it was."""
        if self.real is None and status.startswith(layout.STATUS_COMPLETE):
            if self._n < self.n_file:  # check_written makes this impossible: never drop rows
                raise ReplayMismatch(
                    f"the replay ended after {self._n} rows, the file has {self.n_file}"
                )
            self._open()
        if self.real is not None:
            self.real.close(status, timings, **kw)

    def abandon(self) -> None:
        if self.real is not None:
            self.real.abandon()


class CaptureSchedule(Schedule):
    """:class:`Schedule` that is due at every chunk boundary while ``writer`` replays."""

    def __init__(self, writer: ReplayWriter, every: Any, progress0: int = 0):
        super().__init__(every, progress0)
        self.writer = writer

    def due(self, progress: int) -> bool:
        return self.writer.replaying or super().due(progress)
