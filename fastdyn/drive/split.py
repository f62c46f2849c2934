"""④ A split ODE run: one giant run divided into task-index parts across workers.

Every output number of an ODE run is either per task (tracked f_s, emergence times) or a sum over
tasks formed as per-block partials added in block order (:mod:`fastdyn.reduce`): the ODE driver
(:mod:`fastdyn.drive.ode_run`) zeroes a total per segment and, chunk after chunk, adds that chunk's
block partials one block at a time. A split run cuts the model's chunks (whole blocks, in order)
into ``parts`` contiguous runs of chunks, so each part holds exactly the chunks the single process
would have iterated. Each part (:func:`run_part`, a module-level function of plain arguments, so it
pickles to any executor) advances its own tasks over every output time and returns its block
partials uncombined; the combiner (:func:`run_split`) then adds the parts' blocks in part order —
the same additions in the same order as the single process — and writes the same file. The result
is bit-identical to ``fastdyn simulate`` of the same config, for any number of parts and workers.
Nothing here names a model: the run's :class:`fastdyn.drive.ode_job.OdeJob` does the work.

Differences from a single-process file: no ``/checkpoint`` (a split run is restarted, not resumed)
and a root attribute ``split_parts``. Memory per part: its task tables and state plus 4 × (blocks
in the part) × (output times) float64 of partials, returned to the combiner, which holds the
results of the parts finished but not yet combined.
"""

from __future__ import annotations

import dataclasses
import time as _time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from ..config.load import from_dict, to_toml
from ..h5.layout import time_long_name
from ..h5.writer import RunWriter
from ..reduce import accumulate_blocks, block_partials
from .lifecycle import guarded
from .ode_job import OdeJob
from .ode_run import Chunks, check_finite, finish, layout, local_track, segment_partials


def _setup(cfg: Any) -> tuple[Any, OdeJob]:
    """(registry entry, OdeJob) of an ODE config (ValueError for another kind of model)."""
    from ..core.device import Device
    from ..models.registry import get_model
    from .ode_maths import ode_job

    entry = get_model(cfg.model)
    if entry.kind != "ode":
        raise ValueError(
            f"split: only ODE / closed-form runs (per-task state) can be split by task, got {cfg.model!r}"
        )
    return entry, ode_job(entry, cfg, Device.CPU)


