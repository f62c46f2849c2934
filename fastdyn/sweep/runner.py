"""Run the points of a sweep: in-process one after another, or on any executor.

Each point runs through the public API (:func:`fastdyn.simulate`, i.e. ``drive/``; the sweep never
calls kernels) into its own HDF5 file ``points/<name>.h5``, so no two processes ever write one
file. The index is rewritten (atomically) whenever a point starts (in-process) or finishes.

The executor hook: anything with ``submit(fn, *args) -> future`` whose futures have ``result()``
(``concurrent.futures`` pools, a Dask ``Client``, submitit, ``mpi4py.futures``). The function
submitted, :func:`run_point`, is a module-level function of plain arguments (TOML text, a path), so
it pickles to any worker.
"""

from __future__ import annotations

import math
import os
import signal
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import stop_flag
from ..drive.checkpoint import StopSignals, ask_process, clear_process
from . import index as _index
from .index import Row
from .spec import Point, Sweep, SweepError, in_shard


def run_point(config_toml: str, path: str, threads: int | None = None) -> dict[str, Any]:
    """Run one point config (TOML text) into ``path``; never raises for a failing point.

    Returns ``{"status", "wall_s", "pid"}``; an exception becomes ``failed: <Type>: <message>``.
    ``threads`` caps numba's threads in this process (≤ its NUMBA_NUM_THREADS).
    """
    import tomllib

    t0 = _time.time()
    if stop_flag.requested() and StopSignals._active is None:  # a stopping sweep asked this worker
        return {"status": _index.PENDING, "wall_s": math.nan, "pid": os.getpid()}
    try:
        if threads:
            import numba

            numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
        from ..config.load import from_dict
        from ..drive.run import simulate

        cfg = from_dict(tomllib.loads(config_toml))
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_file() or p.is_symlink():
            p.unlink()  # a stale file of an earlier, unfinished attempt
        status = str(simulate(cfg, p))
    except Exception as e:  # noqa: BLE001 — a failing point is recorded, the sweep goes on
        msg = str(e).splitlines()[0] if str(e) else ""
        status = f"failed: {type(e).__name__}: {msg}" if msg else f"failed: {type(e).__name__}"
    return {"status": status, "wall_s": _time.time() - t0, "pid": os.getpid()}


def _submit(executor: Any, fn: Callable, *args: Any) -> Any:
    """executor.submit, telling Dask that a retry of the same point is a new task (pure=False)."""
    mod = type(executor).__module__
    if mod.startswith("distributed"):
        return executor.submit(fn, *args, pure=False)
    return executor.submit(fn, *args)


@dataclass
class SweepResult:
    """What one invocation did: rows of every point, the names it ran, the index path."""

    index: Path
    rows: dict[int, Row]
    points: list[Point]
    ran: list[str] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)  # process that ran each point
    interrupted: bool = False  # a signal stopped the sweep (continue with --resume)
    signal: str | None = None  # its name (SIGINT or SIGTERM), when the sweep saw it
    mine: set[int] | None = None  # ids of this invocation's points (its shard); None: all

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows.values():
            k = r.status.split(":", 1)[0]
            out[k] = out.get(k, 0) + 1
        return out

    @property
    def failed(self) -> list[str]:
        """This invocation's points (its shard's) whose row says failed. Other shards' rows are
        what their files said at the last scan, and a file another shard is still writing can
        read as unreadable then: that is theirs to report (and the index's next scan)."""
        return [
            p.name
            for p in self.points
            if (self.mine is None or p.id in self.mine)
            and self.rows[p.id].status.startswith("failed")
        ]


class _Index:
    """The in-memory rows plus atomic, locked writes; a shard refreshes other shards' rows from
    their files before each write (so concurrent shards never undo each other's progress)."""

    def __init__(
        self, sweep: Sweep, out_dir: Path, points: list[Point], shard: tuple[int, int] | None
    ):
        self.sweep, self.out_dir, self.points, self.shard = sweep, out_dir, points, shard
        self.rows = _index.scan(out_dir, points)
        self.mine = {p.id for p in points if in_shard(p.id, shard)}
        self._cache: dict = {}  # other shards' files: (inode, mtime, size) → row

    def write(self) -> Path:
        with _index.locked(self.out_dir, self.sweep.index_name):
            if self.shard is not None:
                others = [p for p in self.points if p.id not in self.mine]
                self.rows.update(_index.scan(self.out_dir, others, self._cache))
            return _index.write(
                self.out_dir, self.points, self.rows, self.sweep.text, self.sweep.index_name
            )


def _row_from_result(res: dict[str, Any]) -> Row:
    st = str(res.get("status", "failed: no status"))
    return Row(st, _index.error_of(st), float(res.get("wall_s", math.nan)))


def output_dir(sweep: Sweep, output: str | os.PathLike | None) -> Path:
    """-o DIR, else ``sweep.output``, else ``results/<sweep file stem>``."""
    if output is not None:
        return Path(output)
    if sweep.output is not None:
        return Path(sweep.output)
    return Path("results") / sweep.stem


