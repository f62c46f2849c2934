"""msfr-attn: linear/softmax self-attention trained on sampled MSFR sequences."""

from .. import _spec
from .setup import setup

_spec.register(
    _spec.ModelEntry(
        name="msfr-attn",
        kind="trained",
        summary="linear/softmax self-attention trained on sampled MSFR sequences",
        setup=setup,
    )
)
