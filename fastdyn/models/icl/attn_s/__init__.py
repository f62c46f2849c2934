"""ATTN_S: multi-head linear (or softmax) attention with separate rank-R key and query.

    ATTN_S(X) = X + Σ_i (1/ρ) W^V_i X Xᵀ W^K_iᵀ W^Q_i X,   W^K_i, W^Q_i ∈ R^{R×(D+1)}.

Trained vector ``[r (H, D+1), W^K (H, R, D+1), W^Q[:, :, :D] (H, R, D)]``:
``H ((D+1)(R+1) + R D)`` numbers (the last column of W^Q only multiplies the query's zero label).
``ic_only``/``reduced`` hold 𝐯_i = r_i[:D] and the scalar key entries W^K_i[:, D] at zero
(``H (1 + 2 R D)`` trained), giving ŷ = (N/ρ) Σ_i v_i βᵀ (Σ_r k_ir q_irᵀ) x_q.
Init "reference" (code): value std = scale, key and query std = scale/√(R(D+1)), 𝐯_i and the scalar
key entries zero; "paper": the same stds on every trained entry.
"""

from __future__ import annotations

import numpy as np

from ..attn_m import ICLModel, ReducedKernels, _need


class AttnS(ReducedKernels, ICLModel):
    """ATTN_S (see the module docstring). H·R < D is allowed here (theory tests use one head);
    :class:`fastdyn.models.icl.settings.ICLSettings` rejects it for runs."""

    name = "attn-s"
    #: the axis names of :meth:`to_arrays`'s arrays (``fastdyn.models.icl.setup.AXES``)
    array_axes = {
        "W_V": ("head", "row", "col"),
        "W_K": ("head", "rank", "col"),
        "W_Q": ("head", "rank", "col"),
    }

    def __init__(self, D: int, H: int, N: int, *, R: int = 1, **kw) -> None:
        if int(R) == R and R > 0 and R > D:
            raise ValueError(f"model.R: must be <= D = {D}, got {R}")
        super().__init__(D, H, N, R=R, **kw)

    @property
    def blocks(self):
        D1 = self.D + 1
        return [("r", (self.H, D1)), ("K", (self.H, self.R, D1)), ("Q", (self.H, self.R, self.D))]

    def _mask(self) -> np.ndarray:
        m = np.ones(self.n_params, dtype=bool)
        if self.ic_only:
            r, K, _ = self.views(m)
            r[:, : self.D] = False
            K[:, :, self.D] = False
        return m

    def _init_std(self, scheme: str, scale: float) -> np.ndarray:
        s = np.full(self.n_params, scale)
        r, K, Q = self.views(s)
        kq = scale / np.sqrt(self.R * (self.D + 1))
        K[:] = kq
        Q[:] = kq
        if scheme == "reference":
            r[:, : self.D] = 0.0
            K[:, :, self.D] = 0.0
        return s

    @property
    def _kq_rank(self) -> int:
        return self.R

    def _heads(self, theta):
        from ..attn_m.kernels import kq_product

        r, K, Q = self.views(theta)
        B = np.empty((self.H, self.D + 1, self.D))  # W^Kᵀ W^Q[:, :D]
        kq_product(np.ascontiguousarray(K), np.ascontiguousarray(Q), B)
        return np.ascontiguousarray(r), B

    def _head_grads(self, theta, dr, dB, grad):
        from ..attn_m.kernels import kq_grads

        _, K, Q = self.views(theta)
        gr, gK, gQ = self.views(grad)
        gr[:] = dr
        kq_grads(np.ascontiguousarray(K), np.ascontiguousarray(Q), dB, gK, gQ)

    def _reduced_kind(self) -> int:
        from ..feature_kernels import ATTN_S

        return ATTN_S

    def _reduced_sizes(self) -> tuple[int, int, int]:
        """(H, R, D): the rank of the key and query as well."""
        return (self.H, self.R, self.D)

    def gamma(self, theta: np.ndarray) -> np.ndarray:
        """Γ = Σ_i v_i Σ_r k_ir q_irᵀ (D, D)."""
        r, K, Q = self.views(theta)
        return np.einsum("i,ira,irb->ab", r[:, -1], K[:, :, : self.D], Q)

    def _reduced_grads(self, theta, G, grad):
        r, K, Q = self.views(theta)
        grad[:] = 0.0
        gr, gK, gQ = self.views(grad)
        v = r[:, -1]
        k = K[:, :, : self.D]
        gr[:, -1] = -2.0 * np.einsum("ira,ab,irb->i", k, G, Q)
        gK[:, :, : self.D] = -2.0 * v[:, None, None] * np.einsum("ab,irb->ira", G, Q)
        gQ[:] = -2.0 * v[:, None, None] * np.einsum("ab,ira->irb", G, k)

    def to_arrays(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Full paper layout: W_V (H, D+1, D+1), W_K, W_Q (H, R, D+1)."""
        r, K, Q = self.views(theta)
        D1 = self.D + 1
        WV = np.zeros((self.H, D1, D1))
        WV[:, -1, :] = r
        WQ = np.zeros((self.H, self.R, D1))
        WQ[:, :, : self.D] = Q
        return {"W_V": WV, "W_K": K.copy(), "W_Q": WQ}

    def from_arrays(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        D1 = self.D + 1
        _need(
            arrays,
            {"W_V": (self.H, D1, D1), "W_K": (self.H, self.R, D1), "W_Q": (self.H, self.R, D1)},
        )
        theta = np.zeros(self.n_params)
        r, K, Q = self.views(theta)
        r[:] = arrays["W_V"][:, -1, :]
        K[:] = arrays["W_K"]
        Q[:] = arrays["W_Q"][:, :, : self.D]
        return theta * self.mask
