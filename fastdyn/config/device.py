"""① The ``device`` key's rules: a model declares where it runs (``ModelEntry.run.devices``) and
which of its config paths have no CUDA kernel (``ModelEntry.run.check_device``);
fastdyn/drive/device.py also checks that a GPU is there."""

from __future__ import annotations

from typing import Any

from .. import plugins
from .schema import ConfigError

#: the values of :class:`fastdyn.core.device.Device` (a str enum, so they compare equal to it)
DEVICES = ("cpu", "cuda")


def check_supported(cfg: Any) -> None:
    """ConfigError naming the field when ``cfg`` asks for cuda on a path that has no twin."""
    if getattr(cfg, "device", "cpu") != "cuda":
        return
    hooks = plugins.get(cfg.model).run
    if "cuda" not in hooks.devices:
        have = ", ".join(n for n in plugins.names() if "cuda" in plugins.get(n).run.devices)
        raise ConfigError(
            f"device: 'cuda' is not available for model {cfg.model!r} (CUDA kernels: {have or 'none'}); use device = 'cpu'"
        )
    if hooks.check_device is not None:
        hooks.check_device(cfg)
