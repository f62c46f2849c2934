"""In-context regression runs in memory for the tests: :func:`run_icl` (settings → data, theory,
training → arrays). Runs into a file go through the trained-model driver (``drive/trained.py``)
with the setup of ``models/icl/setup.py``; this is the same loop without the file."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fastdyn.drive.optim import make_optimizer
from fastdyn.drive.train import train
from fastdyn.models.icl import problem as icl_data
from fastdyn.models.icl.settings import ICLSettings, theory_series
from fastdyn.models.icl.setup import batch_size, prepare


def run_icl(
    settings: ICLSettings,
    on_save: Callable[[int, dict[str, float], dict[str, np.ndarray]], None] | None = None,
    data: icl_data.ICLData | None = None,
    on_checkpoint: Callable | None = None,
    resume: dict | None = None,
) -> dict:
    """Do the whole run. ``on_save(step, losses, weights)`` is called at every save step (see
    :func:`fastdyn.drive.train.train`). Returns a dict with ``series`` (the recorded arrays:
    step, loss/…, value_weights, Gamma, Gamma_eig), ``time`` (t/τ = 2η·step), ``theory``
    (:func:`fastdyn.models.icl.settings.theory_series`), ``weights`` (final, paper layout),
    ``theta`` (final flat vector), ``model`` (the model object), ``data`` (the ICLData, or None for
    the population), ``optimizer_state``, ``n_trained`` and ``status`` ("complete"). A divergence
    raises :class:`fastdyn.drive.train.DivergedError` ("diverged at step k: …").
    ``on_checkpoint(step, theta, optimizer)`` is passed to :func:`fastdyn.drive.train.train`;
    ``resume = {"theta", "step", "optimizer"}`` continues from a checkpoint taken at save step
    ``step``."""
    s = settings
    p = prepare(s, data)
    model, theta = p.model, p.theta
    o = s.optim
    opt = make_optimizer(
        o.name, model.n_params, o.lr, beta1=o.beta1, beta2=o.beta2, eps=o.eps,
        weight_decay=o.weight_decay, momentum=o.momentum,
    )  # fmt: skip
    steps = s.schedule.steps()
    first = 0
    if resume is not None:
        theta[...] = resume["theta"]
        opt.load_state(resume["optimizer"])
        first = int(resume["step"])
        steps = steps[steps >= first]
    series = train(
        model, p.prep, theta, opt, s.schedule.epochs, steps, on_save, tests=p.tests,
        eigvecs=p.eigvecs, batch_size=batch_size(s), seed=s.seed, first_step=first,
        on_checkpoint=on_checkpoint, resumed=resume is not None,
    )  # fmt: skip
    time = 2.0 * o.lr * series["step"]
    return {
        "series": series,
        "time": time,
        "theory": theory_series(model, p.eigvals, p.eigvecs, s, time),
        "weights": model.to_arrays(theta),
        "theta": theta,
        "model": model,
        "data": p.data,
        "optimizer_state": opt.state_dict(),
        "n_trained": model.n_trained,
        "status": "complete",
    }
