"""④ A split MSFR run: one giant run divided into task-index parts across workers.

Every output number of an MSFR run is either per task (tracked f_s, emergence times) or a sum over
tasks formed as per-block partials added in block order (:mod:`fastdyn.reduce`): the run loop
(:func:`fastdyn.drive.msfr_run.run_msfr`) zeroes a total per segment and, chunk after chunk,
adds that chunk's block partials one block at a time. A split run cuts the represented tasks
1..D into ``parts`` contiguous ranges whose boundaries are multiples of the run's chunk size
(``output.chunk_tasks`` rounded to whole blocks), so each part holds exactly the chunks the single
process would have iterated. Each part (:func:`run_part`, a module-level function of plain
arguments, so it pickles to any executor) advances its own tasks over every output time and
returns its block partials uncombined; the combiner (:func:`run_split`) then adds the parts'
blocks in part order — the same additions in the same order as the single process — and writes the
same file. The result is bit-identical to ``fastdyn simulate`` of the same config, for any number
of parts and workers.

Differences from a single-process file: no ``/checkpoint`` (a split run is restarted, not resumed)
and a root attribute ``split_parts``. Memory per part: its task tables and state (~28 float64 per
task) plus 4 × (blocks in the part) × (output times) float64 of partials, returned to the combiner,
which holds the results of the parts finished but not yet combined.
"""

from __future__ import annotations

import dataclasses
import math
import time as _time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from ..config.load import from_dict, to_toml
from ..h5.writer import RunWriter
from ..problems.msfr import MsfrProblem
from ..reduce import BLOCK, accumulate_blocks, block_partials
from .msfr_run import _check_finite, _layout, _local_track, default_track, output_times
from .outcome import Outcome, RunFailed


