"""Named configs shipped in ``data/configs/`` (``fastdyn simulate quickstart``)."""

from __future__ import annotations

from pathlib import Path

from .schema import ConfigError

#: where the shipped configs live in a source checkout (the README installs with ``pip install -e``)
CONFIG_DIR = Path(__file__).resolve().parents[2] / "data" / "configs"


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
    raise ConfigError(f"config {name_or_path!r}: no such file or preset; presets: {', '.join(names()) or 'none'}")
