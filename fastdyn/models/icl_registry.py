"""Registers the trained ICL models "attn-m", "attn-s" and "mlp-cubic" in the model registry.

Each entry's ``setup`` is :func:`fastdyn.models.icl_setup.setup` (config → what the trained-model
driver runs); ``extras`` reach the model classes and theory functions.
"""

from __future__ import annotations

from . import _spec
from .attn_m import AttnM
from .attn_m import theory as attn_m_theory
from .attn_s import AttnS
from .attn_s import theory as attn_s_theory
from .icl_setup import setup
from .mlp_cubic import MLPCubic

_SUMMARIES = {
    "attn-m": "multi-head linear/softmax attention with merged key-query on in-context regression",
    "attn-s": "multi-head linear/softmax attention with separate rank-R key and query",
    "mlp-cubic": "two-layer linear network on the cubic features vec(beta x_q^T)",
}
_CLASSES = {"attn-m": AttnM, "attn-s": AttnS, "mlp-cubic": MLPCubic}
_THEORY = {"attn-m": attn_m_theory, "attn-s": attn_s_theory, "mlp-cubic": attn_m_theory}

#: reference levels on loss plots: ATTN_S visits every saddle M_m (plateau losses L(M_m)), the
#: others go from M_0 straight to the global minimum L* (spec icl.md §4)
_LEVELS = {
    "attn-m": ("theory/L_star",),
    "attn-s": ("theory/plateaus", "theory/L_star"),
    "mlp-cubic": ("theory/L_star",),
}

ENTRIES = {}
for _name in ("attn-m", "attn-s", "mlp-cubic"):
    th = _THEORY[_name]
    ENTRIES[_name] = _spec.register(
        _spec.ModelEntry(
            name=_name,
            kind="trained",
            summary=_SUMMARIES[_name],
            setup=setup,
            extras={"model": _CLASSES[_name], **{f: getattr(th, f) for f in th.__all__}},
            default_series=("loss/train",),
            loss_levels=_LEVELS[_name],
        )
    )