def chunk_step(cfg: Any) -> int:
    """Tasks per chunk of the single-process run (whole blocks), as MsfrProblem.chunks uses it."""
    return max(BLOCK, (int(cfg.output.chunk_tasks) // BLOCK) * BLOCK)


def plan(cfg: Any, parts: int) -> list[tuple[int, int]]:
    """``(first, n)`` task ranges of at most ``parts`` parts, each a run of whole chunks."""
    if int(parts) < 1:
        raise ValueError(f"split.parts: must be ≥ 1, got {parts}")
    d = int(cfg.task.d)
    step = chunk_step(cfg)
    n_chunks = math.ceil(d / step)
    k = min(int(parts), n_chunks)
    bounds = [(i * n_chunks) // k for i in range(k + 1)]
    return [
        (b0 * step, min(b1 * step, d) - b0 * step)
        for b0, b1 in zip(bounds, bounds[1:], strict=False)
    ]


def _track(cfg: Any, d: int) -> np.ndarray:
    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else default_track(d)
    )
    return track[track <= d]


def run_part(config_toml: str, first: int, n: int, threads: int | None = None) -> dict[str, Any]:
    """Advance tasks first+1 … first+n of the run over every output time; return their block
    partials (blocks in order, all times), tracked f, per-chunk f = 0 losses and solver counts."""
    from . import integrate

    if threads:
        import numba

        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    cfg = from_dict(tomllib.loads(config_toml))
    problem = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    times, steps = output_times(cfg.time, cfg.solver.integrator, cfg.solver.lr)
    track = _track(cfg, problem.d)
    step = chunk_step(cfg)
    if first % step or n < 1 or first + n > problem.d:
        raise ValueError(
            f"run_part: tasks {first}…{first + n} are not a run of whole chunks of {step} within D = {problem.d}"
        )
    chunks = [problem.chunk(f, min(step, first + n - f)) for f in range(first, first + n, step)]
    T = len(times)
    sim = cfg.solver.integrator != "none"
    th = cfg.theory.level != "none"
    nb = sum(block_partials(ch.n, 0).shape[0] for ch in chunks)
    out: dict[str, Any] = {"first": first, "n": n, "track_pos": [], "stats": {}}
    f_sim = np.full((T, len(track)), np.nan)
    if sim:
        sim_t, sim_r = np.zeros((nb, T)), np.zeros((nb, T))
        local = [dataclasses.replace(ch, first=ch.first - first) for ch in chunks]  # state indices
        state = integrate.State.create(local, n)
        seg = max(1, int(cfg.output.times_per_segment))
        for a in range(0, T, seg):
            tt = times[a : a + seg]
            k = len(tt)
            b0 = 0
            for ch, lch in zip(chunks, local, strict=True):
                loc = _local_track(track, ch)
                pt, pr = block_partials(ch.n, k), block_partials(ch.n, k)
                ft = np.zeros((len(loc[0]), k))
                integrate.advance_chunk(
                    cfg.solver,
                    cfg.solver.integrator,
                    lch,
                    state,
                    tt,
                    None if steps is None else steps[a : a + seg],
                    loc[0],
                    pt,
                    pr,
                    ft,
                )
                sim_t[b0 : b0 + pt.shape[0], a : a + k] = pt
                sim_r[b0 : b0 + pt.shape[0], a : a + k] = pr
                b0 += pt.shape[0]
                f_sim[a : a + k, loc[1]] = ft.T
        out |= {"sim_test": sim_t, "sim_train": sim_r, "f_sim": f_sim, "stats": state.summary()}
        out["loss_ref_chunks"] = [float(np.sum(ch.wtest * ch.lam * ch.lam)) / 2 for ch in chunks]
    if th:
        from ..models.msfr import theory

        level = cfg.theory.level
        th_t, th_r = np.zeros((nb, T)), np.zeros((nb, T))
        f_th = np.full((T, len(track)), np.nan)
        b0 = 0
        for ch in chunks:
            pt, pr = block_partials(ch.n, T), block_partials(ch.n, T)
            theory.loss_partials(
                times,
                ch.lam,
                ch.psi,
                ch.rate,
                ch.wtest,
                ch.v0x,
                ch.v0y,
                ch.w0x,
                ch.w0y,
                level,
                pt,
                pr,
            )
            th_t[b0 : b0 + pt.shape[0]] = pt
            th_r[b0 : b0 + pt.shape[0]] = pr
            b0 += pt.shape[0]
            loc = _local_track(track, ch)
            if len(loc[0]):
                sub = ch.select(loc[0])
                ftt = np.zeros((len(loc[0]), T))
                theory.f_curves(
                    times,
                    sub.lam,
                    sub.psi,
                    sub.rate,
                    sub.v0x,
                    sub.v0y,
                    sub.w0x,
                    sub.w0y,
                    level,
                    ftt,
                )
                f_th[:, loc[1]] = ftt.T
        out |= {"th_test": th_t, "th_train": th_r, "f_th": f_th}
    return out


class _LazyChunks:
    """Task tables of the whole run, generated on iteration (for the divergence message only)."""

    def __init__(self, problem: MsfrProblem, step: int):
        self.problem, self.step = problem, step

    def __iter__(self):
        for f, m in self.problem.chunks(self.step):
            yield self.problem.chunk(f, m)


def _submit(executor: Any, fn: Any, *args: Any) -> Any:
    if type(executor).__module__.startswith("distributed"):
        return executor.submit(fn, *args, pure=False)
    return executor.submit(fn, *args)


def run_split(
    cfg: Any, output: str | Path, parts: int, executor: Any = None, threads: int | None = None
) -> str:
    """Run MSFR config ``cfg`` as ``parts`` task ranges (on ``executor``, else one after another
    in this process) and write ``output`` bit-identical to the single-process run; returns the
    status text."""
    from ..models.registry import get_model

    if get_model(cfg.model).kind != "ode":
        raise ValueError(
            f"split: only ODE / closed-form runs (per-task state) can be split by task, got {cfg.model!r}"
        )
    t_wall = _time.time()
    text = to_toml(cfg)
    spans = plan(cfg, parts)
    if executor is None:
        results = (run_part(text, f, n, threads) for f, n in spans)
    else:
        futs = [_submit(executor, run_part, text, f, n, threads) for f, n in spans]
        results = (fu.result() for fu in futs)  # combined in part order as each one arrives
    problem = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    d = problem.d
    integrator, level = cfg.solver.integrator, cfg.theory.level
    times, steps = output_times(cfg.time, integrator, cfg.solver.lr)
    T = len(times)
    track = _track(cfg, d)
    tail_test, tail_train = problem.tail_losses()
    sim, th = integrator != "none", level != "none"
    tot = {k: np.zeros(T) for k in ("sim_test", "sim_train", "th_test", "th_train")}
    f_sim, f_th = np.full((T, len(track)), np.nan), np.full((T, len(track)), np.nan)
    stats: dict[str, int] = {}
    loss_ref = 0
    for res in results:  # part order = block order
        for key in tot:
            if key in res:
                accumulate_blocks(tot[key], res[key])
        if sim:
            m = (track > res["first"]) & (track <= res["first"] + res["n"])
            f_sim[:, m] = res["f_sim"][:, m]
            for v in res["loss_ref_chunks"]:
                loss_ref += v
            for k, v in res["stats"].items():
                stats[k] = stats.get(k, 0) + int(v)
        if th:
            m = (track > res["first"]) & (track <= res["first"] + res["n"])
            f_th[:, m] = res["f_th"][:, m]
    loss_ref = loss_ref + tail_test if sim else 0.0
    series, static = _layout(problem, track, sim, th, level)
    writer = RunWriter(
        output,
        model=cfg.model,
        config_toml=text,
        seed=cfg.seed,
        series=series,
        static=static,
        scales={"tasks/index": ("task", 1)},
        with_step=steps is not None,
        extra_attrs={
            "n_represented": d,
            "tail_loss_test": tail_test,
            "tail_loss_train": tail_train,
            "split_parts": len(spans),
        },
    )
    seg = max(1, int(cfg.output.times_per_segment))
    timings = lambda: {"total": _time.time() - t_wall}  # noqa: E731
    try:
        for a in range(0, T, seg):
            tt = times[a : a + seg]
            k = len(tt)
            rows: dict[str, np.ndarray] = {}
            if sim:
                _check_finite(
                    tot["sim_test"][a : a + k] + tail_test,
                    tt,
                    cfg,
                    _LazyChunks(problem, chunk_step(cfg)),
                    loss_ref,
                )
                rows |= {
                    "loss/test": tot["sim_test"][a : a + k] + tail_test,
                    "loss/train": tot["sim_train"][a : a + k] + tail_train,
                    "tasks/f": f_sim[a : a + k],
                }
            if th:
                rows |= {
                    "theory/loss/test": tot["th_test"][a : a + k] + tail_test,
                    "theory/loss/train": tot["th_train"][a : a + k] + tail_train,
                    "theory/tasks/f": f_th[a : a + k],
                }
            writer.append(tt, rows, None if steps is None else steps[a : a + seg])
    except RunFailed as e:
        status = Outcome.FAILED.text(str(e))
        writer.close(status, timings())
        return status
    except BaseException as e:
        writer.close(
            Outcome.FAILED.text(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"),
            timings(),
        )
        raise
    unfinished = stats.get("step_limit", 0) + stats.get("stalled", 0) + stats.get("diverged", 0)
    attrs = {f"solver_{k}": v for k, v in stats.items()}
    if unfinished:
        status = Outcome.FAILED.text(
            f"{unfinished} tasks did not finish (step limit {stats.get('step_limit', 0)}, stalled {stats.get('stalled', 0)}, diverged {stats.get('diverged', 0)}): "
            f"raise solver.max_steps ({cfg.solver.max_steps}), loosen solver.rtol, or for gd lower solver.lr below ~2/(rate·κ) of the fastest task"
        )
        writer.close(status, timings(), attrs=attrs)
        return status
    writer.close(Outcome.COMPLETE.text(), timings(), attrs=attrs)
    return Outcome.COMPLETE.text()
