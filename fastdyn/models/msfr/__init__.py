"""MSFR: per-task (v, w) gradient flow, its closed forms and scaling laws (spec msfr.md).

``ENTRY`` (built in :mod:`.entry`, loaded on first use so that importing a submodule such as the
``theory`` command stays light) is what the ``fastdyn.models`` entry point ``msfr`` names.
"""

from typing import Any

__all__ = ["ENTRY", "check_device", "task_strengths"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import entry

        return getattr(entry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
