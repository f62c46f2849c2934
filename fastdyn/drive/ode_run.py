"""④ The ODE / closed-form driver: output times in segments, tasks in chunks, the model's kernels.

The model's :class:`fastdyn.drive.ode_job.OdeJob` says what the tasks are and how to advance and
evaluate them; this module owns everything else, once, for every ODE model:

- the closed form (stateless) first, on the whole output grid in one pass over the tasks;
- then, for each segment of output times (``times_per_segment``) and each chunk of tasks (whole
  blocks of ``reduce.BLOCK``), the model advances the chunk's state to the segment's times; the
  per-block partial losses are added in block order (so the result does not depend on threads,
  chunk size or a split into parts, ``drive/split.py``), the constant loss of the tasks beyond the
  model size is added, and the segment's rows are appended to the file and flushed;
- checkpoints at segment boundaries (the model's state arrays plus ``position = [rows, step]``),
  ``--resume`` (bit-identical), SIGINT/SIGTERM, divergence (a non-finite loss, or one above
  ``EXPLODE`` × the model's starting loss, ``zero_loss``), progress, timings and the final status.
"""

from __future__ import annotations

import time as _time
from typing import Any

import numpy as np

from ..core import stop_flag
from ..h5.layout import time_long_name
from ..h5.writer import RunWriter
from ..reduce import accumulate_blocks, block_partials
from .checkpoint import StopSignals, with_stop_signals
from .lifecycle import Ended, RunRequest, check_written, guarded, open_writer, schedule
from .ode_job import OdeJob
from .ode_maths import ode_job
from .outcome import Outcome, RunFailed
from .progress import Progress

#: a loss this many times its starting value (``zero_loss``) is taken as exploding (gradient flow never
#: raises the train loss, and the test loss of a small-init run is bounded by a few times its
#: initial value; gd past its stability bound grows geometrically and crosses this within a few
#: dozen steps)
EXPLODE = 1e6


def local_track(track: np.ndarray, ch: Any) -> tuple[np.ndarray, np.ndarray]:
    """(local indices in the chunk, positions in the track list) of tracked tasks in chunk ``ch``
    (``track`` holds 1-based task indices)."""
    s0 = ch.first + 1
    m = (track >= s0) & (track < s0 + ch.n)
    return (track[m] - s0).astype(np.int64), np.nonzero(m)[0]


def layout(job: OdeJob) -> tuple[dict[str, tuple[int, ...]], dict[str, np.ndarray]]:
    """(series shapes, static arrays) of an ODE output file."""
    nt = len(job.track)
    series: dict[str, tuple[int, ...]] = {}
    if job.simulate:
        series |= {"loss/test": (), "loss/train": (), "tasks/f": (nt,)}
    if job.theory is not None:
        series |= {"theory/loss/test": (), "theory/loss/train": (), "theory/tasks/f": (nt,)}
    return series, {"tasks/index": job.track, **job.static}


def check_finite(job: OdeJob, chunks: Any, loss: np.ndarray, times: np.ndarray, ref: float) -> None:
    """RunFailed for a non-finite loss in the segment, or one above EXPLODE × ``ref``."""
    bad = ~np.isfinite(loss)
    if ref > 0:
        bad |= loss > EXPLODE * ref
    if bad.any():
        i = int(np.argmax(bad))
        what = (
            "non-finite loss"
            if not np.isfinite(loss[i])
            else f"loss {loss[i]:.3g} > {EXPLODE:g} × its starting value {ref:.3g}"
        )
        raise RunFailed(f"diverged at t = {times[i]:g}: {what}; {job.cause(chunks)}")


def slot_arrays(
    arrays: dict[str, np.ndarray], spec: dict[str, tuple[tuple[int, ...], Any]], simulate: bool
) -> dict[str, np.ndarray]:
    """Every array a checkpoint slot declares (``spec``), so that the slot's crc32 covers what
    :func:`fastdyn.h5.writer.read_checkpoint` reads back: every array of the slot, names
    included. A closed-form-only run (``simulate`` false) has no state to save, but its slots
    still hold the model's state arrays (of width 0): left out, the checkpoint failed its crc32
    and ``--resume`` started over. They are written as zeros (never read back: there is no state
    to restore). A simulating model must save every array it declares (ValueError)."""
    out = dict(arrays)
    for name, (shape, dtype) in spec.items():
        if name in out:
            continue
        if simulate and int(np.prod(shape)):
            raise ValueError(f"checkpoint: the model saved no {name!r} (declared {shape})")
        out[name] = np.zeros(shape, dtype=dtype)
    return out


