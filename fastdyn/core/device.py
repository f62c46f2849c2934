"""Where a run's kernels execute: a typed choice the driver resolves once (``device`` key,
``--device``) and hands to the model's ``setup``; models never branch on strings."""

from __future__ import annotations

import enum


class Device(enum.StrEnum):
    """``CPU``: numba's CPU kernels; ``CUDA``: their numba.cuda twins (docs/cuda.md). A ``str``
    enum, so ``Device.CUDA == "cuda"`` and it is stored in files and configs as its value."""

    CPU = "cpu"
    CUDA = "cuda"

    @classmethod
    def of(cls, name: str | Device) -> Device:
        """The device named ``name`` (ValueError naming the choices otherwise)."""
        try:
            return cls(name)
        except ValueError:
            allowed = ", ".join(repr(d.value) for d in cls)
            raise ValueError(f"device: must be one of {allowed}, got {name!r}") from None
