"""msfr-attn: linear/softmax self-attention trained on sampled MSFR sequences.

``ENTRY`` is what the ``fastdyn.models`` entry point ``msfr-attn`` names.
"""

from .. import _spec
from .config import MsfrAttnConfig
from .setup import setup

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
    warmup=_spec.WarmupHooks(sizes=("schedule.epochs=4", "schedule.n_saves=2"), variants=_VARIANTS),
)
