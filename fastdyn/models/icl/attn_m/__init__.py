"""ATTN_M: multi-head linear (or softmax) attention with merged key-query, on in-context regression.

    ATTN_M(X) = X + Σ_i (1/ρ) W^V_i X Xᵀ W^KQ_i X,   prediction ŷ = bottom-right entry.

Only the last row ``r_i`` of W^V_i and the first D columns of W^KQ_i reach the prediction (the query
column x̂_q = (x_q, 0)), so the trained vector holds exactly those: ``H (D+1)²`` numbers, laid out as
``[r (H, D+1), W^KQ[:, :, :D] (H, D+1, D)]``. The full paper layout (``W_V``, ``W_KQ`` of shape
(H, D+1, D+1), untrained entries zero) is what :meth:`ICLModel.to_arrays` returns and
:meth:`ICLModel.from_arrays` reads.

``ic_only`` (and ``reduced``) hold 𝐯_i = r_i[:D] and 𝐮_i = W^KQ_i[D, :D] at zero: the trained count
drops to ``H (D² + 1)`` (v_i = r_i[D], U_i = W^KQ_i[:D, :D]) and ŷ = Σ_i v_i βᵀ U_i x_q · (N/ρ).
"""

from __future__ import annotations

import numpy as np

from ....problems.rng import STREAM_INIT_W, generator
from ..prepared import Features, LinearData, PerSample, SoftmaxData, Stats
from .kernels import linear_loss_and_grad, prepare_attention, softmax_loss_and_grad

LOSSES = ("last", "cumulative")
SCALES = ("N", "1")
SCHEMES = ("paper", "reference")


