"""Settings of one in-context-regression training run, the model it builds and its theory series
(runs go through the trained-model driver into a file).

The settings are the config sections of :mod:`fastdyn.models.icl.config` (re-exported here): frozen
dataclasses declared with the config schema's rules (defaults: docs/theory.md, ICL, Fig. 1 — ATTN_M, D = 4,
N = 31, H = 8, P = 5000, init 1e-6, lr 1e-3, 6001 full-batch GD epochs). Every field is validated
on construction and a bad value raises a one-line ``ConfigError`` (a ``ValueError``) naming the
field as the TOML does (``data.P: must be an integer ≥ 1 …, got 0``; the ``model`` section is
``[attention]``).
"""

from __future__ import annotations

import numpy as np

from . import problem as icl_data
from .config import (
    MODELS,
    DataSettings,
    ICLSettings,
    InitSettings,
    ModelSettings,
    OptimSettings,
    OutputSettings,
    ScheduleSettings,
)

__all__ = [
    "MODELS",
    "DataSettings",
    "ICLSettings",
    "InitSettings",
    "ModelSettings",
    "OptimSettings",
    "OutputSettings",
    "ScheduleSettings",
    "build_model",
    "load_data",
    "theory_series",
]


def build_model(settings: ICLSettings, D: int | None = None, N: int | None = None):
    """The model object for ``settings`` (D, N override the data section, e.g. from a file)."""
    from .attn_m import AttnM
    from .attn_s import AttnS
    from .mlp_cubic import MLPCubic

    m = settings.model
    D = settings.data.D if D is None else D
    N = settings.data.N if N is None else N
    kw = dict(
        softmax=m.softmax,
        attention_scale=m.attention_scale,
        loss=m.loss,
        reduced=m.reduced,
        ic_only=m.ic_only,
    )
    if m.name == "attn-m":
        return AttnM(D, m.H, N, **kw)
    if m.name == "attn-s":
        return AttnS(D, m.H, N, R=m.R, **kw)
    return MLPCubic(D, m.H, N, **kw)


def load_data(settings: ICLSettings) -> icl_data.ICLData:
    """The data set of ``settings`` (generated from the seed or read from ``data.from_file``)."""
    d = settings.data
    if d.from_file:
        return icl_data.load_npz(d.from_file)
    return icl_data.generate(
        d.D, d.N, d.P, spectrum=d.spectrum, exponent=d.exponent, eigenvalues=d.eigenvalues,
        rotate=d.rotate, normalize_trace=d.normalize_trace, center=d.center, whiten=d.whiten,
        icl_fraction=d.icl_fraction, n_test=d.n_test, seed=settings.seed if d.seed is None else d.seed,
    )  # fmt: skip


def theory_series(
    model, eigvals: np.ndarray, eigvecs: np.ndarray, settings: ICLSettings, time: np.ndarray
) -> dict:
    """The matching theory: plateau levels L(M_m), L*, Γ* (paper units) and, for attn-m/mlp-cubic
    with Λ ∝ I and the last-token loss, the Eq. 10 σ(t) and loss on the saved times."""
    from .attn_m import theory as tm

    N = model.N
    out = {
        "plateau_losses": tm.plateau_losses(eigvals, N),
        "L_star": np.array(tm.loss_star(eigvals, N)),
        "Gamma_star": tm.gamma_star(eigvals, eigvecs, N),
        "eigvals": np.asarray(eigvals, dtype=np.float64),
    }
    lam = np.asarray(eigvals)
    if (
        model.name in ("attn-m", "mlp-cubic")
        and model.loss == "last"
        and np.allclose(lam, lam[0], rtol=1e-12)
    ):
        a0 = tm.eq10_a0_random(model.H, settings.init.scale)
        if a0 > 0:
            sig = tm.eq10_sigma(time, float(lam[0]), model.D, N, a0, model.kappa)
            out["eq10_sigma"] = sig
            out["eq10_loss"] = tm.eq10_loss(sig, float(lam[0]), model.D, N)
    return out
