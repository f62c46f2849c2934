"""msfr-attn: linear/softmax self-attention trained on sampled MSFR sequences.

``ENTRY`` is what the ``fastdyn.models`` entry point ``msfr-attn`` names.
"""

from typing import Any

from .. import _spec
from .config import MsfrAttnConfig
from .setup import setup

_KERNELS = "fastdyn.models.msfr_attn.kernels"
#: the argument types :func:`fastdyn.models.msfr_attn.kernels.loss_and_grad` passes its kernels:
#: _sparse_pass1(theta, idx, offset, tok, x, s2, q, lam, d, shared, separate, r, softmax, ovy, okx,
#: oky, oq, partials, loss_part), _sparse_pass2(theta, g, gstart, d, shared, separate, r, ovy, okx,
#: oky, oq, inv_m, grad, spart) and, with feature noise or a target shift, _dense_kernel
_F1, _I1 = "float64[::1]", "int64[::1]"
SPARSE1_ARGS = (
    f"({_F1}, {_I1}, {_I1}, {_I1}, float32[::1], {_F1}, {_F1}, {_F1}, int64, boolean, boolean, "
    f"int64, boolean, int64, int64, int64, int64, float64[:, ::1], {_F1})"
)
SPARSE2_ARGS = (
    f"({_F1}, float64[:, ::1], {_I1}, int64, boolean, boolean, int64, int64, int64, int64, int64, "
    f"float64, {_F1}, float64[:, ::1])"
)
DENSE_ARGS = (
    f"({_F1}, {_I1}, {_I1}, {_I1}, float32[::1], float32[:, ::1], {_F1}, {_F1}, int64, int64, "
    f"boolean, boolean, int64, boolean, int64, float64[:, ::1], {_F1})"
)


def precompile(cfg: Any) -> tuple[tuple[str, str], ...]:
    """With ``theory.compare`` the set-up compiles MSFR's exact closed form (≈ 14 s) and then its
    gd lane kernel (≈ 13 s) before the first training step: the lane kernel (unconstrained runs)
    and the training kernels are declared, and the second process has compiled them by the time
    the run reaches them. Without the comparison the set-up is short (a run with one phase):
    nothing."""
    if not cfg.theory.compare:
        return ()
    if cfg.data.feature_noise > 0 or cfg.data.tau > 0:
        train = ((f"{_KERNELS}:_dense_kernel", DENSE_ARGS),)
    else:
        train = ((f"{_KERNELS}:_sparse_pass1", SPARSE1_ARGS), (f"{_KERNELS}:_sparse_pass2", SPARSE2_ARGS))  # fmt: skip
    if cfg.attention.constrained:  # compared with the leading-order closed form only
        return train
    from ..msfr.entry import LANES_ARGS

    return (("fastdyn.models.msfr.integrate_kernels:lanes_kernel", LANES_ARGS), *train)


#: ``fastdyn warmup``: the key-query forms, optimisers and attention variants the preset does not reach
_VARIANTS = (
    (
        "msfr-attn separate, adamw",
        "msfr_attention",
        (
            'attention.kq="separate"',
            "attention.rank=1",
            'optim.name="adamw"',
            "optim.weight_decay=1e-5",
            "task.n_samples=5000",
        ),
    ),
    (
        "msfr-attn softmax, adam minibatch",
        "msfr_attention",
        (
            "attention.softmax=true",
            'optim.name="adam"',
            "optim.batch_size=100",
            "task.n_samples=5000",
        ),
    ),
    (
        "msfr-attn shared embedding, sgd",
        "msfr_attention",
        (
            'attention.embedding="shared"',
            'optim.name="sgd"',
            "optim.batch_size=100",
            "task.n_samples=5000",
        ),
    ),
    ("msfr-attn constrained", "msfr_attention", ("attention.constrained=true",)),
)  # fmt: skip

ENTRY = _spec.ModelEntry(
    name="msfr-attn",
    kind="trained",
    summary="linear/softmax self-attention trained on sampled MSFR sequences",
    run=_spec.RunHooks(setup=setup, schema=MsfrAttnConfig),
    warmup=_spec.WarmupHooks(
        sizes=("schedule.epochs=4", "schedule.n_saves=2"), variants=_VARIANTS, precompile=precompile
    ),
)
