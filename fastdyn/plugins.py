"""Model discovery: every model, built in or installed, comes from the ``fastdyn.models`` entry points.

A package adds a model to fastdyn by declaring, in its ``pyproject.toml``::

    [project.entry-points."fastdyn.models"]
    mymodel = "mypackage:ENTRY"

where ``ENTRY`` is a :class:`fastdyn.models.ModelEntry` named ``mymodel`` (the entry point's name
is the config's ``model``). fastdyn's own models are declared the same way in its own
``pyproject.toml``, so the CLI, the config loader, the drivers and the analysis find every model
through this module and name none (as xarray finds its backends). A model's entry point is loaded on the
first lookup of that model; a plug-in that fails to import is reported by name (``fastdyn config models``) and
does not stop the others. :func:`register` adds an entry in-process (tests, notebooks).

This module sits outside the layered packages (it imports none of them), so ``config`` may ask it
for a model's schema and ``drive`` for its setup without importing any model.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

GROUP = "fastdyn.models"

_ENTRIES: dict[str, Any] = {}
#: model name → its entry points not loaded yet (a model's entry point is loaded when the model
#: is first asked for, so a run imports its own model only)
_POINTS: dict[str, list[Any]] = {}
#: model name → where it comes from ("fastdyn 0.1.0 (…)", "mypackage 1.0 (…)", "in-process")
_SOURCES: dict[str, str] = {}
#: model name → (distribution, version) of the package it comes from ("in-process", "" for one
#: registered in-process)
_DISTS: dict[str, tuple[str, str]] = {}
#: model name → why its entry point could not be loaded
_BROKEN: dict[str, str] = {}
_DISCOVERED = False


def register(entry: Any, source: str = "in-process", dist: tuple[str, str] | None = None) -> Any:
    """Add ``entry`` (an object with ``name``) under its name; a later registration replaces it
    (an in-process one also replaces an entry point of that name not loaded yet). ``dist``: the
    (distribution, version) it comes from."""
    _ENTRIES[entry.name] = entry
    _SOURCES[entry.name] = source
    _DISTS[entry.name] = dist or ("in-process", "")
    _BROKEN.pop(entry.name, None)
    if source == "in-process":
        _POINTS.pop(entry.name, None)
    return entry


def _discover() -> None:
    """Note every entry point of the group (their names only: nothing is imported here)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        if ep.name in _ENTRIES:  # registered in-process already: that one wins
            continue
        _POINTS.setdefault(ep.name, []).append(ep)


def _load(name: str) -> None:
    """Import the entry points of model ``name`` not loaded yet (a broken one is noted)."""
    for ep in _POINTS.pop(name, []):
        pair = (ep.dist.name, ep.dist.version) if ep.dist is not None else ("unknown package", "")
        dist = " ".join(pair).strip()
        try:
            entry = ep.load()
        except Exception as e:  # noqa: BLE001 — one broken plug-in must not hide the others
            _BROKEN[ep.name] = f"{dist}: {ep.value} failed to load ({type(e).__name__}: {e})"
            continue
        if getattr(entry, "name", None) != ep.name:
            _BROKEN[ep.name] = (
                f"{dist}: {ep.value} is not a model entry named {ep.name!r} "
                f"(got {getattr(entry, 'name', type(entry).__name__)!r})"
            )
            continue
        register(entry, f"{dist} ({ep.value})", pair)


def _load_all() -> None:
    _discover()
    for name in list(_POINTS):
        _load(name)


def get(name: str) -> Any:
    """The entry of model ``name``; KeyError naming the known models (or why it is broken)."""
    _discover()
    _load(name)
    if name in _ENTRIES:
        return _ENTRIES[name]
    if name in _BROKEN:
        raise KeyError(f"model {name!r}: {_BROKEN[name]}")
    raise KeyError(f"unknown model {name!r}; known models: {', '.join(names()) or 'none'}")


def names() -> list[str]:
    """The names of every loadable model, sorted."""
    _load_all()
    return sorted(_ENTRIES)


def default() -> str:
    """The model of a config that names none: the built-in model whose entry says ``default``."""
    found = [n for n in names() if getattr(get(n), "default", False) and is_builtin(n)]
    if len(found) != 1:
        raise KeyError(f"{len(found)} built-in models declare themselves the default; expected one")
    return found[0]


def is_builtin(name: str) -> bool:
    """Whether model ``name`` comes from fastdyn itself (not a plug-in or an in-process entry)."""
    return sources().get(name, "").startswith("fastdyn ")


def sources() -> dict[str, str]:
    """Model name → the package (and entry point) it comes from, for every loadable model."""
    _load_all()
    return {n: _SOURCES[n] for n in names()}


def distribution(name: str) -> tuple[str, str] | None:
    """(distribution, version) of the package model ``name`` comes from (("in-process", "") for
    an in-process entry), or None for a model not loaded."""
    return _DISTS.get(name)


def broken() -> dict[str, str]:
    """Model name → why its entry point could not be loaded."""
    _load_all()
    return dict(_BROKEN)
