"""The compute device the kernels of this process run on ("cpu" or "cuda").

A neutral module (like :mod:`fastdyn._jit`) so that models/ and drive/ can both read it without
importing upstream; :mod:`fastdyn.drive.device` validates a request and sets it. Default "cpu".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

DEVICES = ("cpu", "cuda")
_active = "cpu"


def active() -> str:
    """The device kernels run on now."""
    return _active


@contextlib.contextmanager
def using(name: str) -> Iterator[None]:
    """Run the body with kernels on ``name`` (already validated), restoring the previous one."""
    global _active
    if name not in DEVICES:
        raise ValueError(f"device: must be one of {', '.join(DEVICES)}, got {name!r}")
    prev, _active = _active, name
    try:
        yield
    finally:
        _active = prev
