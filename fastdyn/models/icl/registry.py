"""The trained ICL models "attn-m", "attn-s" and "mlp-cubic" (``ATTN_M``, ``ATTN_S``, ``MLP_CUBIC``:
what their ``fastdyn.models`` entry points name).

Each entry's ``setup`` is :func:`fastdyn.models.icl.setup.setup` (config → what the trained-model
driver runs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...config.schema import ConfigError
from ...core.device import Device
from ...problems.philox import EPOCH_BATCHES_ARGS
from .. import _spec
from .attn_m import theory as attn_m_theory
from .config import IclConfig
from .setup import batch_size, setup

_SUMMARIES = {
    "attn-m": "multi-head linear/softmax attention with merged key-query on in-context regression",
    "attn-s": "multi-head linear/softmax attention with separate rank-R key and query",
    "mlp-cubic": "two-layer linear network on the cubic features vec(beta x_q^T)",
}

#: reference levels on loss plots: ATTN_S visits every saddle M_m (plateau losses L(M_m)), the
#: others go from M_0 straight to the global minimum L* (spec icl.md §4); a finite train set
#: has its own minimum beside L* (``theory/train_minimum``)
_LEVELS = {
    "attn-m": ("theory/L_star", "theory/train_minimum"),
    "attn-s": ("theory/plateaus", "theory/L_star", "theory/train_minimum"),
    "mlp-cubic": ("theory/L_star", "theory/train_minimum"),
}


def check_device(cfg: Any) -> None:
    """The population and reduced paths have no CUDA kernel (the per-sample kernels do)."""
    s = cfg.settings
    if s.data.population:
        raise ConfigError(
            "data.population: the population path uses CPU sufficient statistics, not the per-sample kernels that run on CUDA; use device = 'cpu'"
        )
    if getattr(s.model, "reduced", False):
        raise ConfigError(
            "attention.reduced: the reduced path has no CUDA kernel; use attention.reduced = false or device = 'cpu'"
        )


#: ``fastdyn warmup``: sizes that shrink any ICL preset to a few epochs
_TINY = ("schedule.epochs=4", "schedule.save_every=2", "data.P=20")
_POP = ("data.population=true", "attention.reduced=true", "data.n_test=0")
_VARIANTS = {
    "attn-m": (
        ("attn-m ic_only", "icl_fig1", ("attention.ic_only=true",)),
        ("attn-m cumulative loss", "icl_variants", ('attention.loss="cumulative"',)),
        ("attn-m softmax", "icl_variants", ("attention.softmax=true",)),
        ("attn-m population", "icl_fig1", (*_POP, 'data.spectrum="white"')),
        ("attn-m reduced, finite data", "icl_fig1", ("attention.reduced=true",)),
        ("attn-m adam minibatch", "icl_variants", ('optim.name="adam"', "optim.batch_size=10")),
        ("attn-m icl_fraction 0", "icl_variants", ("data.icl_fraction=0.0",)),
    ),
    "attn-s": (
        ("attn-s softmax", "icl_fig3", ("attention.softmax=true",)),
        ("attn-s cumulative loss", "icl_fig3", ('attention.loss="cumulative"',)),
        ("attn-s population", "icl_fig3", _POP),
        ("attn-s population R4", "icl_fig4", (*_POP, "attention.R=4")),
    ),
    "mlp-cubic": (
        ("mlp-cubic", "icl_fig1", ('model="mlp-cubic"',)),
        ("mlp-cubic cumulative loss", "icl_variants", ('model="mlp-cubic"', 'attention.loss="cumulative"')),
    ),
}  # fmt: skip


#: lin_last_gd(theta, H, R, D, mask, rows, SpT, xqT, yq, inv_rho, G, b, y2, lr, limit, losses): the
#: fused full-batch GD steps of linear attention, as ``ReducedKernels.gd_steps`` passes them
LIN_GD_ARGS = (
    "(float64[::1], int64, int64, int64, float64[::1], int64[::1], float64[:, ::1], "
    "float64[:, ::1], float64[::1], float64, float64[:, ::1], float64[::1], float64, float64, "
    "float64, float64[::1])"
)


#: lin_last_steps(theta, H, R, D, mask, batches, P, n_prefix, SpT, xqT, yq, inv_rho, G, b, y2,
#: rule, hyper, buf, m, v, step, limit, losses): the fused steps of the other optimisers
#: (minibatches or full batch), as ``ReducedKernels.optimizer_steps`` passes them
LIN_STEPS_ARGS = (
    "(float64[::1], int64, int64, int64, float64[::1], int64[:, ::1], int64, int64, "
    "float64[:, ::1], float64[:, ::1], float64[::1], float64, float64[:, ::1], float64[::1], "
    "float64, int64, float64[::1], float64[::1], float64[::1], float64[::1], int64[::1], "
    "float64, float64[::1])"
)


def precompile(cfg: Any) -> tuple[tuple[str, str], ...]:
    """Linear attention on per-sample data (attn-m, attn-s) on the CPU: the fused steps' kernel
    (≈ 3–5 s to compile), first reached after the first step, whose per-sample loss and
    gradient kernels take ≈ 11–13 s: full-batch GD's, or the other optimisers' (minibatches or
    full batch); for minibatches, before it, their draw (``problems.philox.epoch_batches``,
    ≈ 1.3 s, reached at the first step, after the set-up). Nothing for the other paths: softmax
    has one phase; the reduced, population and mlp-cubic kernels compile in about a second, less
    than a second process would save."""
    s = cfg.settings
    m, d = s.model, s.data
    if cfg.device != "cpu" or m.name == "mlp-cubic":
        return ()
    if m.softmax or m.reduced or d.population:
        return ()
    if m.loss == "cumulative" and not d.from_file:  # prefix rows prepared only up to a size
        from .config import PREFIX_BYTES_MAX, prefix_moment_bytes

        if prefix_moment_bytes(d.P, d.N, d.D) > PREFIX_BYTES_MAX:
            return ()
    if s.optim.name != "gd":
        steps = (("fastdyn.models.icl.attn_m.kernels:lin_last_steps", LIN_STEPS_ARGS),)
        if batch_size(s) is not None:  # minibatches (a file's P may differ), drawn from step 0
            return (("fastdyn.problems.philox:epoch_batches", EPOCH_BATCHES_ARGS), *steps)
        return steps
    return (("fastdyn.models.icl.attn_m.kernels:lin_last_gd", LIN_GD_ARGS),)


def param_targets(run: Any) -> dict[str, np.ndarray]:
    """The global minimum's eigen-projections e_dᵀΓ*e_d = 1 / (λ_d (1 + (1 + trΛ/λ_d)/N))
    (spec icl.md §4) from the stored data config, as the target of ``params/Gamma_eig``."""
    from .problem import spectrum_eigenvalues

    D, N = _spec.stored_value(run, "data.D"), _spec.stored_value(run, "data.N")
    if D is None or N is None:
        return {}
    try:
        lam = spectrum_eigenvalues(
            int(D), str(_spec.stored_value(run, "data.spectrum", "linear")),
            float(_spec.stored_value(run, "data.exponent", 1.0)),
            tuple(_spec.stored_value(run, "data.eigenvalues", ()) or ()),
            bool(_spec.stored_value(run, "data.normalize_trace", True)),
        )  # fmt: skip
        return {"params/Gamma_eig": 1.0 / attn_m_theory.shrink(lam, float(N))}
    except (ValueError, TypeError):
        return {}


def _entry(name: str) -> _spec.ModelEntry:
    cuda = name != "mlp-cubic"  # the attention models have CUDA kernels (docs/cuda.md)
    return _spec.ModelEntry(
        name=name,
        kind="trained",
        summary=_SUMMARIES[name],
        run=_spec.RunHooks(
            setup=setup,
            schema=IclConfig,
            devices=(Device.CPU, Device.CUDA) if cuda else (Device.CPU,),
            check_device=check_device if cuda else None,
        ),
        analysis=_spec.AnalysisHooks(
            default_series=("loss/train",),
            loss_levels=_LEVELS[name],
            drop_times="theory/eq21/drop_time"
            if name == "attn-s"
            else None,  # Eq. 21's half-rise times
            param_targets=param_targets,
            fit_note=(
                f"{name} losses go through plateaus and drops (saddle to saddle), not a power law: "
                "the exponent only describes the window fitted; compare the plateaus with "
                "`fastdyn theory plateaus` and `fastdyn plot`"
            ),
        ),
        warmup=_spec.WarmupHooks(sizes=_TINY, variants=_VARIANTS[name], precompile=precompile),
    )


ATTN_M, ATTN_S, MLP_CUBIC = _entry("attn-m"), _entry("attn-s"), _entry("mlp-cubic")
ENTRIES = {e.name: e for e in (ATTN_M, ATTN_S, MLP_CUBIC)}
