"""The kernel interface, in prose, and the registry of models by name.

Every model registers one :class:`ModelEntry` under its config name (``"msfr"``, ``"attn-m"``,
``"attn-s"``, ``"mlp-cubic"``, ...). Drivers, writers, sweeps and the CLI look models up here and
never special-case one.

Roles (one per kind of model, identical across models):

- ODE models: ``n_state``, ``init(params, seed, first_index, state)``,
  ``rhs(t, state, params, d_state)``, ``loss(state, params, out)``.
- Closed forms: ``theory(times, params, out)``.
- Trained models: ``n_params(config)``, ``init(config, seed, weights)``,
  ``loss_and_grad(weights, data, grad) -> loss``.

Kernels take flat float64 arrays in structure-of-arrays layout (task or sample index fastest),
allocate nothing that outlives the call and hold no Python objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ModelEntry:
    """One registered model.

    ``kind`` is ``"ode"`` or ``"trained"``; ``setup(cfg, tools)`` returns a :class:`TrainedSetup`
    or an :class:`OdeSetup` that the driver of that kind runs (``tools`` carries the device and
    the drive-level functions a setup may need, e.g. the integrators, so models never import
    ``drive``). ``extras`` holds model-specific callables (kernels, theory functions) that tests
    and benchmarks reach by name.
    """

    name: str
    kind: str
    summary: str
    run: Callable[..., Any] | None = None
    setup: Callable[..., TrainedSetup | OdeSetup] | None = None
    extras: dict[str, Callable[..., Any]] = field(default_factory=dict)
    default_series: tuple[str, ...] = ("loss/test",)
    loss_levels: tuple[str, ...] = ()


@dataclass
class TrainedSetup:
    """What a trained model hands the trained-model driver (``drive/trained.py``) for one run.

    Built by the entry's ``setup(cfg, tools)`` from a validated config; the driver owns the
    optimiser, the step loop, streaming, checkpoints, resume, signals, divergence, progress and
    status. Time is ``t = time_per_step · step``; ``time_units`` and ``time_long_name`` (the
    ``/time`` attributes) state that convention in the file when it is not the default one.

    - ``model``: ``n_params``, ``loss_and_grad(theta, prep, grad, idx) -> loss`` (``idx`` None: the
      full training set), ``loss_value(theta, prep)``; optionally ``fused_gd``.
    - ``observe(theta) -> (losses, weights)``: what is measured at a save besides the train loss.
    - ``row(i, step, losses, weights) -> {series: row}``: row ``i`` of every series in ``series``.
    - ``final(theta) -> {path: array}``: datasets written when the run ends.
    """

    model: Any
    prep: dict
    theta: np.ndarray
    optim: Any  # a config section: name, lr, beta1, beta2, eps, weight_decay, momentum
    batch_size: int | None
    epochs: int
    save_steps: np.ndarray
    time_per_step: float
    seed: int
    series: dict[str, tuple[int, ...]]
    observe: Callable[[np.ndarray], tuple[dict[str, float], dict[str, np.ndarray]]]
    row: Callable[[int, int, dict[str, float], dict[str, np.ndarray]], dict[str, np.ndarray]]
    final: Callable[[np.ndarray], dict[str, np.ndarray]]
    static: dict[str, np.ndarray] = field(default_factory=dict)
    #: static dataset → (scale label, axis of every series it labels | {series: axis})
    scales: dict[str, tuple[str, int | dict[str, int]]] | None = None
    extra_attrs: dict[str, Any] = field(default_factory=dict)
    time_units: str | None = None
    time_long_name: str | None = None
    checkpoint_every: Any = 60.0


@dataclass
class OdeSetup:
    """What an ODE / closed-form model hands the ODE driver (``drive/ode_run.py``) for one run.

    Tasks 1..``n_tasks`` are independent; their tables come in chunks of whole blocks
    (``spans``, ``chunk(first, n)``: an object with ``first``, ``n`` and the kernels' per-task
    arrays), so sums over tasks are per-block partials added in block order (``fastdyn.reduce``)
    and the output does not depend on threads, chunking or a split into parts. The driver owns the
    loop over output segments and chunks, streaming, checkpoints, resume, signals, divergence,
    progress and status; the model supplies:

    - ``advance(chunk, state, times, steps, local_track, test_partials, train_partials, f)``:
      integrate the chunk's tasks of ``state`` through one segment of output times (gd: steps),
      adding the block partials of L_test and L_train and writing f of the tracked tasks;
    - ``theory(chunk, times, local_track) -> (test_partials, train_partials, f)``: the closed form;
    - ``new_state(chunks, n)``: the state of ``n`` tasks holding ``chunks`` (each chunk's ``first``
      counted from the state's first task; chunks are dataclasses with ``first`` and ``n``),
      ``save_state(state) -> {name: array}`` (shapes in ``checkpoint``),
      ``restore(state, arrays, chunks, rows_done, last_step)`` (ValueError if they do not fit);
    - ``summary(state) -> {name: count}`` (additive integrator counts, stored as ``solver_<name>``
      root attributes) and ``failure(counts) -> text or None`` (tasks that did not finish);
    - ``zero_loss(chunk)``: the divergence reference, the chunk's test loss at the start (with every
      f = 0, or at the initialisation when that is larger; a bound of both will do) and
      ``cause(chunks)``: the likely cause of a divergence, for the message.

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


_REGISTRY: dict[str, ModelEntry] = {}


def register(entry: ModelEntry) -> ModelEntry:
    """Add ``entry`` to the registry (re-registering the same name replaces it)."""
    _REGISTRY[entry.name] = entry
    return entry


def get(name: str) -> ModelEntry:
    """The entry registered as ``name`` (KeyError naming the known models otherwise)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise KeyError(f"unknown model {name!r}; known models: {known}") from None


def names() -> list[str]:
    """Registered model names, sorted."""
    return sorted(_REGISTRY)
