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


@dataclass(frozen=True)
class ModelEntry:
    """One registered model.

    ``run`` drives a whole simulation of this model from a validated config and writes through the
    given writer; ``kind`` is ``"ode"`` or ``"trained"``; ``extras`` holds model-specific callables
    (kernels, theory functions) that tests and benchmarks reach by name.
    """

    name: str
    kind: str
    summary: str
    run: Callable[..., Any]
    extras: dict[str, Callable[..., Any]] = field(default_factory=dict)


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
