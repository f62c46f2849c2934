"""③ msfr-attn's setup for the trained-model driver: config → sampled sequences, layout, weights.

Series (time t = η·step, the msfr-core gd clock; /step holds the optimiser step):

- ``loss/train``: the full-batch training loss (1/N) Σ_n (ŷ_n − y_n)²/2 at the recorded step;
- ``loss/test``: the population loss Σ_{s≤D} P(s) E(ŷ − y)²/2 from the weights, exactly where a
  closed form exists (sparse linear: Rademacher and Gaussian; sparse softmax: Rademacher), plus the
  tail Σ_{s>D} P(s) Λ_s²/2; otherwise a held-out estimate on ``data.n_test`` fresh sequences of
  all N_s tasks, tasks s > D included (no tail added; root attribute ``test_loss_method`` says which);
- ``tasks/f``: f_s = E[ŷ x_q] of the tracked tasks; with feature noise or tau, on a noise-free
  sequence of task s (the response the closed form f⁰ describes, App. H.2); NaN for softmax there;
- ``theory/loss/test``: the closed form (exact level) and ``ode/loss/test`` (+ ``ode/tasks/f``):
  the msfr-core gd map with η = optim.lr, of the same task table, counts and init (these assume
  block embedding and Rademacher H; they are written for any variant as the reference curve).
  The gd map is MSFR's lane-vectorised gd (:func:`fastdyn.models.msfr.integrate.integrate_gd`).
- ``adapt/loss/test``, ``adapt/tasks/f`` (with ``adapt.factors``): in-context adaptation, the same
  weights tested on sequences whose context tokens carry Λ̃_s = c·Λ_s (exact population values),
  beside ``adapt/theory/tasks/f``: f_s(t) (1 + Λ̃Λ)²/(1 + Λ²)² from the leading-order closed form
  (the authors' t → ∞ formula Λ(1 + Λ̃Λ)²/(1 + Λ²)², spec msfr.md §2; it holds to O(1/ψ)).

``attention.constrained`` holds v_{s;s} = v_x = 0 and w_{s;N+1} = w_y = 0 (their gradient is
zeroed, so every optimiser keeps them at 0). Then f_s = ψ_s Λ_s v_y w_x: with p = v_y, q = w_x,
K = ψΛ, dp/dt = −(#/N) r K q, dq/dt = −(#/N) r K p, i.e. MSFR's leading-order Riccati with κ → K
and g, h → p, q. ``theory/loss/test`` is that closed form (no ``ode/*`` columns: the msfr-core map
is of the unconstrained model), and adaptation is exact: f̃_s = c·f_s at every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.device import Device
from .._spec import Prepared, TrainedSetup
from ..msfr.problem import MsfrProblem, default_track
from . import kernels as K
from . import problem as msfr_seq
from . import weights as W

#: (units, long_name) of msfr-attn's datasets beyond the file format's defaults (the named final
#: weights: :mod:`fastdyn.models.msfr_attn.weights`)
DESCRIPTIONS = {
    "ode/loss/test": (
        "1",
        "test loss of the msfr-core gradient-descent map (same task table, counts and init, "
        "learning rate optim.lr)",
    ),
    "ode/tasks/f": ("1", "task output f_s(t) of the msfr-core gradient-descent map"),
    "theory/loss/test": ("1", "closed-form test loss (exact level; tasks s > D add their tail)"),
    "adapt/factor": ("1", "context strength factor c: context tokens carry c * Lambda_s"),
    "adapt/loss/test": (
        "1",
        "population test loss on sequences whose context tokens carry c * Lambda_s",
    ),
    "adapt/tasks/f": ("1", "task output f_s on sequences whose context tokens carry c * Lambda_s"),
    "adapt/theory/tasks/f": (
        "1",
        "leading-order f_s(t) (1 + c Lambda_s^2)^2 / (1 + Lambda_s^2)^2 "
        "(constrained model: c f_s(t), exact)",
    ),
    "data/task": ("1", "0-based task index of each training sequence"),
    "data/offset": (
        "1",
        "first token of each training sequence in data/x (sequence n: tokens offset[n] to "
        "offset[n+1] - 1, the query last)",
    ),
    "data/x": ("1", "input x of each token (feature x on e_s, label Lambda_s x)"),
    "params/theta": (
        "1",
        "final weights as one flat vector theta (the resume state's layout; the same numbers "
        "as /params/weights/)",
    ),
}


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
            # the held-out set samples all N_s tasks (s ≥ D included): no tail to add
            loss = K.loss_and_grad(theta, self.layout, self.test, self.g, self.ws)
            f = K.clean_response(theta, self.layout, self.lam, self.psi, self.cfg.task.x_dist)
            return loss, f[self.track - 1]
        f, lo = pop
        acc = 0.0
        for v in (self.wtest * lo).tolist():
            acc += v
        return acc + self.tail, f[self.track - 1]

    def adapt(self, theta: np.ndarray, factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per factor c: the population test loss on sequences of strength Λ̃ = cΛ (tail c²·tail)
        and f̃ of the tracked tasks; shapes (n_f,), (n_f, n_track)."""
        lo = np.empty(len(factors))
        f = np.empty((len(factors), len(self.track)))
        for i, c in enumerate(factors.tolist()):
            fs, e2 = K.population(theta, self.layout, c * self.lam, self.psi, self.cfg.task.x_dist)
            acc = 0.0
            for v in (self.wtest * e2).tolist():
                acc += v
            lo[i] = acc + c * c * self.tail
            f[i] = fs[self.track - 1]
        return lo, f


