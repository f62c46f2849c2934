"""④ msfr-attn: config → sampled sequences → trained self-attention → HDF5.

Series (time t = η·step, the msfr-core gd clock; /step holds the optimiser step):

- ``loss/train``: the full-batch training loss (1/N) Σ_n (ŷ_n − y_n)²/2 at the recorded step;
- ``loss/test``: the population loss Σ_{s≤D} P(s) E(ŷ − y)²/2 from the weights, exactly where a
  closed form exists (sparse linear: Rademacher and Gaussian; sparse softmax: Rademacher), plus the
  tail Σ_{s>D} P(s) Λ_s²/2; otherwise a held-out estimate on ``data.n_test`` fresh sequences
  (root attribute ``test_loss_method`` says which);
- ``tasks/f``: f_s = E[ŷ x_q] of the tracked tasks (NaN where no closed form);
- ``theory/loss/test``: the closed form (exact level) and ``ode/loss/test`` (+ ``ode/tasks/f``):
  the msfr-core gd map with η = optim.lr, of the same task table, counts and init (these assume
  block embedding and Rademacher H; they are written for any variant as the reference curve).
"""

from __future__ import annotations

import time as _time
from pathlib import Path
from typing import Any

import numpy as np

from ..config.load import to_toml
from ..h5.writer import RunWriter
from ..models import _spec
from ..models.msfr_attn import kernels as K
from ..problems import msfr_seq
from ..problems.msfr import MsfrProblem
from .msfr_run import default_track
from .optim import make_optimizer, minibatch_indices
from .outcome import Outcome


def save_steps(cfg: Any) -> np.ndarray:
    """Recorded steps: explicit, or 0 plus ``n_saves`` log-spaced integers in 1..epochs."""
    sc = cfg.schedule
    if sc.save_steps:
        return np.unique(np.asarray(sc.save_steps, dtype=np.int64))
    k = np.unique(np.rint(np.geomspace(1, sc.epochs, sc.n_saves)).astype(np.int64))
    return np.concatenate([[0], k])


class Evaluator:
    """Test loss and tracked f_s from the weights (exact closed forms, or a held-out set)."""

    def __init__(self, cfg: Any, problem: MsfrProblem, layout: K.Layout, lam, psi, wtest, track):
        self.cfg, self.layout, self.lam, self.psi, self.wtest, self.track = (
            cfg,
            layout,
            lam,
            psi,
            wtest,
            track,
        )
        self.tail = problem.tail_losses()[0]
        exact = not layout.dense and not (layout.softmax and cfg.task.x_dist != "rademacher")
        self.method = "exact" if exact else "heldout"
        if not exact:
            dn = dict(
                x_dist=cfg.task.x_dist, feature_noise=cfg.data.feature_noise, tau=cfg.data.tau
            )
            self.test = msfr_seq.test_set(problem, cfg.data.n_test, **dn)
            self.ws = K.Workspace(layout, self.test)
            self.g = np.zeros(layout.n_params)

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        pop = K.population(theta, self.layout, self.lam, self.psi, self.cfg.task.x_dist)
        if pop is None:
            loss = K.loss_and_grad(theta, self.layout, self.test, self.g, self.ws)
            return loss, np.full(len(self.track), np.nan)
        f, lo = pop
        acc = 0.0
        for v in (self.wtest * lo).tolist():
            acc += v
        return acc + self.tail, f[self.track - 1]


