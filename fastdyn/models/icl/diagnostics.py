"""What the ICL models record at every save (:func:`observer`, the trained-model driver's
``observe``): the test losses, the weights in paper layout, Γ with its eigen-projections and the
value weights (:func:`diagnostics`), and the opt-in streamed diagnostics below: head alignment,
in-weight norms and weight snapshots, one row per save on the same grid as the losses.

``output.diagnostics = true``:

- ``/diagnostics/head_cosine`` (save × H × H, written when H ≤ :data:`MATRIX_MAX_HEADS`) and
  ``/diagnostics/head_cosine_min``, ``/diagnostics/head_cosine_mean`` (save; the smallest and the
  mean off-diagonal entry, i < j): the cosine between the heads' *functions*
  Γ_i = v_i U_i (ATTN_M, U_i = W^KQ_i[:D, :D]), Γ_i = v_i Σ_r k_ir q_irᵀ (ATTN_S, the head's
  rank-R key-query product on the x coordinates) and Γ_i = w2_i mat(W1_i) (mlp-cubic), flattened,
  so that Γ = Σ_i Γ_i. This is the paper's "the heads become parallel" (ATTN_M, App. C / Fig. 1's
  two-layer-network picture: from small init W_1 becomes rank one, U_i ∝ U_j): the cosine of
  U_i alone would be ±1 by the sign of v_i, that of v_i U_i is +1 when every head adds the same
  function. For ATTN_S the heads learn different eigen-directions, so the off-diagonal cosines go
  to 0 instead. A head with Γ_i = 0 has an undefined cosine: NaN (left out of min and mean; NaN
  when no pair is defined, e.g. H = 1). The H × H matrix is stored only for H ≤ 16 (it grows as
  H²; the min and mean are always written). Softmax variants get the same weight products
  (there they are the heads' score matrices times v_i, not a linear predictor).
- ``/diagnostics/in_weight_norm_v`` and ``/diagnostics/in_weight_norm_u`` (save × H, attn-m and
  attn-s only): |𝐯_i| = |r_i[:D]| (the value weights on the x coordinates, row D of W^V_i) and
  |𝐮_i| = |W^KQ_i[D, :D]| (ATTN_M: the label row of W^KQ_i) or |W^K_i[:, D]| (ATTN_S: the keys'
  scalar label entries, R of them); both stay 0 for ``ic_only`` / ``reduced``.

``output.snapshots = true``: ``/params/snapshots/<name>`` (save × the shape of
``/params/final/<name>``), the weights in paper layout (``model.to_arrays``) at every save; the
row of the last save (step = ``schedule.epochs``) is bitwise ``/params/final/<name>``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the H × H cosine matrix is streamed for at most this many heads (min and mean always)
MATRIX_MAX_HEADS = 16

PREFIX = "diagnostics/"
SNAPSHOTS = "params/snapshots/"


def head_functions(model: Any, theta: np.ndarray) -> np.ndarray:
    """Γ_i (H, D, D): each head's contribution to Γ = Σ_i Γ_i (model units)."""
    D = model.D
    if model.name == "attn-m":
        r, W = model.views(theta)
        return r[:, -1, None, None] * W[:, :D, :]
    if model.name == "attn-s":
        r, K, Q = model.views(theta)
        return r[:, -1, None, None] * np.einsum("ira,irb->iab", K[:, :, :D], Q)
    W1, w2 = model.views(theta)
    return w2[:, None, None] * W1.reshape(model.H, D, D)


def head_cosines(gammas: np.ndarray) -> np.ndarray:
    """Pairwise cosine (H, H) of the flattened Γ_i (NaN where a head is zero)."""
    g = gammas.reshape(gammas.shape[0], -1)
    n = np.sqrt(np.einsum("ia,ia->i", g, g))
    with np.errstate(invalid="ignore", divide="ignore"):
        c = (g @ g.T) / np.outer(n, n)
    c[(n == 0)[:, None] | (n == 0)[None, :]] = np.nan
    return c


def off_diagonal_min_mean(c: np.ndarray) -> tuple[float, float]:
    """Smallest and mean entry above the diagonal, ignoring NaN (NaN, NaN when none)."""
    iu = np.triu_indices(c.shape[0], 1)
    v = c[iu]
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.min()), float(v.mean())


