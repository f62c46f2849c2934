"""The one place that holds numba's compilation flags.

Every kernel in fastdyn is compiled with ``@njit(**SERIAL)`` (per-block, per-task kernels) or
``@njit(**PARALLEL)`` (the outer ``prange`` over fixed-size blocks). ``fastmath`` stays off so that
results are reproducible across machines and thread counts.
"""

from __future__ import annotations

SERIAL: dict = {"cache": True, "nogil": True, "error_model": "numpy"}
PARALLEL: dict = {"cache": True, "nogil": True, "parallel": True, "error_model": "numpy"}