class ICLModel:
    """Common wrapper of the ICL models: layout, init, data preparation and the loss/gradient.

    Subclasses define ``blocks`` (name, shape) of the compact trained vector θ, the trained
    ``mask``, ``_init_std``, ``_heads`` (θ → (r, B) for the attention kernels), ``_head_grads``
    (dr, dB → ∂L/∂θ), ``gamma`` and ``_reduced_grads``.

    Arguments: D (token dimension), H (heads), N (context length), R (rank, ATTN_S only),
    ``softmax``, ``attention_scale`` ("N": ρ = N, "1": ρ = 1), ``loss`` ("last" | "cumulative":
    the mean over prefix lengths n = 1..N of the squared error of predicting token n+1 from the
    first n tokens, ρ_n = n or 1), ``reduced`` (sufficient-statistics path), ``ic_only``.
    ``device`` ("cpu" | "cuda", set by the driver) picks the per-sample kernels or their CUDA twins.
    """

    device: str = "cpu"

    name = "icl"
    has_softmax = True

    def observer(self, tests: dict, eigvecs: np.ndarray | None):
        """``observe(theta) -> (losses, weights)`` at a save (the training loop's default): the
        test-set losses, the weights in paper layout and their diagnostics
        (:func:`fastdyn.models.icl.diagnostics.observer`)."""
        from ..diagnostics import observer

        return observer(self, tests, eigvecs)

    def __init__(
        self,
        D: int,
        H: int,
        N: int,
        *,
        R: int = 1,
        softmax: bool = False,
        attention_scale: str = "N",
        loss: str = "last",
        reduced: bool = False,
        ic_only: bool = False,
    ) -> None:
        for nm, v in (("data.D", D), ("model.H", H), ("data.N", N), ("model.R", R)):
            if int(v) != v or v <= 0:
                raise ValueError(f"{nm}: must be a positive integer, got {v}")
        if attention_scale not in SCALES:
            raise ValueError(f"model.attention_scale: one of 'N', '1', got {attention_scale!r}")
        if loss not in LOSSES:
            raise ValueError(f"model.loss: one of 'last', 'cumulative', got {loss!r}")
        if softmax and not self.has_softmax:
            raise ValueError(f"model.softmax: not available for {self.name}, got true")
        if softmax and reduced:
            raise ValueError(
                "model.reduced: the reduced path exists for linear attention only, got true with softmax"
            )
        self.D, self.H, self.N, self.R = int(D), int(H), int(N), int(R)
        self.softmax, self.scale, self.loss = bool(softmax), attention_scale, loss
        self.reduced, self.ic_only = bool(reduced), bool(ic_only) or bool(reduced)
        self._offsets = []
        o = 0
        for _, shape in self.blocks:
            n = int(np.prod(shape))
            self._offsets.append((o, o + n))
            o += n
        self.n_params = o
        self.mask = self._mask()

    # ---------------------------------------------------------------- layout

    @property
    def kappa(self) -> float:
        """κ = N/ρ: the factor between the stored Γ = Σ v_i U_i and the paper-units predictor."""
        return 1.0 if self.scale == "N" else float(self.N)

    def views(self, theta: np.ndarray) -> list[np.ndarray]:
        """Reshaped views of θ, one per block (no copies)."""
        return [
            theta[a:b].reshape(shape)
            for (a, b), (_, shape) in zip(self._offsets, self.blocks, strict=True)
        ]

    @property
    def n_trained(self) -> int:
        """Number of entries that receive gradient."""
        return int(self.mask.sum())

    def init(self, scheme: str = "reference", scale: float = 1e-6, seed: int = 0) -> np.ndarray:
        """Initial θ: i.i.d. normals from ``generator(seed, STREAM_INIT_W)`` times the per-entry
        std of ``scheme`` (see the subclass), held entries zero."""
        if scheme not in SCHEMES:
            raise ValueError(f"init.scheme: one of 'paper', 'reference', got {scheme!r}")
        if not (np.isfinite(scale) and scale >= 0):
            raise ValueError(f"init.scale: must be a finite number >= 0, got {scale}")
        g = generator(seed, STREAM_INIT_W).standard_normal(self.n_params)
        return g * self._init_std(scheme, float(scale)) * self.mask

    def _mask(self) -> np.ndarray:
        return np.ones(self.n_params, dtype=bool)

    # ---------------------------------------------------------------- data

    def prepare(self, tokens: np.ndarray, labels: np.ndarray) -> Stats | PerSample:
        """Arrays the training kernel reads, computed once (sufficient statistics when reduced)."""
        from ..feature_kernels import prepare_features, sufficient_stats

        if self.reduced:
            Z, Y = prepare_features(tokens, labels, self.scale, self.loss)
            yy, c, C = sufficient_stats(Z, Y)
            return Stats(n_samples=tokens.shape[0], yy=yy, c=c, C=C)
        return self._prepare_full(tokens, labels)

    def prepare_eval(self, tokens: np.ndarray, labels: np.ndarray) -> PerSample:
        """Arrays for evaluating the loss on a (test) set with the same model: its rows, no
        moments (a set evaluated only at saves would rarely repay them)."""
        from ..feature_kernels import prepare_features

        if self.reduced:
            Z, Y = prepare_features(tokens, labels, self.scale, self.loss)
            return Features(n_samples=tokens.shape[0], Z=Z, Y=Y, moments=False)
        return self._prepare_full(tokens, labels, moments=False)

    def prepare_population(self, eigvals: np.ndarray, eigvecs: np.ndarray) -> Stats:
        """Population statistics (reduced path only): E[y_q²], E[y_q z], E[z zᵀ] (docs/theory.md, ICL)."""
        from ..problem import population_moments

        if not self.reduced:
            raise ValueError("data.population: needs model.reduced = true, got reduced = false")
        yy, c, C = population_moments(eigvals, eigvecs, self.N, self.scale, self.loss)
        return Stats(n_samples=0, yy=yy, c=c, C=C)

    def _prepare_full(self, tokens, labels, moments: bool = True) -> PerSample:
        cpu = self.device == "cpu"
        return prepare_attention(
            tokens, labels, self.scale, self.loss, self.softmax, cpu, cpu and moments
        )

    # ---------------------------------------------------------------- loss

    def loss_and_grad(
        self, theta: np.ndarray, prep: Stats | PerSample, grad: np.ndarray,
        idx: np.ndarray | None = None,
    ) -> float:  # fmt: skip
        """L(θ) (docs/theory.md, ICL, no ½) over the samples ``idx`` (all when None); writes ∂L/∂θ to ``grad``
        (zero on held entries)."""
        from ..config import MOMENT_FLOOR
        from ..feature_kernels import linear_feature_loss_and_g

        if isinstance(prep, Stats):
            L = self._stats_grad(theta, prep, grad)
        elif isinstance(prep, Features):
            stats = _feature_stats(prep) if idx is None else None
            if stats is not None:
                L = self._stats_grad(theta, stats, grad)
            if stats is None or L < MOMENT_FLOOR * stats.yy:  # a minibatch, or near an exact fit
                if idx is None:
                    idx = prep.all_indices()
                gam = self.gamma(theta).ravel()
                L, g = linear_feature_loss_and_g(gam, prep.Z, prep.Y, idx)
                self._reduced_grads(theta, g.reshape(self.D, self.D), grad)
        else:
            if idx is None:
                idx = prep.all_indices()
            r, B = self._heads(theta)
            dr, dB = np.empty_like(r), np.empty_like(B)
            if self.device == "cuda":
                from . import kernels_cuda as kx
            else:
                from . import kernels as kx
            if isinstance(prep, SoftmaxData):
                L = softmax_loss_and_grad(kx.soft, r, B, prep, idx, dr, dB)
            else:
                L = linear_loss_and_grad(kx.lin_last, kx.lin_cum, r, B, prep, idx, dr, dB)
            self._head_grads(theta, dr, dB, grad)
        grad *= self.mask
        return float(L)

    def loss_value(self, theta: np.ndarray, prep: Stats | PerSample) -> float:
        """L(θ) on all samples of ``prep``."""
        return self.loss_and_grad(theta, prep, np.empty(self.n_params))

    def _stats_grad(self, theta, prep: Stats, grad) -> float:
        from ..feature_kernels import reduced_G

        gam = self.gamma(theta).ravel()
        G = np.empty_like(gam)
        L = reduced_G(prep.yy, prep.c, prep.C, gam, G)
        self._reduced_grads(theta, G.reshape(self.D, self.D), grad)
        return L

    # ---------------------------------------------------------------- diagnostics

    def value_weights(self, theta: np.ndarray) -> np.ndarray:
        """Per-head value weight v_i = (W^V_i)[D, D] (H,)."""
        return self.views(theta)[0][:, -1].copy()

    def summary(self) -> str:
        return f"{self.name}: D={self.D} H={self.H} N={self.N}, {self.n_trained} trained of {self.n_params}"