def in_weight_norms(model: Any, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(|𝐯_i|, |𝐮_i|) per head, or None for a model without in-weight blocks (mlp-cubic)."""
    D = model.D
    if model.name == "attn-m":
        r, W = model.views(theta)
        return np.linalg.norm(r[:, :D], axis=1), np.linalg.norm(W[:, D, :], axis=1)
    if model.name == "attn-s":
        r, K, _ = model.views(theta)
        return np.linalg.norm(r[:, :D], axis=1), np.linalg.norm(K[:, :, D], axis=1)
    return None


def series(model: Any, output: Any, theta: np.ndarray) -> dict[str, tuple[int, ...]]:
    """The series (name → trailing shape) that ``output.diagnostics`` / ``output.snapshots``
    add; empty when neither is set (the file then has no new datasets)."""
    out: dict[str, tuple[int, ...]] = {}
    H = model.H
    if output.diagnostics:
        if H <= MATRIX_MAX_HEADS:
            out[PREFIX + "head_cosine"] = (H, H)
        out[PREFIX + "head_cosine_min"] = ()
        out[PREFIX + "head_cosine_mean"] = ()
        if in_weight_norms(model, theta) is not None:
            out[PREFIX + "in_weight_norm_v"] = (H,)
            out[PREFIX + "in_weight_norm_u"] = (H,)
    if output.snapshots:
        for k, v in model.to_arrays(theta).items():
            out[SNAPSHOTS + k] = tuple(np.shape(v))
    return out


def measure(
    model: Any, theta: np.ndarray, names: dict[str, tuple[int, ...]], arrays: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """One save's values of the series ``names`` (``arrays``: ``model.to_arrays(theta)``)."""
    out: dict[str, np.ndarray] = {}
    if PREFIX + "head_cosine_min" in names:
        c = head_cosines(head_functions(model, theta))
        lo, mean = off_diagonal_min_mean(c)
        out[PREFIX + "head_cosine_min"] = np.array(lo)
        out[PREFIX + "head_cosine_mean"] = np.array(mean)
        if PREFIX + "head_cosine" in names:
            out[PREFIX + "head_cosine"] = c
    if PREFIX + "in_weight_norm_v" in names:
        v, u = in_weight_norms(model, theta)
        out[PREFIX + "in_weight_norm_v"] = v
        out[PREFIX + "in_weight_norm_u"] = u
    for k in names:
        if k.startswith(SNAPSHOTS):
            out[k] = np.array(arrays[k[len(SNAPSHOTS) :]], copy=True)
    return out


def diagnostics(model: Any, theta: np.ndarray, eigvecs: np.ndarray | None) -> dict[str, np.ndarray]:
    """``value_weights`` (H,), ``Gamma`` (D, D) = κ Σ_i v_i U_i (paper units) and, given the
    eigenvectors of Λ (columns, eigenvalues decreasing), ``Gamma_eig`` (D,) = e_dᵀ Γ e_d."""
    G = model.kappa * model.gamma(theta)
    out = {"value_weights": model.value_weights(theta), "Gamma": G}
    if eigvecs is not None:
        out["Gamma_eig"] = np.einsum("ad,ab,bd->d", eigvecs, G, eigvecs)
    return out


def observer(
    model: Any,
    tests: dict[str, dict],
    eigvecs: np.ndarray | None,
    ctx: Any = None,
    diag: dict[str, tuple[int, ...]] | None = None,
):
    """``observe(theta) -> (losses, weights)`` at a save: the test-set losses ``test_<name>``,
    the weights in paper layout and their :func:`diagnostics` (and the losses at other context
    lengths, as the weight ``test_context``, from ``ctx``, a :class:`~fastdyn.models.icl.setup.ContextTests`;
    the opt-in series ``diag`` of this module under their series names)."""

    def observe(theta: np.ndarray) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        losses = {f"test_{name}": model.loss_value(theta, tp) for name, tp in tests.items()}
        w = model.to_arrays(theta)
        w.update(diagnostics(model, theta, eigvecs))
        if ctx is not None:
            w["test_context"] = ctx.losses(theta)
        if diag:
            w.update(measure(model, theta, diag, w))
        return losses, w

    return observe