def run_msfr_attn(cfg: Any, output: Path, *, progress: bool = False) -> str:
    """Train msfr-attn per ``cfg`` into ``output``; returns the final status text."""
    t_wall = _time.time()
    problem = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    d = problem.d
    a = cfg.attention
    dense = cfg.data.feature_noise > 0 or cfg.data.tau > 0
    layout = K.Layout(d, a.embedding, a.kq, a.rank, a.softmax, dense)
    data = msfr_seq.training_set(
        problem, x_dist=cfg.task.x_dist, feature_noise=cfg.data.feature_noise, tau=cfg.data.tau
    )
    K.check_data(layout, data)
    ch = problem.chunk(0, d)
    lam, psi, counts = msfr_seq.task_columns(problem)
    theta = K.init_params(
        layout, ch.v0x, ch.v0y, ch.w0x, ch.w0y, cfg.init.scale, cfg.init.scheme, cfg.seed
    )
    o = cfg.optim
    opt = make_optimizer(
        o.name,
        layout.n_params,
        o.lr,
        beta1=o.beta1,
        beta2=o.beta2,
        eps=o.eps,
        weight_decay=o.weight_decay,
        momentum=o.momentum,
    )
    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else default_track(d)
    )
    track = track[track <= d]
    ev = Evaluator(cfg, problem, layout, lam, psi, ch.wtest, track)
    steps = save_steps(cfg)
    series = {"loss/test": (), "loss/train": (), "tasks/f": (len(track),)}
    if cfg.theory.compare:
        series |= {"theory/loss/test": (), "ode/loss/test": (), "ode/tasks/f": (len(track),)}
    writer = RunWriter(
        output, model="msfr-attn", config_toml=to_toml(cfg), seed=cfg.seed, series=series,
        static={"tasks/index": track}, scales={"tasks/index": ("task", 1)}, with_step=True,
        extra_attrs={"n_represented": d, "n_params": layout.n_params, "n_sequences": data.n, "n_tokens": int(data.x.shape[0]), "tail_loss_test": ev.tail, "test_loss_method": ev.method},
    )  # fmt: skip
    n = data.n
    full = K.Workspace(layout, data)
    grad = np.zeros(layout.n_params)
    t_kernel = 0.0
    rows_t, rows_tr, rows_te, rows_f = [], [], [], []
    status = Outcome.COMPLETE.text()
    save_set = set(steps.tolist())
    try:
        for step in range(cfg.schedule.epochs + 1):
            t0 = _time.time()
            full_batch = o.batch_size == 0 or o.batch_size >= n
            if step in save_set or (full_batch and step < cfg.schedule.epochs):
                train = K.loss_and_grad(theta, layout, data, grad, full)
            if step in save_set:
                if not np.isfinite(train):
                    raise FloatingPointError(
                        f"diverged at step {step}: non-finite training loss (lower optim.lr)"
                    )
                te, f = ev(theta)
                rows_t.append(step)
                rows_tr.append(train)
                rows_te.append(te)
                rows_f.append(f)
            if step == cfg.schedule.epochs:
                break
            if not full_batch:
                idx = minibatch_indices(cfg.seed, step, n, o.batch_size)
                K.loss_and_grad(theta, layout, data, grad, K.Workspace(layout, data, idx))
            opt.step(theta, grad)
            t_kernel += _time.time() - t0
    except FloatingPointError as e:
        status = Outcome.FAILED.text(str(e))
    st = np.asarray(rows_t, dtype=np.int64)
    times = o.lr * st.astype(np.float64)
    rows = {
        "loss/train": np.asarray(rows_tr),
        "loss/test": np.asarray(rows_te),
        "tasks/f": np.asarray(rows_f).reshape(len(st), len(track)),
    }
    if cfg.theory.compare:
        rows |= _comparison(ch, ev.tail, times, o.lr, track)
    writer.append(times, rows, st)
    datasets = {"params/theta": theta} if cfg.output.save_weights else {}
    if cfg.data.save:
        datasets |= {"data/task": data.task, "data/offset": data.offset, "data/x": data.x}
    writer.close(status, {"kernels": t_kernel, "total": _time.time() - t_wall}, datasets=datasets)
    return status


def _comparison(
    ch, tail: float, times: np.ndarray, lr: float, track: np.ndarray
) -> dict[str, np.ndarray]:
    """Closed form (exact level) and msfr-core gd curves of the same task table and init."""
    from ..models.msfr import theory
    from .integrate import integrate_gd

    args = (ch.lam, ch.psi, ch.rate, ch.wtest, ch.v0x, ch.v0y, ch.w0x, ch.w0y)
    th, _ = theory.loss_curves(times, *args, "exact")
    res = integrate_gd(*args, times, eta=lr, settle_tol=0.0, track=track - 1)
    return {
        "theory/loss/test": th + tail,
        "ode/loss/test": res.loss_test() + tail,
        "ode/tasks/f": res.f_track.T,
    }


_spec.register(
    _spec.ModelEntry(
        name="msfr-attn",
        kind="trained",
        summary="linear/softmax self-attention trained on sampled MSFR sequences",
        run=run_msfr_attn,
    )
)
