"""The training loop of every trained model.

A model object provides ``n_params``, ``loss_and_grad(theta, prep, grad, idx=None) -> loss``,
``loss_value(theta, prep)``, ``to_arrays(theta)`` and optionally ``observer(tests, eigvecs)``
(what is measured at a save, when the caller passes no ``observe``), ``fused_gd(theta, prep,
lr, n_steps, losses)`` (several GD steps inside one compiled call, used for the reduced path) and
``gd_steps(prep)`` (None, or ``advance(theta, lr, losses, limit) -> steps taken``: up to
``len(losses)`` full-batch GD steps in one compiled call, bit-identical to a ``loss_and_grad`` and
a GD step each, losses[s] the loss before update s, stopping before a step whose loss or gradient
is not finite or whose loss exceeds ``limit``) and ``optimizer_steps(prep)`` (None, or
``advance(theta, batches, update, losses, limit) -> steps taken``: the same for up to
``len(losses)`` steps of any optimiser, with its update ``update`` =
:meth:`Optimizer.update_args`: step s on the samples ``batches[s]``, or on the full set for
``batches`` of shape (0, 0); bit-identical to a ``loss_and_grad`` on those samples and an
``optimizer.step`` each). ``prep`` is the model's prepared data, a
:class:`fastdyn.models._spec.Prepared`: the loop reads only its ``n_samples`` (minibatches draw
from 0..n_samples−1) and ``full_batch`` (no minibatches; GD through ``fused_gd``).
``train`` runs ``n_steps`` optimiser updates, and at each save step s (0 ≤ s ≤ n_steps, the
weights after s updates) calls

    on_save(step, losses, weights)

with ``losses = {"train": L, "test_<name>": …}`` (floats, one per test set) and ``weights`` a dict
of arrays (the model's weights in its own layout, and what its observer adds).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .optim import Optimizer, minibatch_block, minibatch_indices

if TYPE_CHECKING:
    from ..models._spec import Prepared

__all__ = ["EXPLODE", "DivergedError", "hessian_lambda_max", "train"]

#: a training loss above this many times its value at the first save is taken as exploding (GD
#: below its stability bound does not raise the loss; past it the loss grows geometrically and
#: crosses this factor within a few dozen steps, well before it overflows)
EXPLODE = 1e6

#: wall time a block of fused steps (``gd_steps``, ``optimizer_steps``) aims at, s: the stop
#: request is polled between blocks, so a SIGINT is answered within about this long
BLOCK_SECONDS = 0.02
#: steps of the first fused block (later ones are sized from the time per step measured): one, so
#: that no block of a large run takes much longer than BLOCK_SECONDS
FIRST_BLOCK = 1


#: the ``batches`` of a full-batch block of ``optimizer_steps``
_FULL = np.empty((0, 0), dtype=np.int64)


class DivergedError(FloatingPointError):
    """Training produced a non-finite or exploding loss or gradient (message: ``diverged at step
    k: …``, naming the learning rate against the estimated stability bound 2/λ_max, or at step 0
    the initial weights' scale)."""

    def __init__(
        self,
        step: int,
        value: float,
        lr: float,
        lam_max: float | None = None,
        at: int | None = None,
        initial: bool = False,
    ) -> None:
        self.step = step
        self.lam_max = lam_max
        if initial:  # no step taken yet: the learning rate played no part
            why = "that is the loss of the initial weights, before any step: they are too large — lower init.scale"
        elif lam_max is not None and np.isfinite(lam_max) and lam_max > 0:
            bound = 2.0 / lam_max
            if lr > bound:
                why = (f"optim.lr = {lr:g} is above the stability bound 2/λ_max ≈ {bound:.3g} (λ_max ≈ {lam_max:.3g}, "
                       f"the largest Hessian eigenvalue of the training loss at step {at}) — lower optim.lr below {bound:.3g}")  # fmt: skip
            else:
                why = (f"optim.lr = {lr:g} is below the bound 2/λ_max ≈ {bound:.3g} estimated at step {at}, but λ_max grows "
                       f"as the weights do, so the learning rate is still the likely cause — lower optim.lr")  # fmt: skip
        else:
            why = f"the learning rate optim.lr = {lr:g} is probably above the stability limit ~2/λ_max of the loss Hessian — lower optim.lr"
        super().__init__(f"diverged at step {step}: the training loss is {value:.3g}; {why}")


def hessian_lambda_max(
    model, prep: Prepared, theta: np.ndarray, iters: int = 30, seed: int = 0
) -> float:
    """Largest-magnitude Hessian eigenvalue of the full-batch training loss at ``theta``, by power
    iteration on central-difference Hessian-vector products Hv ≈ (∇L(θ+εv) − ∇L(θ−εv))/2ε with
    |v| = 1 and ε = 1e-5·max(1, |θ|) (error O(ε²) times third derivatives: far below the two
    digits a stability bound needs). Returns the Rayleigh quotient vᵀHv of the last iterate; NaN
    if anything is not finite."""
    n = theta.shape[0]
    if not np.all(np.isfinite(theta)) or n == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n)
    v /= np.linalg.norm(v)
    eps = 1e-5 * max(1.0, float(np.linalg.norm(theta)))
    gp, gm = np.zeros(n), np.zeros(n)
    lam = float("nan")
    for _ in range(iters):
        model.loss_and_grad(theta + eps * v, prep, gp, None)
        model.loss_and_grad(theta - eps * v, prep, gm, None)
        hv = (gp - gm) / (2.0 * eps)
        if not np.all(np.isfinite(hv)):
            return float("nan")
        lam = float(v @ hv)
        norm = float(np.linalg.norm(hv))
        if norm == 0.0:
            return 0.0
        v = hv / norm
    return lam


