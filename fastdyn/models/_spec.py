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

    ``kind`` is ``"ode"`` or ``"trained"``. A trained model registers ``setup(cfg, tools) ->
    TrainedSetup`` and the trained-model driver runs it (``tools`` carries the drive-level
    functions a setup may need, e.g. a reference integrator, so models never import ``drive``);
    an ODE model registers ``run`` (its run loop). ``extras`` holds model-specific callables
    (kernels, theory functions) that tests and benchmarks reach by name.
    """

    name: str
    kind: str
    summary: str
    run: Callable[..., Any] | None = None
    setup: Callable[..., TrainedSetup] | None = None
    extras: dict[str, Callable[..., Any]] = field(default_factory=dict)


@dataclass
class TrainedSetup:
    """What a trained model hands the trained-model driver (``drive/trained.py``) for one run.

    Built by the entry's ``setup(cfg, tools)`` from a validated config; the driver owns the
    optimiser, the step loop, streaming, checkpoints, resume, signals, divergence, progress and
    status. Time is ``t = time_per_step · step``.

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
    scales: dict[str, tuple[str, int]] | None = None
    extra_attrs: dict[str, Any] = field(default_factory=dict)
    time_units: str | None = None
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
