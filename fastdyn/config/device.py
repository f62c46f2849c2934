"""① The ``device`` key's rules: which config paths have CUDA kernels (see fastdyn/drive/device.py,
which also checks that a GPU is there)."""

from __future__ import annotations

from typing import Any

from .schema import ConfigError

DEVICES = ("cpu", "cuda")


def check_supported(cfg: Any) -> None:
    """ConfigError naming the field when ``cfg`` asks for cuda on a path that has no twin."""
    if getattr(cfg, "device", "cpu") != "cuda":
        return
    model = cfg.model
    if model == "msfr":
        if cfg.theory.level == "exact":
            raise ConfigError(
                "theory.level: 'exact' has no CUDA kernel; use 'leading', 'first_order' or 'none' with device = 'cuda', or device = 'cpu'"
            )
        return
    if model in ("attn-m", "attn-s"):
        s = cfg.settings
        if s.data.population:
            raise ConfigError(
                "data.population: the population path uses CPU sufficient statistics, not the per-sample kernels that run on CUDA; use device = 'cpu'"
            )
        if getattr(s.model, "reduced", False):
            raise ConfigError(
                "attention.reduced: the reduced path has no CUDA kernel; use attention.reduced = false or device = 'cpu'"
            )
        return
    raise ConfigError(
        f"device: 'cuda' is not available for model {model!r} (CUDA kernels: msfr, attn-m, attn-s); use device = 'cpu'"
    )