class _Stopped(Exception):
    """A stop was requested during a pass over the tasks (its results are abandoned)."""


def theory_all(
    job: OdeJob, chunks: Any, stop: Any = None, progress: Any = None
) -> dict[str, np.ndarray]:
    """The closed form on the whole output grid in one pass over the tasks (``_Stopped`` when
    ``stop`` is requested between two chunks); ``progress`` (a :class:`Progress`) shows the
    chunks done."""
    T = len(job.times)
    tot_t, tot_r = np.zeros(T), np.zeros(T)
    f = np.full((T, len(job.track)), np.nan)
    n_chunks = len(getattr(chunks, "spans", ())) or None
    for i, ch in enumerate(chunks):
        if stop is not None and stop.requested:
            raise _Stopped
        if progress is not None and n_chunks:
            progress.phase("closed form", i, n_chunks)
        loc = local_track(job.track, ch)
        pt, pr, ft = job.theory(ch, job.times, loc[0])
        accumulate_blocks(tot_t, pt)
        accumulate_blocks(tot_r, pr)
        if len(loc[0]):
            f[:, loc[1]] = ft.T
    if progress is not None:
        progress.phase(None)
    return {"test": tot_t + job.tail[0], "train": tot_r + job.tail[1], "f": f}


def segment_partials(
    job: OdeJob,
    chunks: Any,
    state: Any,
    a: int,
    k: int,
    stop: Any = None,
    state_chunks: Any = None,
):
    """The one chunk loop of a segment, for the single run and for a part of a split run: advance
    every chunk through output times a … a+k−1 and yield, chunk after chunk, the chunk's
    (local track, block partials of L_test and L_train, tracked f). ``state_chunks`` are the same
    chunks with ``first`` counted from the state's first task (a part's own state), default
    ``chunks``. With ``stop``, a stop requested during the segment abandons it (``_Stopped``):
    the kernels poll the stop flag and return early, and the run ends at its last checkpoint
    instead of finishing a long segment first. A task that used up its step budget fails the
    run at once (RunFailed)."""
    tt = job.times[a : a + k]
    st = None if job.steps is None else job.steps[a : a + k]
    for ch, sch in zip(chunks, chunks if state_chunks is None else state_chunks, strict=True):
        loc = local_track(job.track, ch)
        pt, pr = block_partials(ch.n, k), block_partials(ch.n, k)
        ft = np.zeros((len(loc[0]), k))
        job.advance(sch, state, tt, st, loc[0], pt, pr, ft)
        if stop is not None and stop.requested:  # the kernel may have returned early
            raise _Stopped
        if stop_flag.halted():  # a task used up its step budget: the kernel gave up
            job.to_host()
            raise RunFailed(
                f"{job.failure(job.summary(state)) or 'a task used up its step budget'} "
                f"(the run stopped at once, during output times {a + 1}…{a + k})"
            )
        yield loc, pt, pr, ft


def advance_segment(
    job: OdeJob, chunks: Any, state: Any, a: int, k: int, stop: Any = None, progress: Any = None
) -> dict[str, np.ndarray]:
    """The segment's loss and f rows (:func:`segment_partials`' block partials summed in block
    order, plus the tail); ``progress`` (a :class:`Progress`) shows the chunks done when the
    segment has more than one."""
    tot_t, tot_r = np.zeros(k), np.zeros(k)
    f = np.full((k, len(job.track)), np.nan)
    n_chunks = len(getattr(chunks, "spans", ()))
    what = f"integrating output times {a + 1}…{a + k} of {len(job.times)}"
    if progress is not None and n_chunks > 1:
        progress.phase(what, 0, n_chunks)
    for i, (loc, pt, pr, ft) in enumerate(segment_partials(job, chunks, state, a, k, stop)):
        if progress is not None and n_chunks > 1:
            progress.phase(what, i + 1, n_chunks)
        accumulate_blocks(tot_t, pt)
        accumulate_blocks(tot_r, pr)
        f[:, loc[1]] = ft.T
    if progress is not None:
        progress.phase(None)
    return {"loss/test": tot_t + job.tail[0], "loss/train": tot_r + job.tail[1], "tasks/f": f}


