"""Named configs shipped with the package (``fastdyn simulate quickstart``): ``fastdyn/presets/``,
read through :mod:`importlib.resources` so they are there in an installed wheel too
(``data/configs`` in a source checkout is a link to the same folder)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from .schema import ConfigError

#: where the shipped configs live (inside the package: a wheel carries them as package data)
CONFIG_DIR = Path(str(importlib.resources.files("fastdyn") / "presets"))


def names() -> list[str]:
    """Names of the shipped configs."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml")) if CONFIG_DIR.is_dir() else []


def resolve(name_or_path: str) -> Path:
    """A path as given if it exists (or looks like a path), else the shipped config of that name."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists() or "/" in name_or_path:
        if not p.exists():
            raise ConfigError(f"config file {name_or_path!r}: not found")
        return p
    q = CONFIG_DIR / f"{name_or_path}.toml"
    if q.is_file():
        return q
    import difflib

    close = difflib.get_close_matches(name_or_path, names(), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(
        f"config {name_or_path!r}: no such file or preset{hint}; presets: {', '.join(names()) or 'none'}"
    )
