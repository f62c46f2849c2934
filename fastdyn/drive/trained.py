"""④ The trained-model driver: one run loop for every model registered with a ``setup``.

The model's :class:`fastdyn.models._spec.TrainedSetup` says what to train and what to record; this
module owns everything else, once, for every trained model:

- the optimiser (``drive/optim.py``) and the step loop (:func:`fastdyn.drive.train.train`);
- streaming: each save step's row is appended and flushed as soon as it is measured, so a reader
  (or a kill -9) sees every row up to the last save;
- checkpoints at save steps (``output.checkpoint_every``): the flat weights, the optimiser's
  moments and step counter and ``position = [step, rows]``; minibatches are a pure function of
  (seed, step), so ``--resume`` continues bit-identically;
- a first run's second process (:mod:`fastdyn.drive.compile_beside`), compiling the kernels the
  model declares: waited for before the first optimiser update, after the first step's loss,
  gradient and save (the kernels of the later steps, e.g. fused GD steps, are then loaded);
- SIGINT/SIGTERM: finish the step (a save's, or a block of fused GD steps between saves),
  checkpoint, status ``interrupted``, exit 130/143;
- divergence (:class:`fastdyn.drive.train.DivergedError`: status ``failed: diverged at step …``);
- progress on stderr, timings and the final status.
"""

from __future__ import annotations

import time as _time
from typing import Any

import numpy as np

from ..h5 import layout
from ..models._spec import TrainedSetup
from .checkpoint import StopSignals, with_stop_signals
from .lifecycle import Ended, RunRequest, check_written, guarded, open_writer, schedule
from .optim import Optimizer, make_optimizer
from .outcome import Outcome, RunFailed
from .progress import Progress
from .train import DivergedError, train


def optimizer_for(job: TrainedSetup) -> Optimizer:
    """The optimiser the config's ``[optim]`` section names, sized for the model."""
    o = job.optim
    return make_optimizer(
        o.name, job.model.n_params, o.lr, beta1=o.beta1, beta2=o.beta2, eps=o.eps,
        weight_decay=o.weight_decay, momentum=o.momentum,
    )  # fmt: skip


def checkpoint_spec(job: TrainedSetup, opt: Optimizer) -> dict[str, tuple[tuple[int, ...], Any]]:
    """The resume state: weights, optimiser state, position = [step, rows written]."""
    opt_shapes = {f"optim_{k}": (v.shape, v.dtype) for k, v in opt.state.items()}
    return {"theta": ((job.model.n_params,), "f8"), "position": ((2,), "i8"), **opt_shapes}


@with_stop_signals
def run_trained(stop: StopSignals, request: RunRequest) -> str:
    """Train the model of ``request`` per its config into its output; returns the final status
    text. With ``request.resume`` the output continues from its checkpoint; the rows after it are
    dropped and recomputed, bit-identically.
    ``stop`` (the signal handlers) is supplied by :func:`fastdyn.drive.checkpoint.with_stop_signals`."""
    t_wall = _time.time()
    output = request.output
    job: TrainedSetup = request.entry.setup(request.cfg, request.device)
    opt = optimizer_for(job)
    steps = np.unique(np.asarray(job.save_steps, dtype=np.int64))
    if request.resume:  # before reopening: the rows written must be this config's first rows
        check_written(output, job.time_per_step * steps, steps)
    spec = checkpoint_spec(job, opt)
    writer, ck = open_writer(
        request, series=job.series, static=job.static, scales=job.scales,
        with_step=True, extra_attrs=job.extra_attrs, time_units=job.time_units,
        time_long_name=job.time_long_name or layout.time_long_name("trained"), checkpoint=spec, dims=job.dims,
        axes=job.axes, descriptions=job.descriptions,
    )  # fmt: skip
    theta = job.theta
    first = 0
    if ck is not None:
        theta[...] = ck["theta"]
        opt.load_state({k[6:]: v for k, v in ck.items() if k.startswith("optim_")})
        first = int(ck["position"][0])
        steps = steps[steps >= first]
    ref = None  # the divergence baseline: the first positive train loss recorded
    if ck is not None and "loss/train" in job.series:
        recorded = writer.rows("loss/train")
        positive = recorded[recorded > 0.0]
        ref = float(positive[0]) if positive.size else None
    row = {"i": writer.n_rows}
    sched = schedule(writer, job.checkpoint_every, first)
    total = job.epochs
    bar = Progress(
        len(job.save_steps), request.progress, "train", start=writer.n_rows, total_steps=total
    )

    beside = [request.beside] if request.beside is not None else []  # waited for once

    def on_checkpoint(step: int, th: np.ndarray, o: Optimizer) -> None:
        if beside:  # before the first update: the kernels of the later steps, compiled there
            bar.phase("compiling the training steps (second process)", 0, 1)
            beside.pop().wait(stop)
            bar.phase(None)
        if stop.requested or sched.due(step):
            state = {f"optim_{k}": v for k, v in o.state.items()}
            writer.checkpoint({"theta": th, "position": np.array([step, writer.n_rows]), **state})
            sched.done(step)
        if stop.requested:
            raise Ended(stop.status(f"after step {step} of {total}", output))

    def on_save(step: int, losses: dict[str, float], weights: dict[str, np.ndarray]) -> None:
        i = row["i"]
        rows = job.row(i, step, losses, weights)
        writer.append(np.array([job.time_per_step * step]), rows, np.array([step]))
        row["i"] = i + 1
        bar.update(1, job.time_per_step * step, step)

    timings = lambda: {"total": _time.time() - t_wall}  # noqa: E731

    def loop() -> None:
        try:
            train(
                job.model, job.prep, theta, opt, job.epochs, steps, on_save,
                batch_size=job.batch_size, seed=job.seed, first_step=first,
                on_checkpoint=on_checkpoint, resumed=ck is not None, observe=job.observe,
                poll=lambda: stop.requested, explode_ref=ref,
            )  # fmt: skip
        except DivergedError as e:
            raise RunFailed(str(e).splitlines()[0]) from None

    ended = guarded(writer, output, timings, loop, bar)
    if ended is not None:
        return ended
    writer.close(
        Outcome.COMPLETE.text(), timings(), datasets=job.final(theta), dims=job.dims, axes=job.axes,
        descriptions=job.descriptions,
    )  # fmt: skip
    return Outcome.COMPLETE.text()