def _default_observer(model, tests: dict, eigvecs: np.ndarray | None):
    """The model's own ``observer(tests, eigvecs)``, else the test-set losses and ``to_arrays``."""
    if hasattr(model, "observer"):
        return model.observer(tests, eigvecs)

    def observe(theta: np.ndarray) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        losses = {f"test_{name}": model.loss_value(theta, tp) for name, tp in tests.items()}
        return losses, model.to_arrays(theta)

    return observe


def train(
    model,
    prep: Prepared,
    theta: np.ndarray,
    optimizer: Optimizer,
    n_steps: int,
    save_steps: np.ndarray,
    on_save: Callable[[int, dict[str, float], dict[str, np.ndarray]], None] | None = None,
    *,
    tests: dict[str, Prepared] | None = None,
    eigvecs: np.ndarray | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    first_step: int = 0,
    on_checkpoint: Callable[[int, np.ndarray, Optimizer], None] | None = None,
    resumed: bool = False,
    observe: Callable[[np.ndarray], tuple[dict[str, float], dict[str, np.ndarray]]] | None = None,
    poll: Callable[[], bool] | None = None,
    explode_ref: float | None = None,
) -> dict[str, np.ndarray]:
    """Train ``theta`` in place; returns the recorded series (one row per save step):
    ``step`` (int64), ``loss/train``, ``loss/test_ic``, ``loss/test_iw`` (present sets),
    ``value_weights`` (n, H), ``Gamma`` (n, D, D), ``Gamma_eig`` (n, D).

    ``batch_size`` (None: full batch) selects minibatches by :func:`minibatch_indices`; the
    recorded train loss is always on the full training set. ``first_step`` resumes a run (the
    optimiser state must then be restored by the caller); with ``resumed`` the save at
    ``first_step`` (already on disk) is not repeated but its step is computed the same way, so the
    run continues bit-identically. ``on_checkpoint(step, theta, optimizer)`` is called after each
    save, before the update (it may raise to stop the run). Raises :class:`DivergedError` for a
    non-finite loss or gradient, or a loss above EXPLODE × the first recorded one.

    ``observe(theta) -> (losses, weights)`` replaces what is measured at a save (default: the
    ``tests`` losses and the model's weights, :func:`_default_observer`); its losses are recorded as
    ``loss/<name>`` and its weights passed to ``on_save``.

    Full-batch GD on a model whose ``gd_steps(prep)`` gives an ``advance``, and the other
    optimisers' steps (full batch or minibatches: the block's batches drawn beforehand by
    :func:`minibatch_block`) on one whose ``optimizer_steps(prep)`` does, run the steps between
    saves in fused blocks of about
    :data:`BLOCK_SECONDS` each; after a block that ends before a
    save, ``poll()`` (a stop request) is asked, and when it answers true ``on_checkpoint`` is
    called at that step (to checkpoint and stop the run).

    Divergence compares the full-batch loss with the first positive one recorded (a save's);
    a resumed run passes that loss as ``explode_ref`` (its file holds it), so it diverges at the
    same step as the run it continues.
    """
    save_steps = np.unique(np.asarray(save_steps, dtype=np.int64))
    if save_steps.size and (save_steps[0] < first_step or save_steps[-1] > n_steps):
        raise ValueError(
            f"schedule.save_steps: must lie in [{first_step}, {n_steps}], got {save_steps[[0, -1]]}"
        )
    tests = tests or {}
    grad = np.zeros(model.n_params)
    rec: dict[str, list] = {"step": [], "loss/train": []}
    for name in tests:
        rec[f"loss/test_{name}"] = []
    P = prep.n_samples
    full = batch_size is None or batch_size >= P or prep.full_batch
    fused = full and optimizer.name == "gd" and hasattr(model, "fused_gd") and prep.full_batch

    advance = None  # advance(first step, losses, limit) -> steps taken: a fused block
    if full and not fused and optimizer.name == "gd" and hasattr(model, "gd_steps"):
        gd = model.gd_steps(prep)
        if gd is not None:

            def advance(first: int, losses: np.ndarray, limit: float) -> int:
                return gd(theta, optimizer.lr, losses, limit)

    elif not fused and not (full and optimizer.name == "gd") and hasattr(model, "optimizer_steps"):
        steps = model.optimizer_steps(prep)
        if steps is not None:
            drawn = [np.empty((0, 0), dtype=np.int64)]  # the blocks' batches, reused

            def advance(first: int, losses: np.ndarray, limit: float) -> int:
                n = losses.shape[0]
                if full:
                    batches = _FULL
                else:
                    if drawn[0].shape[0] < n:
                        drawn[0] = np.empty((n, batch_size), dtype=np.int64)
                    batches = minibatch_block(seed, first, n, P, batch_size, drawn[0][:n])
                return steps(theta, batches, optimizer.update_args(), losses, limit)

    cap = FIRST_BLOCK  # steps of the next fused block
    buf = np.empty(cap if advance is not None else 0)  # the block's losses
    retry = False  # the fused block stopped before a bad step: take it the per-step way

    look = observe if observe is not None else _default_observer(model, tests, eigvecs)

    def save(step: int, train_loss: float) -> None:
        extra, w = look(theta)
        losses = {"train": float(train_loss), **extra}
        rec["step"].append(step)
        for k, v in losses.items():
            rec.setdefault(f"loss/{k}", []).append(v)
        for k in ("value_weights", "Gamma", "Gamma_eig"):
            if k in w:
                rec.setdefault(k, []).append(w[k])
        if on_save is not None:
            on_save(step, losses, w)

    good = {"step": first_step, "theta": theta.copy(), "ref": explode_ref}

    def diverged(step: int, value: float) -> DivergedError:
        if step == 0:
            return DivergedError(step, value, optimizer.lr, initial=True)
        lam = hessian_lambda_max(model, prep, good["theta"])
        return DivergedError(
            step, value, optimizer.lr, abs(lam) if np.isfinite(lam) else None, good["step"]
        )

    k = first_step
    si = int(np.searchsorted(save_steps, first_step))
    while True:
        is_save = si < save_steps.size and save_steps[si] == k
        if k == n_steps and not is_save:
            break
        if fused and not is_save and k < n_steps:
            nxt = int(save_steps[si]) if si < save_steps.size else n_steps
            n = nxt - k
            losses = np.empty(n)
            model.fused_gd(theta, prep, optimizer.lr, n, losses)
            over = ~np.isfinite(losses)
            if good["ref"] is not None:
                over |= losses > EXPLODE * good["ref"]
            bad = np.flatnonzero(over)
            if bad.size or not np.all(np.isfinite(theta)):
                s = k + int(bad[0]) if bad.size else nxt
                raise diverged(s, float(losses[bad[0]]) if bad.size else float("nan"))
            k = nxt
            continue
        if advance is not None and not retry and not is_save and k < n_steps:
            nxt = int(save_steps[si]) if si < save_steps.size else n_steps
            n = min(nxt - k, cap)
            if buf.shape[0] < n:
                buf = np.empty(n)
            # a minibatch's loss is not checked against the full set's (as per step)
            limit = EXPLODE * good["ref"] if full and good["ref"] is not None else np.inf
            t0 = _time.perf_counter()
            done = advance(k, buf[:n], limit)
            dt = _time.perf_counter() - t0
            k += done
            retry = done < n
            if done > 0:  # the next block: about BLOCK_SECONDS at the time per step just seen
                # (at most 4× the last block: one block's timing may hold a compile or noise)
                cap = int(min(max(done * BLOCK_SECONDS / max(dt, 1e-9), 1), 4 * done, 1 << 16))
            if k < nxt and not retry and poll is not None and poll() and on_checkpoint is not None:
                on_checkpoint(k, theta, optimizer)
            continue
        retry = False
        idx = None if full else minibatch_indices(seed, k, P, batch_size)
        L = model.loss_and_grad(theta, prep, grad, idx)
        exploding = good["ref"] is not None and full and L > EXPLODE * good["ref"]
        if not (np.isfinite(L) and np.all(np.isfinite(grad))) or exploding:
            raise diverged(k, L)
        if is_save:
            if not (resumed and k == first_step):
                save(k, L if full else model.loss_value(theta, prep))
            si += 1
            if full and good["ref"] is None and L > 0:
                good["ref"] = float(L)
            good["step"], good["theta"] = k, theta.copy()
            if on_checkpoint is not None and k < n_steps:
                on_checkpoint(k, theta, optimizer)
        if k == n_steps:
            break
        optimizer.step(theta, grad)
        k += 1
    out = {}
    for key, v in rec.items():
        out[key] = np.asarray(v, dtype=np.int64 if key == "step" else np.float64)
    return out
