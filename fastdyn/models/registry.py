"""Import every model package so that each registers itself; then look models up by name."""

from __future__ import annotations

from ._spec import ModelEntry, get, names, register

_LOADED = False


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from ..drive import (
        msfr_attn_run,  # noqa: F401  (registers "msfr-attn")
        msfr_run,  # noqa: F401  (registers "msfr")
    )

    try:
        from . import icl_registry  # noqa: F401  (registers "attn-m", "attn-s", "mlp-cubic")
    except ImportError:
        pass


def get_model(name: str) -> ModelEntry:
    _load()
    return get(name)


def model_names() -> list[str]:
    _load()
    return names()


__all__ = ["ModelEntry", "get_model", "model_names", "register"]
