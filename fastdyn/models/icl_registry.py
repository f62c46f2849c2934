"""Registers the trained ICL models "attn-m", "attn-s" and "mlp-cubic" in the model registry.

Each entry's ``run(cfg, output, progress=)`` is :func:`fastdyn.drive.icl_run.run_icl_file` (config →
HDF5 file); ``extras["run_settings"](settings, on_save)`` runs :func:`run_icl` in memory, and the
other extras reach the model classes and theory functions.
"""

from __future__ import annotations

from dataclasses import replace

from ..drive.icl_run import run_icl_file
from . import _spec
from .attn_m import AttnM
from .attn_m import theory as attn_m_theory
from .attn_s import AttnS
from .attn_s import theory as attn_s_theory
from .icl_settings import ICLSettings, run_icl
from .mlp_cubic import MLPCubic


def _runner(name: str):
    def run(settings: ICLSettings, on_save=None) -> dict:
        if settings.model.name != name:
            settings = replace(settings, model=replace(settings.model, name=name))
        return run_icl(settings, on_save)

    run.__name__ = f"run_{name.replace('-', '_')}"
    run.__doc__ = f"run_icl for model {name!r}."
    return run


_SUMMARIES = {
    "attn-m": "multi-head linear/softmax attention with merged key-query on in-context regression",
    "attn-s": "multi-head linear/softmax attention with separate rank-R key and query",
    "mlp-cubic": "two-layer linear network on the cubic features vec(beta x_q^T)",
}
_CLASSES = {"attn-m": AttnM, "attn-s": AttnS, "mlp-cubic": MLPCubic}
_THEORY = {"attn-m": attn_m_theory, "attn-s": attn_s_theory, "mlp-cubic": attn_m_theory}

ENTRIES = {}
for _name in ("attn-m", "attn-s", "mlp-cubic"):
    th = _THEORY[_name]
    ENTRIES[_name] = _spec.register(
        _spec.ModelEntry(
            name=_name,
            kind="trained",
            summary=_SUMMARIES[_name],
            run=run_icl_file,
            extras={"model": _CLASSES[_name], "run_settings": _runner(_name), **{f: getattr(th, f) for f in th.__all__}},
        )
    )
