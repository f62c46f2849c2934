"""④ The MSFR run loop: output times in segments, tasks in chunks, kernels, file.

The closed form (stateless) is evaluated first on the whole output grid in one pass over the
tasks. Then, for each segment of output times (``output.times_per_segment``) and each chunk of
tasks (whole blocks of ``reduce.BLOCK``), the chunk's state is advanced to the segment's times by
the chosen integrator; per-block partial losses are added in block order (so the result does not
depend on threads or chunk size), the constant loss of the tasks beyond the model size is added,
and the segment (simulation and theory rows) is appended to the file and flushed.

State kept between segments: (v, w) of every represented task (4·D floats), the last step size of
each task (dopri5) and the exact reduction's clock where it is used. Task tables are regenerated
per chunk from the seed (cheap), or cached when they fit in ``TABLE_CACHE_BYTES``.
"""

from __future__ import annotations

import time as _time
from pathlib import Path
from typing import Any

import numpy as np

from ..config.load import to_toml
from ..h5.writer import RunWriter
from ..problems.msfr import MsfrProblem, TaskChunk, default_track
from ..reduce import BLOCK, accumulate_blocks, block_partials
from .checkpoint import Schedule, StopSignals, write_error
from .outcome import Outcome, RunFailed
from .progress import Progress

TABLE_CACHE_BYTES = 1 << 30


def output_times(time_cfg: Any, integrator: str, lr: float) -> tuple[np.ndarray, np.ndarray | None]:
    """Output times (and, for gd, the step index of each) from the [time] section."""
    from . import saveat

    return saveat.output_grid(time_cfg, integrator, lr)


class _Chunks:
    """Task tables by chunk, cached when they fit in memory."""

    def __init__(self, problem: MsfrProblem, chunk_tasks: int):
        self.problem = problem
        self.spans = list(problem.chunks(chunk_tasks))
        self.cache: dict[int, TaskChunk] | None = {} if problem.d * 8 * 8 <= TABLE_CACHE_BYTES else None

    def __iter__(self):
        for first, n in self.spans:
            if self.cache is not None and first in self.cache:
                yield self.cache[first]
                continue
            ch = self.problem.chunk(first, n)
            if self.cache is not None:
                self.cache[first] = ch
            yield ch


