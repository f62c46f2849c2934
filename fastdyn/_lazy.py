"""Package attributes imported on first use (PEP 562), so that importing a package stays cheap.

A package's ``__init__`` names where each public attribute lives and takes its module-level
``__getattr__`` and ``__dir__`` from :func:`lazy_attributes`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str,
    namespace: dict[str, Any],
    lazy: Mapping[str, str],
    submodules: Iterable[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` (its ``globals()``: ``namespace``).

    ``lazy`` maps an attribute's name to the module that defines it: the first access imports
    it and caches the value in ``namespace``. ``submodules`` are imported (not cached) on access
    by name, as ``package.<name>``. Any other name raises AttributeError as for a plain module."""
    subs = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        if name in subs:
            return importlib.import_module(f"{package}.{name}")
        if name in lazy:
            value = getattr(importlib.import_module(lazy[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(lazy))

    return __getattr__, __dir__
