"""The ICL models' prepared data (:class:`~fastdyn.models._spec.Prepared`), one class per path of
``loss_and_grad``: per-sample attention data (:class:`LinearData`, :class:`SoftmaxData`), per-sample
cubic features (:class:`Features`) and their second moments (:class:`Stats`).

P samples of N+1 tokens in dimension D; float64 arrays, C-contiguous. Values kept after the first
full-batch call (indices, moments) are explicit fields that start as None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .._spec import Prepared


@dataclass(slots=True, kw_only=True, eq=False)
class Stats(Prepared):
    """Second moments of the cubic feature z and the target y (docs/theory.md, ICL): the loss in
    Γ is yy − 2γ·c + γᵀCγ (γ = vec Γ, no ½), with no per-sample terms. Means over a training
    set's rows (``n_samples`` = P) or population expectations (``n_samples`` = 0).

    - ``yy``: E[y²] (float); ``c``: E[y z] (D²,); ``C``: E[z zᵀ] (D², D²), row-major vec.
    """

    kind: ClassVar[str] = "stats"
    full_batch: ClassVar[bool] = True
    yy: float
    c: np.ndarray
    C: np.ndarray


@dataclass(slots=True, kw_only=True, eq=False)
class PerSample(Prepared):
    """Data with one loss term per sample (``n_samples`` = P): minibatches index its samples.

    - ``all_idx``: 0..P−1 (int64), made by :meth:`all_indices` at the first full-batch call."""

    all_idx: np.ndarray | None = field(default=None, init=False, repr=False)

    def all_indices(self) -> np.ndarray:
        """0..P−1 (int64), made once and kept in ``all_idx``."""
        if self.all_idx is None:
            self.all_idx = np.arange(self.n_samples, dtype=np.int64)
        return self.all_idx


@dataclass(slots=True, kw_only=True, eq=False)
class Features(PerSample):
    """Per-sample cubic features (ŷ = γ·z): the MLP on cubic features, and the test sets of the
    reduced path.

    - ``Z``: z (P, T, D²), ``Y``: targets (P, T); T = 1 (last-token loss) or N (cumulative).
    - ``moments``: whether a full-batch loss may come from the set's :class:`Stats` where they pay
      (:func:`fastdyn.models.icl.config.moments_pay`); false for a set evaluated only at saves.
    - ``stats``: those :class:`Stats` (``n_samples`` = P), taken at the first full-batch call.
    """

    kind: ClassVar[str] = "features"
    Z: np.ndarray
    Y: np.ndarray
    moments: bool
    stats: Stats | None = field(default=None, init=False, repr=False)


@dataclass(slots=True, kw_only=True, eq=False)
class AttentionData(PerSample):
    """Per-sample tokens of the attention models (``attn_m.kernels.prepare_attention``).

    - ``tokens``: (P, N+1, D+1), ``labels``: (P, N+1): the data set's arrays (query last).
    - ``loss``: "last" | "cumulative"; ``N``: context length; ``scale_n``: ρ = N (ρ_n = n for
      the cumulative loss), else ρ = 1.
    """

    tokens: np.ndarray
    labels: np.ndarray
    loss: str
    N: int
    scale_n: bool


@dataclass(slots=True, kw_only=True, eq=False)
class SoftmaxData(AttentionData):
    """Softmax attention: the kernel reads the tokens."""

    kind: ClassVar[str] = "softmax"


@dataclass(slots=True, kw_only=True, eq=False)
class LinearData(AttentionData):
    """Linear attention: besides the tokens, the rows ``attn_m.kernels.lin_last`` reads, samples
    contiguous (None where there are none: a cumulative set above ``PREFIX_BYTES_MAX`` or on the
    CUDA twin, whose kernel rebuilds them from the tokens). ``n_rows`` = P for the last-token
    loss, N·P prefix-major for the cumulative loss (``attn_m.kernels.pack_prefixes``).

    - ``SpT``: packed S_μ = X_μX_μᵀ (S_n of prefix n for the cumulative loss), ((D+1)(D+2)/2,
      n_rows); ``xqT``: the query (D, n_rows) (x_n/ρ_n for the cumulative loss); ``yq``: its
      target (n_rows,).
    - ``inv_rho``: 1/ρ applied to the rows (1 where the rows carry it).
    - ``moments``: whether a full-batch loss comes from the rows' moments
      (:func:`~fastdyn.models.icl.config.uses_moments`).
    - ``all_rows``: 0..n_rows−1 (int64) of the cumulative loss, kept at the first full-batch call.
    - ``data_moments``: (G, b, y2) of all rows (``attn_m.kernels.full_moments``), kept at the
      first full-batch call.
    """

    kind: ClassVar[str] = "linear"
    inv_rho: float
    SpT: np.ndarray | None = None
    xqT: np.ndarray | None = None
    yq: np.ndarray | None = None
    moments: bool = False
    all_rows: np.ndarray | None = field(default=None, init=False, repr=False)
    data_moments: tuple[np.ndarray, np.ndarray, float] | None = field(
        default=None, init=False, repr=False
    )
