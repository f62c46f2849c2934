"""The generic training loop for the trained ICL models (and any model with the same interface).

A model object provides ``n_params``, ``loss_and_grad(theta, prep, grad, idx=None) -> loss``,
``loss_value(theta, prep)``, ``to_arrays(theta)``, ``gamma(theta)``, ``value_weights(theta)``,
``kappa`` and optionally ``fused_gd(theta, prep, lr, n_steps, losses)`` (several GD steps inside one
compiled call, used for the reduced path). ``train`` runs ``n_steps`` optimiser updates, and at
each save step s (0 ≤ s ≤ n_steps, the weights after s updates) calls

    on_save(step, losses, weights)

with ``losses = {"train": L, "test_ic": …, "test_iw": …}`` (floats, the test sets present) and
``weights`` a dict of arrays: the model's arrays in the paper layout (``to_arrays``) plus the
diagnostics ``value_weights`` (H,), ``Gamma`` (D, D) = κ Σ_i v_i U_i (the in-context predictor
ŷ ≈ βᵀ Γ x_q in paper units) and ``Gamma_eig`` (D,) = e_dᵀ Γ e_d on the eigenvectors of Λ (columns
of ``eigvecs``, eigenvalues decreasing), so the order in which components are learned can be read.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .optim import Optimizer, minibatch_indices


class DivergedError(FloatingPointError):
    """Training produced a non-finite loss or gradient (message: ``diverged at step k: …``)."""

    def __init__(self, step: int, value: float, lr: float) -> None:
        self.step = step
        super().__init__(
            f"diverged at step {step}: the training loss is {value}; the learning rate "
            f"optim.lr = {lr:g} is probably above the stability limit ~2/λ_max of the loss Hessian "
            f"— lower optim.lr"
        )


def diagnostics(model, theta: np.ndarray, eigvecs: np.ndarray | None) -> dict[str, np.ndarray]:
    """value_weights, Gamma (paper units) and Gamma_eig (see module doc)."""
    G = model.kappa * model.gamma(theta)
    out = {"value_weights": model.value_weights(theta), "Gamma": G}
    if eigvecs is not None:
        out["Gamma_eig"] = np.einsum("ad,ab,bd->d", eigvecs, G, eigvecs)
    return out


def train(
    model,
    prep: dict,
    theta: np.ndarray,
    optimizer: Optimizer,
    n_steps: int,
    save_steps: np.ndarray,
    on_save: Callable[[int, dict[str, float], dict[str, np.ndarray]], None] | None = None,
    *,
    tests: dict[str, dict] | None = None,
    eigvecs: np.ndarray | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    first_step: int = 0,
) -> dict[str, np.ndarray]:
    """Train ``theta`` in place; returns the recorded series (one row per save step):
    ``step`` (int64), ``loss/train``, ``loss/test_ic``, ``loss/test_iw`` (present sets),
    ``value_weights`` (n, H), ``Gamma`` (n, D, D), ``Gamma_eig`` (n, D).

    ``batch_size`` (None: full batch) selects minibatches by :func:`minibatch_indices`; the
    recorded train loss is always on the full training set. ``first_step`` resumes a run (the
    optimiser state must then be restored by the caller). Raises :class:`DivergedError`.
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
    P = prep.get("P", 0)
    full = batch_size is None or batch_size >= P or prep["kind"] == "stats"
    fused = (
        full and optimizer.name == "gd" and hasattr(model, "fused_gd") and prep["kind"] == "stats"
    )

    def save(step: int, train_loss: float) -> None:
        losses = {"train": float(train_loss)}
        for name, tp in tests.items():
            losses[f"test_{name}"] = model.loss_value(theta, tp)
        w = model.to_arrays(theta)
        w.update(diagnostics(model, theta, eigvecs))
        rec["step"].append(step)
        for k, v in losses.items():
            rec[f"loss/{k}"].append(v)
        for k in ("value_weights", "Gamma", "Gamma_eig"):
            if k in w:
                rec.setdefault(k, []).append(w[k])
        if on_save is not None:
            on_save(step, losses, w)

    k = first_step
    si = 0
    while True:
        is_save = si < save_steps.size and save_steps[si] == k
        if k == n_steps and not is_save:
            break
        if fused and not is_save and k < n_steps:
            nxt = int(save_steps[si]) if si < save_steps.size else n_steps
            n = nxt - k
            losses = np.empty(n)
            model.fused_gd(theta, prep, optimizer.lr, n, losses)
            bad = np.flatnonzero(~np.isfinite(losses))
            if bad.size or not np.all(np.isfinite(theta)):
                s = k + int(bad[0]) if bad.size else nxt
                raise DivergedError(
                    s, float(losses[bad[0]]) if bad.size else float("nan"), optimizer.lr
                )
            k = nxt
            continue
        idx = None if full else minibatch_indices(seed, k, P, batch_size)
        L = model.loss_and_grad(theta, prep, grad, idx)
        if not (np.isfinite(L) and np.all(np.isfinite(grad))):
            raise DivergedError(k, L, optimizer.lr)
        if is_save:
            save(k, L if full else model.loss_value(theta, prep))
            si += 1
        if k == n_steps:
            break
        optimizer.step(theta, grad)
        k += 1
    out = {}
    for key, v in rec.items():
        out[key] = np.asarray(v, dtype=np.int64 if key == "step" else np.float64)
    return out
