"""④ The ODE driver's own record of one run (:class:`OdeJob`), built by :mod:`.ode_maths` from a
model's :class:`fastdyn.models.OdeMaths` (its generic solver, or the model's registered fast
path). No model sees it: models hand over their maths only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class OdeJob:
    """What the ODE driver (``drive/ode_run.py``) runs for one config.

    Tasks 1..``n_tasks`` are independent; their tables come in chunks of whole blocks
    (``spans``, ``chunk(first, n)``: an object with ``first``, ``n`` and the kernels' per-task
    arrays), so sums over tasks are per-block partials added in block order (``fastdyn.reduce``)
    and the output does not depend on threads, chunking or a split into parts. The driver owns the
    loop over output segments and chunks, streaming, checkpoints, resume, signals, divergence,
    progress and status; the solver supplies:

    - ``advance(chunk, state, times, steps, local_track, test_partials, train_partials, f)``:
      integrate the chunk's tasks of ``state`` through one segment of output times (gd: steps),
      adding the block partials of L_test and L_train and writing f of the tracked tasks;
    - ``theory(chunk, times, local_track) -> (test_partials, train_partials, f)``: the closed form;
    - ``new_state(chunks, n)``, ``save_state(state) -> {name: array}`` (shapes in
      ``checkpoint``), ``restore(state, arrays, chunks, rows_done, last_step)`` (ValueError if
      they do not fit);
    - ``summary(state) -> {name: count}`` (stored as ``solver_<name>`` root attributes) and
      ``failure(counts) -> text or None`` (tasks that did not finish);
    - ``zero_loss(chunk)``: the divergence reference (a bound of the chunk's test loss at the
      start) and ``cause(chunks)``: the likely cause of a divergence, for the message.

    Output series (the ODE format): ``loss/test``, ``loss/train``, ``tasks/f`` when ``simulate``,
    ``theory/loss/…``, ``theory/tasks/f`` when ``theory`` is given; ``tasks/index`` plus ``static``.
    """

    n_tasks: int
    spans: list[tuple[int, int]]
    chunk: Callable[[int, int], Any]
    times: np.ndarray
    steps: np.ndarray | None
    track: np.ndarray
    tail: tuple[float, float]
    simulate: bool
    advance: Callable[..., None]
    new_state: Callable[[Any], Any]
    save_state: Callable[[Any], dict[str, np.ndarray]]
    restore: Callable[..., None]
    summary: Callable[[Any], dict[str, int]]
    failure: Callable[[dict[str, int]], str | None]
    zero_loss: Callable[[Any], float]
    cause: Callable[[Any], str]
    checkpoint: dict[str, tuple[tuple[int, ...], Any]]
    theory: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
    static: dict[str, np.ndarray] = field(default_factory=dict)
    extra_attrs: dict[str, Any] = field(default_factory=dict)
    times_per_segment: int = 1
    checkpoint_every: Any = 60.0
    #: a context for the whole run inside which the state may live on the device between calls
    #: of ``advance`` (a GPU fast path), and the call that copies it back into the host arrays
    #: before the driver reads them (checkpoints, summaries); no-ops by default
    resident: Callable[[], Any] = contextlib.nullcontext
    to_host: Callable[[], None] = lambda: None
    #: ``solver.integrator`` ("dopri5", "rk4", "gd", "none"): ``/time``'s long_name says how the
    #: output times were reached (:data:`fastdyn.h5.layout.TIME_LONG_NAMES`)
    integrator: str = ""
    #: dataset → (units, long_name) beyond the file format's defaults (e.g. the model's statics)
    descriptions: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the kernels the run reaches last (its integrator), as (kernel, signature) pairs that a
    #: first run compiles in a second process (:mod:`fastdyn.drive.compile_beside`)
    precompile: tuple[tuple[str, str], ...] = ()
