"""① config: TOML + --set overrides → one frozen, validated config per run."""

from .load import from_dict, load_config, to_dict, to_toml
from .schema import ConfigError

__all__ = ["ConfigError", "from_dict", "load_config", "to_dict", "to_toml"]