class Chunks:
    """The chunks of a run, in order (the model's ``chunk`` may cache its tables)."""

    def __init__(self, job: OdeJob, spans: list[tuple[int, int]] | None = None):
        self.job = job
        self.spans = list(job.spans if spans is None else spans)

    def __iter__(self):
        for first, n in self.spans:
            yield self.job.chunk(first, n)


@with_stop_signals
def run_ode(stop: StopSignals, request: RunRequest) -> str:
    """Run the config of the registered ODE model of ``request`` into its output; returns the
    final status text. With ``request.resume`` the output is continued from its checkpoint: the
    rows after it are dropped and recomputed, so the file ends bit-identical to an uninterrupted
    run's. A grown run (``request.grown``: output times added after the file's) keeps the
    integrated rows and rewrites the closed form's from the start: it is a function of the config
    alone, but its kernel's last bit depends on the length of the grid it evaluates (a closed form of 41
    against 49 log-spaced times: 3 rows differ by ≤ 1.6e-16 relative), so only recomputing it on
    the grown grid gives the rows of a run made on that grid at once.
    ``stop`` (the signal handlers) is supplied by :func:`fastdyn.drive.checkpoint.with_stop_signals`.

    With ``request.compile_beside`` and no second process of the model's (``request.beside``),
    the generic solver's kernel (``job.precompile``) is compiled in one started here
    (:mod:`fastdyn.drive.compile_beside`), once the model's maths are set up."""
    t_wall = _time.time()
    job: OdeJob = ode_job(request.entry, request.cfg, request.device)
    beside = request.beside
    if beside is None and request.compile_beside:
        from .compile_beside import start_pairs

        beside = start_pairs(job.precompile, request.device)
    try:
        return _run(stop, request, job, beside, t_wall)
    finally:
        if beside is not None and beside is not request.beside:
            beside.close()