class SequenceModel:
    """The step loop's view of msfr-attn: the loss and gradient on the whole training set or on a
    minibatch of sequences (``idx``); entries ``frozen`` (the constrained model's) get no gradient."""

    def __init__(self, layout: K.Layout, data: Any, frozen: np.ndarray | None = None):
        self.layout, self.data, self.frozen = layout, data, frozen
        self.n_params = layout.n_params
        self.full = K.Workspace(layout, data)
        # the per-sequence S2 and query of sparse linear attention, computed once: minibatches
        # gather theirs from these instead of re-reading their tokens
        self._sums = None if layout.dense else (self.full.s2, self.full.q)
        self._g = np.zeros(layout.n_params)

    def loss_and_grad(
        self, theta: np.ndarray, prep: Prepared, grad: np.ndarray, idx: np.ndarray | None = None
    ) -> float:
        ws = self.full if idx is None else K.Workspace(self.layout, self.data, idx, self._sums)
        loss = K.loss_and_grad(theta, self.layout, self.data, grad, ws)
        if self.frozen is not None:
            grad[self.frozen] = 0.0
        return loss

    def loss_value(self, theta: np.ndarray, prep: Prepared) -> float:
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


def constrained_pairs(ch: Any, theta: np.ndarray, layout: K.Layout, d: int) -> tuple:
    """The constrained model as MSFR's leading-order closed form (docs/theory.md, MSFR): ψ' = ψΛ/(1 + Λ²) makes
    κ' = ψ'(1 + Λ²) = ψΛ = K, and v' = p û, w' = q û (û = (1, Λ)/|u|) give g = p, h = q."""
    vx, vy, wx, wy = K.local_pairs(theta, layout)
    lam = ch.lam[:d]
    nu = np.sqrt(1.0 + lam * lam)
    ux, uy = 1.0 / nu, lam / nu
    psi_k = ch.psi[:d] * lam / (1.0 + lam * lam)
    return lam, psi_k, ch.rate[:d], ch.wtest[:d], vy * ux, vy * uy, wx * ux, wx * uy


def adapt_theory(
    ch: Any, times: np.ndarray, track: np.ndarray, factors: np.ndarray, pairs: tuple | None
) -> np.ndarray:
    """(T, n_f, n_track): the leading-order f_s(t) of the tracked tasks times (1 + Λ̃Λ)²/(1 + Λ²)²
    (unconstrained), or c·f_s(t) of the constrained closed form (exact)."""
    from ..msfr import theory

    i = track - 1
    if pairs is None:
        cols = (ch.lam, ch.psi, ch.rate, ch.v0x, ch.v0y, ch.w0x, ch.w0y)
        f = theory.f_curves(times, *(np.ascontiguousarray(c[i], dtype=np.float64) for c in cols))
        lam = ch.lam[i]
        gain = np.stack([(1.0 + c * lam * lam) ** 2 / (1.0 + lam * lam) ** 2 for c in factors])
    else:
        lam, psi_k, rate, _w, vx, vy, wx, wy = (np.ascontiguousarray(a[i]) for a in pairs)
        f = theory.f_curves(times, lam, psi_k, rate, vx, vy, wx, wy)
        gain = np.stack([np.full(len(i), c) for c in factors])
    return np.ascontiguousarray((gain[:, :, None] * f[None, :, :]).transpose(2, 0, 1))


