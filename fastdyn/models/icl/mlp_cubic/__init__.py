"""MLP on cubic features: ŷ = w_2ᵀ W_1 z, z = (1/ρ) vec(Σ_n y_n x_n x_qᵀ) (= vec(β x_qᵀ) for ρ = N).

Trained vector ``[W1 (H, D²), w2 (H,)]``, ``H (D² + 1)`` numbers, all trained. With
``w2_i = v_i`` and ``W1_i = vec(U_i)`` (row-major) it is ATTN_M's function with its in-weight
blocks v_i, u_i at zero, at the same ρ (:func:`from_attn_m`; ``init.match = "attn-m"`` starts from
that image of attn-m's draw). The two give the same loss curve for any optimiser only where those
blocks stay zero: attn-m with ``ic_only``, or the population / reduced path (where they get no
gradient). The full ATTN_M at finite P trains them: from the same start the curves differ (4.5%
in train loss after 1500 GD steps at P = 200, ``tests/models/test_init_match.py``; the issue
measured 3.7% (GD) and 18% (Adam) on the Fig. 1 setting).
Init: every weight N(0, scale²) under either scheme.
"""

from __future__ import annotations

import numpy as np

from ..attn_m import AttnM, ICLModel, ReducedKernels, _need
from ..feature_kernels import linear_feature_loss_and_g, prepare_features
from ..prepared import Features


class MLPCubic(ReducedKernels, ICLModel):
    """Two-layer linear network on the cubic feature z (see the module docstring)."""

    name = "mlp-cubic"
    has_softmax = False
    #: the axis names of :meth:`to_arrays`'s arrays (``fastdyn.models.icl.setup.AXES``)
    array_axes = {"W1": ("head", "feature"), "w2": ("head",)}

    @property
    def blocks(self):
        return [("W1", (self.H, self.D * self.D)), ("w2", (self.H,))]

    def _init_std(self, scheme: str, scale: float) -> np.ndarray:
        return np.full(self.n_params, scale)

    def _prepare_full(self, tokens, labels, moments: bool = True) -> Features:
        Z, Y = prepare_features(tokens, labels, self.scale, self.loss)
        return Features(n_samples=tokens.shape[0], Z=Z, Y=Y, moments=moments)

    def _reduced_kind(self) -> int:
        from ..feature_kernels import MLP

        return MLP

    def gamma(self, theta: np.ndarray) -> np.ndarray:
        W1, w2 = self.views(theta)
        return (w2 @ W1).reshape(self.D, self.D)

    def _reduced_grads(self, theta, G, grad):
        W1, w2 = self.views(theta)
        g1, g2 = self.views(grad)
        gv = G.ravel()
        g1[:] = -2.0 * w2[:, None] * gv[None, :]
        g2[:] = -2.0 * (W1 @ gv)

    def value_weights(self, theta: np.ndarray) -> np.ndarray:
        return self.views(theta)[1].copy()

    def to_arrays(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        W1, w2 = self.views(theta)
        return {"W1": W1.copy(), "w2": w2.copy()}

    def from_arrays(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        _need(arrays, {"W1": (self.H, self.D * self.D), "w2": (self.H,)})
        return np.concatenate(
            [np.asarray(arrays["W1"], float).ravel(), np.asarray(arrays["w2"], float)]
        )


def from_attn_m(model: AttnM, theta: np.ndarray) -> np.ndarray:
    """MLP weights corresponding to ATTN_M weights: w2_i = v_i = (W^V_i)[D, D], W1_i = vec(U_i),
    U_i = W^KQ_i[:D, :D] (exact correspondence when 𝐯_i = 𝐮_i = 0)."""
    r, W = model.views(theta)
    return np.concatenate([W[:, : model.D, :].reshape(model.H, -1).ravel(), r[:, -1]])


__all__ = ["MLPCubic", "from_attn_m", "linear_feature_loss_and_g"]