def _run(stop: StopSignals, request: RunRequest, job: OdeJob, beside: Any, t_wall: float) -> str:
    """:func:`run_ode` once its job is set up (``beside``: the second process, or None)."""
    output = request.output
    times, steps = job.times, job.steps
    chunks = Chunks(job)
    series, static = layout(job)
    ck_spec = {**job.checkpoint, "position": ((2,), "i8")}  # the arrays of a checkpoint slot
    if request.resume:  # before reopening: the rows written must be this config's first rows
        check_written(output, times, steps)
    writer, ck = open_writer(
        request, checkpoint=ck_spec, series=series, static=static,
        scales={"tasks/index": ("task", 1)}, with_step=steps is not None,
        extra_attrs={"n_represented": job.n_tasks, "tail_loss_test": job.tail[0], "tail_loss_train": job.tail[1], **job.extra_attrs},
        time_long_name=time_long_name(job.integrator), descriptions=job.descriptions,
        recomputed=tuple(n for n in series if n.startswith("theory/")),  # see the docstring
    )  # fmt: skip
    state = job.new_state(chunks, job.n_tasks) if job.simulate else None
    a0 = 0
    if ck is not None:
        a0 = int(ck["position"][0])
        if job.simulate:
            try:
                job.restore(state, ck, chunks, a0, int(ck["position"][1]))
            except ValueError as e:
                raise RunFailed(str(e)) from None
    loss_ref = sum(job.zero_loss(ch) for ch in chunks) + job.tail[0] if job.simulate else 0.0
    seg = max(1, int(job.times_per_segment))
    last_step = None if steps is None else int(steps[-1])
    bar = Progress(len(times), request.progress, start=a0, total_steps=last_step)
    t_kernel = 0.0
    sched = schedule(writer, job.checkpoint_every, a0)
    timings = lambda: {"kernels": t_kernel, "total": _time.time() - t_wall}  # noqa: E731

    def checkpoint(rows: int) -> None:
        k_last = int(steps[rows - 1]) if steps is not None and rows > 0 else 0
        arrays = {"position": np.array([rows, k_last])}
        if job.simulate:
            job.to_host()  # from the GPU, when the state lives there (job.resident)
            arrays |= job.save_state(state)
        writer.checkpoint(slot_arrays(arrays, ck_spec, job.simulate))
        sched.done(rows)

    def loop() -> None:
        nonlocal t_kernel
        if not request.resume:
            checkpoint(0)
        if beside is not None and beside.first:  # the first kernels compile beside, these here
            if not stop.requested:
                bar.phase("compiling kernels", 0, 1)
                beside.compile_here()
                bar.phase("compiling kernels (second process)", 0, 1)
                beside.wait(stop)
                bar.phase(None)
            if stop.requested:
                raise Ended(stop.status(f"before output time {a0 + 1}", output))
        t0 = _time.time()
        try:
            th_all = theory_all(job, chunks, stop, bar) if job.theory is not None else None
        except _Stopped:
            raise Ended(
                stop.status(f"during the closed form, before output time {a0 + 1}", output)
            ) from None
        t_kernel += _time.time() - t0
        if th_all is not None and request.grown and a0 > 0:  # see the docstring
            writer.rewrite({
                "theory/loss/test": th_all["test"][:a0], "theory/loss/train": th_all["train"][:a0],
                "theory/tasks/f": th_all["f"][:a0],
            })  # fmt: skip
        if job.simulate and beside is not None:  # its kernels, compiled in a second process
            bar.phase("compiling the integrator (second process)", 0, 1)
            beside.wait(stop)
            bar.phase(None)
            if stop.requested:  # before the integrator compiles here
                raise Ended(stop.status(f"before output time {a0 + 1}", output))
        for a in range(a0, len(times), seg):
            tt = times[a : a + seg]
            k = len(tt)
            rows: dict[str, np.ndarray] = {}
            if job.simulate:
                t0 = _time.time()
                try:
                    rows = advance_segment(job, chunks, state, a, k, stop, bar)
                except _Stopped:
                    where = f"during output times {a + 1}…{a + k} of {len(times)}; rows after the checkpoint at row {sched.p_last} are recomputed"
                    raise Ended(stop.status(where, output)) from None
                t_kernel += _time.time() - t0
                check_finite(job, chunks, rows["loss/test"], tt, loss_ref)
            if th_all is not None:
                rows |= {
                    "theory/loss/test": th_all["test"][a : a + k],
                    "theory/loss/train": th_all["train"][a : a + k],
                    "theory/tasks/f": th_all["f"][a : a + k],
                }
            writer.append(tt, rows, None if steps is None else steps[a : a + seg])
            bar.update(k, float(tt[-1]), None if steps is None else int(steps[a + k - 1]))
            if a + k < len(times) and (stop.requested or sched.due(a + k)):
                checkpoint(a + k)
            if stop.requested and a + k < len(times):
                raise Ended(
                    stop.status(
                        f"after output time {a + k} of {len(times)} (t = {tt[-1]:g})", output
                    )
                )

    with job.resident():  # the state's home between calls (the device, for a GPU fast path)
        ended = guarded(writer, output, timings, loop, bar)
    if ended is not None:
        return ended
    return finish(job, writer, job.summary(state) if state is not None else {}, timings())


def finish(
    job: OdeJob, writer: RunWriter, counts: dict[str, int], timings: dict[str, float]
) -> str:
    """Close ``writer`` with the final status: complete, or failed when the model says tasks did
    not finish; the integrator counts go to ``solver_<name>`` root attributes."""
    failure = job.failure(counts) if counts else None
    status = Outcome.FAILED.text(failure) if failure else Outcome.COMPLETE.text()
    writer.close(status, timings, attrs={f"solver_{k}": v for k, v in counts.items()})
    return status