def run_msfr(cfg: Any, output: Path, *, progress: bool = False, resume: bool = False, model: str | None = None, device: str = "cpu") -> str:
    """Run an MSFR config into ``output``; returns the final status text. With ``resume`` the
    file ``output`` (same config, checked by the caller) is continued from its checkpoint: the
    rows after it are dropped and recomputed, so the file ends bit-identical to an uninterrupted
    run's. The checkpoint (taken at a segment boundary, where every chunk is at the same time) is
    the per-task integrator state (y, step sizes h, |r| before the last step, status, step
    counts) and the position (rows written, gd step); nothing else is random or stateful."""
    from . import integrate

    t_wall = _time.time()
    problem = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    d = problem.d
    integrator = cfg.solver.integrator
    level = cfg.theory.level
    times, steps = output_times(cfg.time, integrator, cfg.solver.lr)
    track = np.array(sorted(set(cfg.output.track)), dtype=np.int64) if cfg.output.track else default_track(d)
    track = track[track <= d]
    tail_test, tail_train = problem.tail_losses()
    chunks = _Chunks(problem, cfg.output.chunk_tasks)

    sim = integrator != "none"
    th = level != "none"
    series, static = _layout(problem, track, sim, th, level)
    n_state = d if sim else 0
    ck_spec = {"y": ((4, n_state), "f8"), "h": ((n_state,), "f8"), "rprev": ((n_state,), "f8"), "status": ((n_state,), "i1"), "steps": ((n_state,), "i8"), "rejected": ((n_state,), "i8"), "position": ((2,), "i8")}
    ck = None
    if resume:
        writer, ck = RunWriter.reopen(output)
    else:
        writer = RunWriter(
            output,
            checkpoint=ck_spec,
            model=model or cfg.model,
            config_toml=to_toml(cfg),
            seed=cfg.seed,
            series=series,
            static=static,
            scales={"tasks/index": ("task", 1)},
            with_step=steps is not None,
            extra_attrs={"n_represented": d, "tail_loss_test": tail_test, "tail_loss_train": tail_train},
        )
    state = integrate.State.create(chunks, d) if sim else None
    a0 = 0
    if ck is not None:
        a0 = int(ck["position"][0])
        if sim:
            _restore(state, ck, chunks, times, steps, a0)
    # divergence reference: the loss with every f_s = 0 (a pure function of the task table)
    loss_ref = sum(float(np.sum(ch.wtest * ch.lam * ch.lam)) / 2 for ch in chunks) + tail_test if sim else 0.0
    seg = max(1, int(cfg.output.times_per_segment))
    bar = Progress(len(times), progress)
    bar.update(a0)
    t_kernel = 0.0
    sched = Schedule(cfg.output.checkpoint_every, a0)
    stop = StopSignals().__enter__()

    def checkpoint(rows: int) -> None:
        k_last = int(steps[rows - 1]) if steps is not None and rows > 0 else 0
        arrays = {"position": np.array([rows, k_last])}
        if sim:
            ts = state.tasks
            arrays |= {"y": ts.y, "h": ts.h, "rprev": ts.rprev, "status": ts.status, "steps": ts.steps, "rejected": ts.rejected}
        writer.checkpoint(arrays)
        sched.done(rows)

    try:
        if not resume:
            checkpoint(0)
        t0 = _time.time()
        th_all = _theory_all(chunks, times, track, level, tail_test, tail_train, device) if th else None
        t_kernel += _time.time() - t0
        for a in range(a0, len(times), seg):
            tt = times[a : a + seg]
            k = len(tt)
            rows: dict[str, np.ndarray] = {}
            tot = {name: np.zeros(k) for name in ("test", "train")}
            f_sim = np.full((k, len(track)), np.nan)
            t0 = _time.time()
            for ch in chunks if sim else ():
                loc = _local_track(track, ch)
                pt, pr = block_partials(ch.n, k), block_partials(ch.n, k)
                ft = np.zeros((len(loc[0]), k))
                integrate.advance_chunk(cfg.solver, integrator, ch, state, tt, None if steps is None else steps[a : a + seg], loc[0], pt, pr, ft, device=device)
                accumulate_blocks(tot["test"], pt)
                accumulate_blocks(tot["train"], pr)
                f_sim[:, loc[1]] = ft.T
            t_kernel += _time.time() - t0
            if sim:
                _check_finite(tot["test"] + tail_test, tt, cfg, chunks, loss_ref)
                rows |= {"loss/test": tot["test"] + tail_test, "loss/train": tot["train"] + tail_train, "tasks/f": f_sim}
            if th:
                rows |= {"theory/loss/test": th_all["test"][a : a + k], "theory/loss/train": th_all["train"][a : a + k], "theory/tasks/f": th_all["f"][a : a + k]}
            writer.append(tt, rows, None if steps is None else steps[a : a + seg])
            bar.update(k)
            if a + k < len(times) and (stop.requested or sched.due(a + k)):
                checkpoint(a + k)
            if stop.requested and a + k < len(times):
                status = stop.status(f"after output time {a + k} of {len(times)} (t = {tt[-1]:g})", output)
                writer.close(status, {"kernels": t_kernel, "total": _time.time() - t_wall})
                return status
    except OSError as e:  # the disk is full or the file system went away: keep what was flushed
        writer.abandon()
        raise RunFailed(write_error(output, e)) from None
    except KeyboardInterrupt:
        writer.close(Outcome.INTERRUPTED.text(), {"kernels": t_kernel, "total": _time.time() - t_wall})
        raise
    except RunFailed as e:
        status = Outcome.FAILED.text(str(e))
        writer.close(status, {"kernels": t_kernel, "total": _time.time() - t_wall})
        return status
    except BaseException as e:
        writer.close(Outcome.FAILED.text(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"), {"kernels": t_kernel})
        raise
    finally:
        stop.__exit__()
        bar.close()
    stats = state.summary() if state is not None else {}
    unfinished = stats.get("step_limit", 0) + stats.get("stalled", 0) + stats.get("diverged", 0)
    if unfinished:
        status = Outcome.FAILED.text(
            f"{unfinished} tasks did not finish (step limit {stats.get('step_limit', 0)}, stalled {stats.get('stalled', 0)}, diverged {stats.get('diverged', 0)}): "
            f"raise solver.max_steps ({cfg.solver.max_steps}), loosen solver.rtol, or for gd lower solver.lr below ~2/(rate·κ) of the fastest task"
        )
        writer.close(status, {"kernels": t_kernel, "total": _time.time() - t_wall}, attrs={f"solver_{k}": v for k, v in stats.items()})
        return status
    writer.close(Outcome.COMPLETE.text(), {"kernels": t_kernel, "total": _time.time() - t_wall}, attrs={f"solver_{k}": v for k, v in stats.items()})
    return Outcome.COMPLETE.text()


def _theory_all(chunks: _Chunks, times: np.ndarray, track: np.ndarray, level: str, tail_test: float, tail_train: float, device: str = "cpu") -> dict[str, np.ndarray]:
    """The closed form on the whole output grid in one pass over the tasks.

    The closed form needs no state, so one pass serves every segment; the exact level's adaptive
    τ integration then also sees the same output times whatever the segmentation, which keeps
    the result bit-identical for any ``times_per_segment``.
    """
    from ..models.msfr import theory

    T = len(times)
    tot_t, tot_r = np.zeros(T), np.zeros(T)
    f = np.full((T, len(track)), np.nan)
    for ch in chunks:
        pt, pr = block_partials(ch.n, T), block_partials(ch.n, T)
        theory.loss_partials(times, ch.lam, ch.psi, ch.rate, ch.wtest, ch.v0x, ch.v0y, ch.w0x, ch.w0y, level, pt, pr, device=device)
        accumulate_blocks(tot_t, pt)
        accumulate_blocks(tot_r, pr)
        loc = _local_track(track, ch)
        if len(loc[0]):
            sub = ch.select(loc[0])
            ftt = np.zeros((len(loc[0]), T))
            theory.f_curves(times, sub.lam, sub.psi, sub.rate, sub.v0x, sub.v0y, sub.w0x, sub.w0y, level, ftt)
            f[:, loc[1]] = ftt.T
    return {"test": tot_t + tail_test, "train": tot_r + tail_train, "f": f}


def _local_track(track: np.ndarray, ch: TaskChunk) -> tuple[np.ndarray, np.ndarray]:
    """(local indices in the chunk, positions in the track list) of tracked tasks in this chunk."""
    s0 = ch.first + 1
    m = (track >= s0) & (track < s0 + ch.n)
    return (track[m] - s0).astype(np.int64), np.nonzero(m)[0]


def _emergence(problem: MsfrProblem, track: np.ndarray, level: str) -> np.ndarray:
    from ..models.msfr import theory

    out = np.full(len(track), np.nan)
    for i, s in enumerate(track):
        first = (int(s) - 1) // BLOCK * BLOCK
        ch = problem.chunk(first, min(BLOCK, problem.d - first)).select(np.array([int(s) - 1 - first]))
        out[i] = theory.emergence_times(ch.lam, ch.psi, ch.rate, ch.v0x, ch.v0y, ch.w0x, ch.w0y, level)[0]
    return out


#: a loss this many times its value at t = 0 is taken as exploding (gradient flow never raises the
#: train loss, and the test loss of an MSFR run is bounded by a few times its initial value; gd past
#: its stability bound grows geometrically and crosses this within a few dozen steps)
EXPLODE = 1e6


def _layout(problem: Any, track: np.ndarray, sim: bool, th: bool, level: str) -> tuple[dict, dict]:
    """(series shapes, static arrays) of an MSFR output file: simulated and/or theory losses and
    tracked f, the tracked task indices and (with theory) their emergence times."""
    series: dict[str, tuple[int, ...]] = {}
    if sim:
        series |= {"loss/test": (), "loss/train": (), "tasks/f": (len(track),)}
    if th:
        series |= {"theory/loss/test": (), "theory/loss/train": (), "theory/tasks/f": (len(track),)}
    static = {"tasks/index": track}
    if th:
        static["tasks/emergence"] = _emergence(problem, track, "leading" if level == "leading" else "first_order")
    return series, static


def _check_finite(loss: np.ndarray, times: np.ndarray, cfg: Any = None, chunks: Any = None, ref: float = 0.0) -> None:
    """Divergence within a segment: a non-finite loss, or one above EXPLODE × ``ref`` (the loss
    with every f_s = 0, which small-init runs start at)."""
    bad = ~np.isfinite(loss)
    if ref > 0:
        bad |= loss > EXPLODE * ref
    if bad.any():
        t = times[np.argmax(bad)]
        what = "non-finite loss" if not np.isfinite(loss[np.argmax(bad)]) else f"loss {loss[np.argmax(bad)]:.3g} > {EXPLODE:g} × its initial value"
        raise RunFailed(f"diverged at t = {t:g}: {what}; {_cause(cfg, chunks)}")


def gd_stability_bound(chunks: Any, query: bool = True) -> tuple[float, int]:
    """(2/λ_max, s): the largest stable gd learning rate near convergence and the task that sets it.

    gd is y ← y + η F(y) with F the flow's right-hand side; at a task's minimum (r = 0) the
    Jacobian of F along the converging direction has eigenvalue −λ with λ = rate·λmax(H)·|Λ|
    (:func:`fastdyn.models.msfr.ode.rate_scale` at r = 0), so gd is stable there iff η·λ < 2.
    (tests/reliability/test_divergence.py checks 0.8× the bound converges and 1.25× diverges.)"""
    best, arg = 0.0, 1
    q = 1.0 if query else 0.0
    for ch in chunks:
        lam, psi = np.abs(ch.lam), ch.psi
        tr = psi * (1.0 + lam * lam) + q
        eig = 0.5 * (tr + np.sqrt(np.maximum(tr * tr - 4.0 * psi * q * lam * lam, 0.0)))
        lmax = ch.rate * eig * lam
        if lmax.size and lmax.max() > best:
            best, arg = float(lmax.max()), ch.first + 1 + int(np.argmax(lmax))
    return (2.0 / best if best > 0 else float("inf")), arg


def _cause(cfg: Any, chunks: Any) -> str:
    """The likely cause of a divergence, for the message."""
    if cfg is None or chunks is None:
        return "lower solver.lr (gd) or tighten solver.rtol"
    if cfg.solver.integrator == "gd":
        bound, s = gd_stability_bound(chunks)
        lr = cfg.solver.lr
        if lr > bound:
            return f"solver.lr = {lr:g} is above the gd stability bound 2/λ_max ≈ {bound:.3g} (λ_max ≈ {2 / bound:.3g}, set by task s = {s}); lower solver.lr below {bound:.3g}"
        return f"solver.lr = {lr:g} is below the estimated bound 2/λ_max ≈ {bound:.3g} (task s = {s}), so the early transient (|r| ≈ Λ) is the likely cause; lower solver.lr"
    return f"the {cfg.solver.integrator} integrator produced non-finite values; tighten solver.rtol or raise solver.steps_per_timescale"


def _restore(state: Any, ck: dict[str, np.ndarray], chunks: _Chunks, times: np.ndarray, steps: np.ndarray | None, a0: int) -> None:
    """Put the checkpointed per-task state and every chunk's clock back."""
    ts = state.tasks
    for name in ("y", "h", "rprev", "status", "steps", "rejected"):
        arr = getattr(ts, name)
        if ck[name].shape != arr.shape:
            raise RunFailed(f"checkpoint: {name} has shape {ck[name].shape}, the config needs {arr.shape}")
        arr[...] = ck[name]
    if a0 > 0:
        for first, _n in chunks.spans:
            state.t_at[first] = float(times[a0 - 1])
            if steps is not None:
                state.k_at[first] = int(ck["position"][1])


def run_ode(entry: Any, cfg: Any, output: Path, *, progress: bool = False, resume: bool = False, device: str = "cpu") -> str:
    """The ODE / closed-form driver's entry: runs ``cfg`` of the registered ODE model ``entry``
    with its kernels on ``device`` ("cpu" or "cuda", from :func:`fastdyn.drive.device.resolve`)."""
    return run_msfr(cfg, output, progress=progress, resume=resume, model=entry.name, device=device)
