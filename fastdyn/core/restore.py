"""Putting an ODE run's checkpointed per-task state back, shared by every ODE model's ``restore``.

A checkpoint holds the per-task arrays (the integrator state) and the output row it was written
at; :func:`restore_arrays` copies the arrays in, after checking that each has the shape the config
needs, and :func:`restore_clocks` sets every chunk's clock to that row's time (and step).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["restore_arrays", "restore_clocks"]


def restore_arrays(arrays: Mapping[str, np.ndarray], ck: Mapping[str, np.ndarray]) -> None:
    """Copy ``ck[name]`` into each of ``arrays`` (name → the state's array, written in place);
    ValueError naming the first array whose checkpointed shape differs, before anything is copied."""
    for name, arr in arrays.items():
        if ck[name].shape != arr.shape:
            raise ValueError(
                f"checkpoint: {name} has shape {ck[name].shape}, the config needs {arr.shape}"
            )
    for name, arr in arrays.items():
        arr[...] = ck[name]


def restore_clocks(
    state: Any,
    spans: Iterable[tuple[int, int]],
    times: Any,
    rows: int,
    last_step: int | None = None,
) -> None:
    """After ``rows`` output rows: each chunk's time (``state.t_at[first]``) is the last written
    output time, and with ``last_step`` its step (``state.k_at[first]``) is that; nothing at 0 rows."""
    if rows <= 0:
        return
    for first, _n in spans:
        state.t_at[first] = float(times[rows - 1])
        if last_step is not None:
            state.k_at[first] = int(last_step)