def run_sweep(
    sweep: Sweep,
    output: str | os.PathLike | None = None,
    *,
    executor: Any = None,
    resume: bool = False,
    shard: tuple[int, int] | None = None,
    threads: int | None = None,
    log: Callable[[str], None] | None = None,
    runner: Callable[..., dict[str, Any]] = run_point,
) -> SweepResult:
    """Run ``sweep`` into ``output`` (a directory); returns a :class:`SweepResult`.

    ``executor=None`` runs the points one after another in this process (numba uses all its
    threads per point); otherwise each point is ``executor.submit``-ted. ``resume`` skips points
    whose file is complete and runs the others once more (a failed point is retried once per
    resume). ``shard=(i, n)`` runs only the points with id ≡ i (mod n), idempotently (complete
    points are skipped), so a SLURM array can be rerun as it is. ``threads`` is passed to every
    point (numba threads of the process that runs it).
    """
    say = log or (lambda s: None)
    points = sweep.points()
    out_dir = output_dir(sweep, output)
    if out_dir.exists() and not out_dir.is_dir():
        raise SweepError(f"--output {out_dir}: exists and is not a directory")
    idx_path = out_dir / sweep.index_name
    if (
        not resume
        and shard is None
        and (idx_path.exists() or any((out_dir / "points").glob("*.h5")))
    ):
        raise SweepError(
            f"--output {out_dir}: already holds a sweep; pass --resume to continue it, --reindex to rebuild its index, or choose another -o"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "points").mkdir(exist_ok=True)
    except OSError as e:
        raise SweepError(f"--output {out_dir}: cannot create it ({e.strerror})") from None
    idx = _Index(sweep, out_dir, points, shard)
    todo = [p for p in points if p.id in idx.mine and not idx.rows[p.id].complete]
    skipped = len(idx.mine) - len(todo)
    say(
        f"{len(points)} points, {len(idx.mine)} in this shard, {skipped} complete, {len(todo)} to run"
    )
    for p in todo:
        idx.rows[p.id] = Row()
    idx.write()
    result = SweepResult(idx_path, idx.rows, points, mine=idx.mine)
    with StopSignals.shared() as stop:
        if executor is None:
            _run_here(todo, idx, result, runner, out_dir, threads, say, stop)
        else:
            _run_on(executor, todo, idx, result, runner, out_dir, threads, say, stop)
    idx.write()
    return result


def _stopped(result: SweepResult, stop: StopSignals) -> bool:
    """Whether a SIGINT/SIGTERM asked the sweep to stop (noted in ``result``)."""
    if stop.requested:
        result.interrupted = True
        result.signal = stop.name
    return result.interrupted


def _run_here(todo, idx, result, runner, out_dir, threads, say, stop) -> None:  # noqa: ANN001
    """The points one after another in this process. A run answers the sweep's signals
    (:meth:`StopSignals.shared`): the first ends the running point at its next chunk as
    ``interrupted`` (resumable) and the sweep before its next point; a second ends the process."""
    try:
        for p in todo:
            if _stopped(result, stop):
                break
            idx.rows[p.id] = Row("running")
            idx.write()
            res = runner(p.config_toml, str(out_dir / p.relpath), threads)
            idx.rows[p.id] = _row_from_result(res)
            result.ran.append(p.name)
            result.pids[p.name] = int(res.get("pid", -1))
            say(f"{p.name}: {idx.rows[p.id].status}")
            idx.write()
            if idx.rows[p.id].status.startswith("interrupted"):
                result.interrupted = True  # SIGINT/SIGTERM stopped the run: stop the sweep too
        _stopped(result, stop)
    except KeyboardInterrupt:
        for p in todo:
            if idx.rows[p.id].status == "running":
                idx.rows[p.id] = Row("interrupted")
        idx.write()
        raise


def _quiet_logs() -> None:
    import logging

    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _quiet(executor: Any) -> None:
    """Before cancelling a stopped sweep's points: Dask's workers and nannies would log each
    cancelled task (``CancelledError``) and each worker they kill on stderr, in the sweep's
    log; they say nothing the index does not (here and, through the client, in the workers)."""
    _quiet_logs()
    if type(executor).__module__.startswith("distributed"):
        try:
            executor.run(_quiet_logs, wait=True)
        except Exception:  # noqa: BLE001 — a worker already gone: nothing to quiet there
            pass


#: after a stop request, how long a sweep waits for its Dask workers' points to stop (each at its
#: next chunk boundary), s; the points still running then are left as a kill leaves them
STOP_WAIT_S = 60.0


def _dask(executor: Any) -> bool:
    return type(executor).__module__.startswith("distributed")


def _on_workers(executor: Any, fn: Callable, *args: Any) -> bool:
    """``fn(*args)`` in every Dask worker process (False when not Dask or a worker failed)."""
    if not _dask(executor):
        return False
    try:
        executor.run(fn, *args, wait=True)
    except Exception:  # noqa: BLE001 — a worker already gone: its points are left as a kill leaves them
        return False
    return True