def plan_spans(spans: list[tuple[int, int]], parts: int) -> list[tuple[int, int]]:
    """``(first, n)`` task ranges of at most ``parts`` parts, each a run of whole chunks."""
    if int(parts) < 1:
        raise ValueError(f"split.parts: must be ≥ 1, got {parts}")
    k = min(int(parts), len(spans))
    bounds = [(i * len(spans)) // k for i in range(k + 1)]
    out = []
    for b0, b1 in zip(bounds, bounds[1:], strict=False):
        first = spans[b0][0]
        out.append((first, spans[b1 - 1][0] + spans[b1 - 1][1] - first))
    return out


def plan(cfg: Any, parts: int) -> list[tuple[int, int]]:
    """``(first, n)`` task ranges of at most ``parts`` parts of config ``cfg``."""
    return plan_spans(_setup(cfg)[1].spans, parts)


def run_part(config_toml: str, first: int, n: int, threads: int | None = None) -> dict[str, Any]:
    """Advance tasks first+1 … first+n of the run over every output time; return their block
    partials (blocks in order, all times), tracked f, per-chunk f = 0 losses and solver counts."""
    if threads:
        import numba

        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    cfg = from_dict(tomllib.loads(config_toml))
    _entry, job = _setup(cfg)
    spans = [(f, m) for f, m in job.spans if first <= f < first + n]
    if not spans or spans[0][0] != first or spans[-1][0] + spans[-1][1] != first + n:
        raise ValueError(
            f"run_part: tasks {first}…{first + n} are not a run of whole chunks within the {job.n_tasks} tasks"
        )
    chunks = [job.chunk(f, m) for f, m in spans]
    times, track = job.times, job.track
    T = len(times)
    nb = sum(block_partials(ch.n, 0).shape[0] for ch in chunks)
    out: dict[str, Any] = {"first": first, "n": n}
    if job.simulate:
        sim_t, sim_r = np.zeros((nb, T)), np.zeros((nb, T))
        f_sim = np.full((T, len(track)), np.nan)
        local = [dataclasses.replace(ch, first=ch.first - first) for ch in chunks]  # state indices
        state = job.new_state(local, n)
        seg = max(1, int(job.times_per_segment))
        for a in range(0, T, seg):
            k = len(times[a : a + seg])
            b0 = 0
            for loc, pt, pr, ft in segment_partials(job, chunks, state, a, k, state_chunks=local):
                sim_t[b0 : b0 + pt.shape[0], a : a + k] = pt
                sim_r[b0 : b0 + pt.shape[0], a : a + k] = pr
                b0 += pt.shape[0]
                f_sim[a : a + k, loc[1]] = ft.T
        out |= {"sim_test": sim_t, "sim_train": sim_r, "f_sim": f_sim, "stats": job.summary(state)}
        out["loss_ref_chunks"] = [job.zero_loss(ch) for ch in chunks]
    if job.theory is not None:
        th_t, th_r = np.zeros((nb, T)), np.zeros((nb, T))
        f_th = np.full((T, len(track)), np.nan)
        b0 = 0
        for ch in chunks:
            loc = local_track(track, ch)
            pt, pr, ftt = job.theory(ch, times, loc[0])
            th_t[b0 : b0 + pt.shape[0]] = pt
            th_r[b0 : b0 + pt.shape[0]] = pr
            b0 += pt.shape[0]
            if len(loc[0]):
                f_th[:, loc[1]] = ftt.T
        out |= {"th_test": th_t, "th_train": th_r, "f_th": f_th}
    return out


def _submit(executor: Any, fn: Any, *args: Any) -> Any:
    if type(executor).__module__.startswith("distributed"):
        return executor.submit(fn, *args, pure=False)
    return executor.submit(fn, *args)


def run_split(
    cfg: Any, output: str | Path, parts: int, executor: Any = None, threads: int | None = None
) -> str:
    """Run ODE config ``cfg`` as ``parts`` task ranges (on ``executor``, else one after another
    in this process) and write ``output`` bit-identical to the single-process run; returns the
    status text."""
    t_wall = _time.time()
    entry, job = _setup(cfg)
    text = to_toml(cfg)
    spans = plan_spans(job.spans, parts)
    if executor is None:
        results = (run_part(text, f, n, threads) for f, n in spans)
    else:
        futs = [_submit(executor, run_part, text, f, n, threads) for f, n in spans]
        results = (fu.result() for fu in futs)  # combined in part order as each one arrives
    times, steps, track = job.times, job.steps, job.track
    T = len(times)
    tail_test, tail_train = job.tail
    sim, th = job.simulate, job.theory is not None
    tot = {k: np.zeros(T) for k in ("sim_test", "sim_train", "th_test", "th_train")}
    f_sim, f_th = np.full((T, len(track)), np.nan), np.full((T, len(track)), np.nan)
    stats: dict[str, int] = {}
    loss_ref = 0
    for res in results:  # part order = block order
        for key in tot:
            if key in res:
                accumulate_blocks(tot[key], res[key])
        m = (track > res["first"]) & (track <= res["first"] + res["n"])
        if sim:
            f_sim[:, m] = res["f_sim"][:, m]
            for v in res["loss_ref_chunks"]:
                loss_ref += v
            for k, v in res["stats"].items():
                stats[k] = stats.get(k, 0) + int(v)
        if th:
            f_th[:, m] = res["f_th"][:, m]
    loss_ref = loss_ref + tail_test if sim else 0.0
    series, static = layout(job)
    writer = RunWriter(
        output, model=entry.name, config_toml=text, seed=cfg.seed, series=series, static=static,
        scales={"tasks/index": ("task", 1)}, with_step=steps is not None,
        extra_attrs={"n_represented": job.n_tasks, "tail_loss_test": tail_test, "tail_loss_train": tail_train, **job.extra_attrs, "split_parts": len(spans)},
        time_long_name=time_long_name(job.integrator), descriptions=job.descriptions,
    )  # fmt: skip
    seg = max(1, int(job.times_per_segment))
    timings = lambda: {"total": _time.time() - t_wall}  # noqa: E731

    def loop() -> None:
        for a in range(0, T, seg):
            tt = times[a : a + seg]
            k = len(tt)
            rows: dict[str, np.ndarray] = {}
            if sim:
                check_finite(job, Chunks(job), tot["sim_test"][a : a + k] + tail_test, tt, loss_ref)
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

    ended = guarded(writer, output, timings, loop)
    if ended is not None:
        return ended
    return finish(job, writer, stats, timings())
