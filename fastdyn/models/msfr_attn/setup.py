"""③ msfr-attn's setup for the trained-model driver: config → sampled sequences, layout, weights.

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
  The gd map is the driver's integrator, handed in as ``tools.integrate_gd``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...problems import msfr_seq
from ...problems.msfr import MsfrProblem, default_track
from .._spec import TrainedSetup
from . import kernels as K


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


class SequenceModel:
    """The step loop's view of msfr-attn: the loss and gradient on the whole training set or on a
    minibatch of sequences (``idx``)."""

    def __init__(self, layout: K.Layout, data: Any):
        self.layout, self.data = layout, data
        self.n_params = layout.n_params
        self.full = K.Workspace(layout, data)
        self._g = np.zeros(layout.n_params)

    def loss_and_grad(
        self, theta: np.ndarray, prep: dict, grad: np.ndarray, idx: np.ndarray | None = None
    ) -> float:
        ws = self.full if idx is None else K.Workspace(self.layout, self.data, idx)
        return K.loss_and_grad(theta, self.layout, self.data, grad, ws)

    def loss_value(self, theta: np.ndarray, prep: dict) -> float:
        return K.loss_and_grad(theta, self.layout, self.data, self._g, self.full)


def comparison(
    ch: Any, tail: float, times: np.ndarray, lr: float, track: np.ndarray, integrate_gd: Any
) -> dict[str, np.ndarray]:
    """Closed form (exact level) and msfr-core gd curves of the same task table and init."""
    from ..msfr import theory

    args = (ch.lam, ch.psi, ch.rate, ch.wtest, ch.v0x, ch.v0y, ch.w0x, ch.w0y)
    th, _ = theory.loss_curves(times, *args, "exact")
    res = integrate_gd(*args, times, eta=lr, settle_tol=0.0, track=track - 1)
    return {
        "theory/loss/test": th + tail,
        "ode/loss/test": res.loss_test() + tail,
        "ode/tasks/f": res.f_track.T,
    }


def setup(cfg: Any, tools: Any) -> TrainedSetup:
    """The trained-model driver's view of a validated msfr-attn config."""
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
    lam, psi, _counts = msfr_seq.task_columns(problem)
    theta = K.init_params(
        layout, ch.v0x, ch.v0y, ch.w0x, ch.w0y, cfg.init.scale, cfg.init.scheme, cfg.seed
    )
    track = (
        np.array(sorted(set(cfg.output.track)), dtype=np.int64)
        if cfg.output.track
        else default_track(d)
    )
    track = track[track <= d]
    ev = Evaluator(cfg, problem, layout, lam, psi, ch.wtest, track)
    steps = save_steps(cfg)
    o = cfg.optim
    series = {"loss/test": (), "loss/train": (), "tasks/f": (len(track),)}
    ref: dict[str, np.ndarray] = {}
    if cfg.theory.compare:
        series |= {"theory/loss/test": (), "ode/loss/test": (), "ode/tasks/f": (len(track),)}
        ref = comparison(
            ch, ev.tail, o.lr * steps.astype(np.float64), o.lr, track, tools.integrate_gd
        )

    def observe(th: np.ndarray) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        te, f = ev(th)
        return {"test": te}, {"f": f}

    def row(
        i: int, step: int, losses: dict[str, float], weights: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        rows = {
            "loss/train": np.array([losses["train"]]),
            "loss/test": np.array([losses["test"]]),
            "tasks/f": np.asarray(weights["f"]).reshape(1, len(track)),
        }
        return rows | {k: v[i : i + 1] for k, v in ref.items()}

    def final(th: np.ndarray) -> dict[str, np.ndarray]:
        out = {"params/theta": th} if cfg.output.save_weights else {}
        if cfg.data.save:
            out |= {"data/task": data.task, "data/offset": data.offset, "data/x": data.x}
        return out

    full_batch = o.batch_size == 0 or o.batch_size >= data.n
    return TrainedSetup(
        model=SequenceModel(layout, data), prep={"kind": "data", "P": data.n}, theta=theta, optim=o,
        batch_size=None if full_batch else o.batch_size, epochs=cfg.schedule.epochs, save_steps=steps,
        time_per_step=o.lr, seed=cfg.seed, series=series, observe=observe, row=row, final=final,
        static={"tasks/index": track}, scales={"tasks/index": ("task", 1)},
        extra_attrs={"n_represented": d, "n_params": layout.n_params, "n_sequences": data.n, "n_tokens": int(data.x.shape[0]), "tail_loss_test": ev.tail, "test_loss_method": ev.method},
        checkpoint_every=cfg.output.checkpoint_every,
    )  # fmt: skip