def _record(idx, result, p, fut, say) -> None:  # noqa: ANN001
    """The row of point ``p`` from its finished future."""
    try:
        res = fut.result()
    except Exception as e:  # noqa: BLE001 — a worker that died (KilledWorker, BrokenProcessPool)
        msg = str(e).splitlines()[0] if str(e) else ""
        res = {"status": f"failed: {type(e).__name__}: {msg}".rstrip(": "), "wall_s": math.nan}
    idx.rows[p.id] = _row_from_result(res)
    if idx.rows[p.id].status != _index.PENDING:  # pending: a stopped worker did not start it
        result.ran.append(p.name)
        result.pids[p.name] = int(res.get("pid", -1))
    say(f"{p.name}: {idx.rows[p.id].status}")


def _stop_workers(executor, futures, pending, idx, result, say, stop) -> list:  # noqa: ANN001
    """A stop request: ask every Dask worker to stop its point as a signal would (at its next
    chunk boundary, ``interrupted``; a point not started returns ``pending`` untouched) and wait
    up to :data:`STOP_WAIT_S` for them; the futures still pending then (returned) are cancelled.
    Another executor cannot be asked: its points not started are cancelled, the others left."""
    signum = int(getattr(signal, stop.signal_name or "SIGINT"))
    if _on_workers(executor, ask_process, signum):
        end = _time.monotonic() + STOP_WAIT_S
        while pending and _time.monotonic() < end:
            for fut in [f for f in pending if f.done()]:
                pending.remove(fut)
                _record(idx, result, futures[fut], fut, say)
            _time.sleep(0.05)
        _on_workers(executor, clear_process)
    return pending


def _run_on(executor, todo, idx, result, runner, out_dir, threads, say, stop) -> None:  # noqa: ANN001
    """The points submitted to ``executor``, recorded as they finish. A SIGINT/SIGTERM stops
    them (:func:`_stop_workers`: on Dask, each at its next chunk boundary, ``interrupted`` and
    resumable), cancels the points not started and stops waiting; the index then holds what the
    point files say (pending for a point without a file)."""
    futures = {}
    pending: list = []
    _on_workers(executor, clear_process)  # a worker an earlier, stopped sweep used
    try:
        for p in todo:
            futures[_submit(executor, runner, p.config_toml, str(out_dir / p.relpath), threads)] = p
        pending = list(futures)
        while pending:
            ready = [f for f in pending if f.done()]
            if not ready:
                if _stopped(result, stop):
                    raise KeyboardInterrupt
                _time.sleep(0.05)
                continue
            for fut in ready:
                pending.remove(fut)
                _record(idx, result, futures[fut], fut, say)
                idx.write()
    except KeyboardInterrupt:
        if result.interrupted:
            pending = _stop_workers(executor, futures, pending, idx, result, say, stop)
        _quiet(executor)
        for fut in pending:
            fut.cancel()
        idx.rows.update(
            {k: v for k, v in _index.scan(out_dir, idx.points).items() if k in idx.mine}
        )
        idx.write()
        if not result.interrupted:
            raise


def settle(sweep: Sweep, result: SweepResult, output: str | os.PathLike | None = None) -> None:
    """After a stopped sweep's executor has shut down: the rows of this invocation's points as
    their files now say. The index written when the signal came is what the files said then; a
    worker may still have finished its point (complete) or stopped it (interrupted) before the
    executor ended, and the index must agree with the files it describes."""
    out_dir = output_dir(sweep, output)
    with _index.locked(out_dir, sweep.index_name):  # other shards' rows too, as _Index.write does
        result.rows.update(_index.scan(out_dir, result.points))
        _unheld_as_interrupted(out_dir, result)
        _index.write(out_dir, result.points, result.rows, sweep.text, sweep.index_name)


def _unheld_as_interrupted(out_dir: Path, result: SweepResult) -> None:
    """This invocation's points whose file says ``running`` while no process writes it: their
    worker ended with the stopped sweep before the point reached a chunk boundary (a point
    still compiling its kernels, say). Their row says so (``interrupted``), not ``running``:
    nothing runs them. The file itself is as a kill leaves it; ``--resume`` runs the point again."""
    from ..h5.lock import holder

    why = "its worker ended with the sweep before the point reached a chunk boundary; fastdyn sweep --resume runs it again"
    for p in result.points:
        row = result.rows[p.id]
        if (result.mine is None or p.id in result.mine) and row.status == "running":
            if holder(out_dir / p.relpath) is None:
                st = f"interrupted: {result.signal or 'SIGINT'}: {why}"
                result.rows[p.id] = Row(st, _index.error_of(st), row.wall_s)


def reindex(sweep: Sweep, output: str | os.PathLike | None = None) -> SweepResult:
    """Rebuild the index of ``sweep`` from the point files present in its output directory."""
    points = sweep.points()
    out_dir = output_dir(sweep, output)
    if not out_dir.is_dir():
        raise SweepError(f"--output {out_dir}: no such directory (nothing to reindex)")
    with _index.locked(out_dir, sweep.index_name):
        rows = _index.scan(out_dir, points)
        path = _index.write(out_dir, points, rows, sweep.text, sweep.index_name)
    return SweepResult(path, rows, points)