def _feature_stats(prep: Features) -> Stats | None:
    """The set's sufficient statistics (yy, c, C: means of y², y z, z zᵀ over its rows) as
    :class:`Stats`, taken at the first full-batch call and kept in ``prep.stats``, where they pay
    (:func:`fastdyn.models.icl.config.moments_pay`: ŷ = γ·z, so the loss is yy − 2γ·c + γᵀCγ); else
    None (the per-sample features)."""
    from ..config import moments_pay
    from ..feature_kernels import sufficient_stats

    Z = prep.Z
    if not prep.moments or not moments_pay(Z.shape[0] * Z.shape[1], Z.shape[2]):
        return None
    got = prep.stats
    if got is None:
        yy, c, C = sufficient_stats(Z, prep.Y)
        got = prep.stats = Stats(n_samples=prep.n_samples, yy=yy, c=c, C=C)
    return got


class ReducedKernels:
    """The compiled reduced path (:class:`Stats`: population moments) of a model whose
    kernels live in :mod:`fastdyn.models.icl.feature_kernels`: :meth:`_stats_grad` and
    :meth:`fused_gd` call ``reduced_grad`` / ``reduced_gd`` there with the model's code
    :meth:`_reduced_kind`, its sizes :meth:`_reduced_sizes` and the moments yy, c, C. Listed
    before :class:`ICLModel` in a model's bases."""

    H: int
    D: int

    def _reduced_kind(self) -> int:
        """The model's code in ``feature_kernels.reduced_grad`` (MLP, ATTN_M or ATTN_S)."""
        raise NotImplementedError

    def _reduced_sizes(self) -> tuple[int, int, int]:
        """The sizes the kernels take after θ: (H, R, D), R = 0 (unused) unless ATTN_S."""
        return (self.H, 0, self.D)

    def _stats_grad(self, theta, prep: Stats, grad) -> float:
        from ..feature_kernels import reduced_grad

        sizes = self._reduced_sizes()
        return reduced_grad(self._reduced_kind(), theta, *sizes, prep.yy, prep.c, prep.C, grad)

    #: the rank R of ATTN_S's keys and queries in the fused linear steps; 0: ATTN_M's W
    _kq_rank = 0

    def gd_steps(self, prep: Stats | PerSample):
        """Fused full-batch GD steps on the CPU (None elsewhere): ``advance(theta, lr, losses,
        limit) -> steps taken``, up to ``len(losses)`` steps in one compiled call, bit-identical
        to :meth:`loss_and_grad` and a GD step per epoch. Linear attention, last-token or
        cumulative with prepared prefix rows: :func:`.kernels.lin_last_gd` (from the data's
        moments where the set has them); a per-sample :class:`Features` set with sufficient
        statistics (:func:`_feature_stats`): :func:`fastdyn.models.icl.feature_kernels.stats_gd`."""
        if getattr(self, "device", "cpu") != "cpu":
            return None
        if isinstance(prep, LinearData) and prep.SpT is not None:
            return self._linear_gd_steps(prep)
        if not isinstance(prep, Features):
            return None
        stats = _feature_stats(prep)
        if stats is None:
            return None
        from ..config import MOMENT_FLOOR
        from ..feature_kernels import stats_gd

        kind, sizes = self._reduced_kind(), self._reduced_sizes()
        maskf = self.mask.astype(np.float64)
        yy, c, C = stats.yy, stats.c, stats.C
        floor = MOMENT_FLOOR * yy

        def advance(theta: np.ndarray, lr: float, losses: np.ndarray, limit: float) -> int:
            return int(stats_gd(kind, theta, *sizes, maskf, yy, c, C, lr, limit, losses, floor))

        return advance

    def _linear_gd_steps(self, prep: LinearData):
        from .kernels import full_moments, lin_last_gd, prefix_rows

        H, R, D, idx = self.H, self._kq_rank, self.D, prefix_rows(prep, prep.all_indices(), True)
        maskf = self.mask.astype(np.float64)
        S, X, y, inv_rho = prep.SpT, prep.xqT, prep.yq, prep.inv_rho
        G, b, y2 = full_moments(prep) or (np.empty((0, 0)), np.empty(0), 0.0)

        def advance(theta: np.ndarray, lr: float, losses: np.ndarray, limit: float) -> int:
            return int(
                lin_last_gd(
                    theta, H, R, D, maskf, idx, S, X, y, inv_rho, G, b, y2, lr, limit, losses
                )
            )

        return advance

    def optimizer_steps(self, prep: Stats | PerSample):
        """Fused optimiser steps on the CPU (None elsewhere): ``advance(theta, batches, update,
        losses, limit) -> steps taken``, up to ``len(losses)`` steps in one compiled call with the
        optimiser's ``update`` = (rule, hyper, buf, m, v, step) (its state updated in place):
        step s on the samples ``batches[s]`` (an (n, B) int64 array of sorted indices), or on
        the full set for ``batches`` of shape (0, 0) (from the data's moments where the set has
        them); bit-identical to :meth:`loss_and_grad` on those samples and the optimiser's step
        each. Linear attention, last-token or cumulative with prepared prefix rows:
        :func:`.kernels.lin_last_steps`."""
        if getattr(self, "device", "cpu") != "cpu":
            return None
        if not isinstance(prep, LinearData) or prep.SpT is None:
            return None
        from .kernels import full_moments, lin_last_steps

        H, R, D = self.H, self._kq_rank, self.D
        maskf = self.mask.astype(np.float64)
        P, n_prefix = prep.n_samples, prep.N if prep.loss == "cumulative" else 1
        S, X, y, inv_rho = prep.SpT, prep.xqT, prep.yq, prep.inv_rho
        none = (np.empty((0, 0)), np.empty(0), 0.0)  # a minibatch's loss: no moments

        def advance(
            theta: np.ndarray, batches: np.ndarray, update: tuple, losses: np.ndarray,
            limit: float,
        ) -> int:  # fmt: skip
            rule, hyper, buf, m, v, step = update
            G, b, y2 = (full_moments(prep) or none) if batches.shape[0] == 0 else none
            return int(
                lin_last_steps(
                    theta,
                    H,
                    R,
                    D,
                    maskf,
                    batches,
                    P,
                    n_prefix,
                    S,
                    X,
                    y,
                    inv_rho,
                    G,
                    b,
                    y2,
                    rule,
                    hyper,
                    buf,
                    m,
                    v,
                    step,
                    limit,
                    losses,
                )  # fmt: skip
            )

        return advance

    def fused_gd(
        self, theta: np.ndarray, prep: Stats, lr: float, n: int, losses: np.ndarray
    ) -> None:
        """n reduced GD steps in one compiled call (losses[s] before update s)."""
        from ..feature_kernels import reduced_gd

        sizes = self._reduced_sizes()
        reduced_gd(self._reduced_kind(), theta, *sizes, prep.yy, prep.c, prep.C, lr, n, losses)


