"""Import every model package so that each registers itself; then look models up by name.

Only model packages are imported here (``models`` never imports ``drive``): trained models register
a ``setup`` that the trained-model driver runs; the ODE model registers its kind, and
``drive/run.py`` hands it to the ODE driver.
"""

from __future__ import annotations

from ._spec import ModelEntry, get, names, register

_LOADED = False


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import (
        icl_registry,  # noqa: F401  (registers "attn-m", "attn-s", "mlp-cubic")
        msfr,  # noqa: F401  (registers "msfr")
        msfr_attn,  # noqa: F401  (registers "msfr-attn")
        msfr_h,  # noqa: F401  (registers "msfr-h")
    )


def get_model(name: str) -> ModelEntry:
    _load()
    return get(name)


def model_names() -> list[str]:
    _load()
    return names()


__all__ = ["ModelEntry", "get_model", "model_names", "register"]
