"""④ Which device a run's kernels use: the ``device`` config key / ``--device`` (docs/cuda.md).

``device = "cpu"`` (default) runs the numba CPU kernels. ``device = "cuda"`` runs a model's hot
paths on their numba.cuda twins, each beside its CPU kernel with the same arguments; docs/cuda.md
lists them. A model declares whether it has twins (``ModelEntry.run.devices``) and which of its
config paths have none (``ModelEntry.run.check_device``): those are refused before anything is
written, naming the field. Everything else (task tables, optimiser updates, HDF5) stays on the
CPU. :func:`resolve` turns the key into a :class:`~fastdyn.core.device.Device` once, at the
driver's entry; everything below gets that value.
"""

from __future__ import annotations

from typing import Any

from ..config.device import DEVICES, check_supported
from ..config.schema import ConfigError
from ..core.device import Device

__all__ = ["DEVICES", "check_available", "check_supported", "resolve"]


def check_available(name: str | Device) -> Device:
    """The device ``name``; ConfigError (one line) unless it can run here."""
    if name not in DEVICES:
        raise ConfigError(
            f"device: must be one of {', '.join(repr(d) for d in DEVICES)}, got {name!r}"
        )
    device = Device.of(name)
    if device is Device.CPU:
        return device
    try:
        from numba import cuda
    except ImportError:  # pragma: no cover — numba without its CUDA target
        raise ConfigError(
            "device = 'cuda': numba's CUDA support is not installed (pip install 'fastdyn[cuda]'); use device = 'cpu'"
        ) from None
    try:
        ok = bool(cuda.is_available())
    except Exception:  # noqa: BLE001 — a broken driver install reads as "no GPU"
        ok = False
    if not ok:
        raise ConfigError(
            "device = 'cuda': no usable CUDA GPU here (numba.cuda.is_available() is False: no GPU, no driver, or no CUDA toolkit; pip install 'fastdyn[cuda]'); use device = 'cpu'"
        )
    return device


def resolve(cfg: Any) -> Device:
    """The device ``cfg`` runs on, after checking that it can (ConfigError otherwise)."""
    device = check_available(getattr(cfg, "device", Device.CPU))
    check_supported(cfg)
    return device