class AttnM(ReducedKernels, ICLModel):
    """ATTN_M (see the module docstring)."""

    name = "attn-m"
    #: the axis names of :meth:`ICLModel.to_arrays`'s arrays (``fastdyn.models.icl.setup.AXES``)
    array_axes = {"W_V": ("head", "row", "col"), "W_KQ": ("head", "row", "col")}

    @property
    def blocks(self):
        D1 = self.D + 1
        return [("r", (self.H, D1)), ("W", (self.H, D1, self.D))]

    def _mask(self) -> np.ndarray:
        m = np.ones(self.n_params, dtype=bool)
        if self.ic_only:
            r, W = self.views(m)
            r[:, : self.D] = False
            W[:, self.D, :] = False
        return m

    def _init_std(self, scheme: str, scale: float) -> np.ndarray:
        s = np.full(self.n_params, scale)
        if scheme == "reference":
            r, W = self.views(s)
            r[:, : self.D] = 0.0
            W[:, self.D, :] = 0.0
        return s

    def _heads(self, theta):
        r, W = self.views(theta)
        return np.ascontiguousarray(r), np.ascontiguousarray(W)

    def _head_grads(self, theta, dr, dB, grad):
        gr, gW = self.views(grad)
        gr[:] = dr
        gW[:] = dB

    def _reduced_kind(self) -> int:
        from ..feature_kernels import ATTN_M

        return ATTN_M

    def gamma(self, theta: np.ndarray) -> np.ndarray:
        """Γ = Σ_i v_i U_i (D, D); the predictor is ŷ ≈ κ βᵀ Γ x_q (κ = N/ρ)."""
        r, W = self.views(theta)
        return np.einsum("i,iab->ab", r[:, -1], W[:, : self.D, :])

    def _reduced_grads(self, theta, G, grad):
        r, W = self.views(theta)
        grad[:] = 0.0
        gr, gW = self.views(grad)
        v = r[:, -1]
        U = W[:, : self.D, :]
        gW[:, : self.D, :] = -2.0 * v[:, None, None] * G[None]
        gr[:, -1] = -2.0 * np.einsum("iab,ab->i", U, G)

    def to_arrays(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Full paper layout: W_V, W_KQ (H, D+1, D+1) (entries that cannot move are zero)."""
        r, W = self.views(theta)
        D1 = self.D + 1
        WV = np.zeros((self.H, D1, D1))
        WKQ = np.zeros((self.H, D1, D1))
        WV[:, -1, :] = r
        WKQ[:, :, : self.D] = W
        return {"W_V": WV, "W_KQ": WKQ}

    def from_arrays(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """θ from W_V, W_KQ of shape (H, D+1, D+1)."""
        D1 = self.D + 1
        _need(arrays, {"W_V": (self.H, D1, D1), "W_KQ": (self.H, D1, D1)})
        theta = np.zeros(self.n_params)
        r, W = self.views(theta)
        r[:] = arrays["W_V"][:, -1, :]
        W[:] = arrays["W_KQ"][:, :, : self.D]
        return theta * self.mask


def _need(arrays: dict, shapes: dict) -> None:
    for k, shp in shapes.items():
        if k not in arrays:
            raise ValueError(f"init.from_file: missing array {k!r} of shape {shp}")
        a = np.asarray(arrays[k])
        if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise ValueError(
                f"init.from_file: array {k!r} must be real numbers, got dtype {a.dtype}"
            )
        if a.shape != shp:
            raise ValueError(f"init.from_file: array {k!r} must have shape {shp}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"init.from_file: array {k!r} must be finite, found NaN or inf")