def setup(cfg: Any, device: Device = Device.CPU) -> TrainedSetup:
    """The trained-model driver's view of a validated msfr-attn config (its kernels run on the
    CPU: ``device`` is the one its entry allows)."""
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
    frozen = K.constrained_indices(layout) if a.constrained else None
    if frozen is not None:
        theta[frozen] = 0.0
    pairs = constrained_pairs(ch, theta, layout, d) if frozen is not None else None
    ev = Evaluator(cfg, problem, layout, lam, psi, ch.wtest, track)
    steps = save_steps(cfg)
    o = cfg.optim
    times = o.lr * steps.astype(np.float64)
    series = {"loss/test": (), "loss/train": (), "tasks/f": (len(track),)}
    ref: dict[str, np.ndarray] = {}
    if cfg.theory.compare and pairs is None:
        series |= {"theory/loss/test": (), "ode/loss/test": (), "ode/tasks/f": (len(track),)}
        from ..msfr.integrate import integrate_gd

        ref = comparison(ch, ev.tail, times, o.lr, track, integrate_gd)
    elif cfg.theory.compare:
        from ..msfr import theory

        series |= {"theory/loss/test": ()}
        ref = {"theory/loss/test": theory.loss_curves(times, *pairs)[0] + ev.tail}
    factors = np.asarray(cfg.adapt.factors, dtype=np.float64)
    nf = len(factors)
    if nf:
        series |= {"adapt/loss/test": (nf,), "adapt/tasks/f": (nf, len(track))}
        series |= {"adapt/theory/tasks/f": (nf, len(track))}
        ref["adapt/theory/tasks/f"] = adapt_theory(ch, times, track, factors, pairs)

    def observe(th: np.ndarray) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        te, f = ev(th)
        if not nf:
            return {"test": te}, {"f": f}
        alo, af = ev.adapt(th, factors)
        return {"test": te}, {"f": f, "adapt_loss": alo, "adapt_f": af}

    def row(
        i: int, step: int, losses: dict[str, float], weights: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        rows = {
            "loss/train": np.array([losses["train"]]),
            "loss/test": np.array([losses["test"]]),
            "tasks/f": np.asarray(weights["f"]).reshape(1, len(track)),
        }
        if nf:
            rows["adapt/loss/test"] = weights["adapt_loss"].reshape(1, nf)
            rows["adapt/tasks/f"] = weights["adapt_f"].reshape(1, nf, len(track))
        return rows | {k: v[i : i + 1] for k, v in ref.items()}

    def final(th: np.ndarray) -> dict[str, np.ndarray]:
        out = {"params/theta": th} | W.datasets(th, layout) if cfg.output.save_weights else {}
        if cfg.data.save:
            out |= {"data/task": data.task, "data/offset": data.offset, "data/x": data.x}
        return out

    scales: dict[str, Any] = {"tasks/index": ("task", 1)}
    if nf:  # explicit axes: n_f may equal the number of tracked tasks
        on_task = {k: len(v) for k, v in series.items() if k.endswith("tasks/f")}
        scales = {
            "tasks/index": ("task", on_task),
            "adapt/factor": ("factor", {k: 1 for k in series if k.startswith("adapt/")}),
        }
    full_batch = o.batch_size == 0 or o.batch_size >= data.n
    return TrainedSetup(
        model=SequenceModel(layout, data, frozen), prep=Prepared(n_samples=data.n), theta=theta, optim=o,
        batch_size=None if full_batch else o.batch_size, epochs=cfg.schedule.epochs, save_steps=steps,
        time_per_step=o.lr, seed=cfg.seed, series=series, observe=observe, row=row, final=final,
        static={"tasks/index": track} | ({"adapt/factor": factors} if nf else {}), scales=scales,
        extra_attrs={"n_represented": d, "n_params": layout.n_params, "n_sequences": data.n, "n_tokens": int(data.x.shape[0]), "tail_loss_test": ev.tail, "test_loss_method": ev.method} | _theory_note(cfg, series),
        checkpoint_every=cfg.output.checkpoint_every,
        dims=W.dims(layout), axes=W.AXES, descriptions=DESCRIPTIONS | W.descriptions(layout),
    )  # fmt: skip


def _theory_note(cfg: Any, series: dict) -> dict[str, str]:
    """A root ``note`` when the closed-form curves assume other tokens than the run's."""
    if cfg.task.x_dist == "rademacher" or not any(
        k.startswith(("theory/", "adapt/theory/")) for k in series
    ):
        return {}
    return {"note": (f"theory/* curves are the closed form for Rademacher tokens (E x⁴ = 1); this run's "
                     f"tokens are {cfg.task.x_dist}, which moves the fixed point at O(1/ψ)")}  # fmt: skip
