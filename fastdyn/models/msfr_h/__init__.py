"""MSFR with a general per-task d×d H_s (docs/msfr-h.md): the (v, w) gradient flow in R^d by the
generic RK4, beside the Riccati closed form with μ, Π from H_s's eigen-decomposition."""

from .. import _spec
from .setup import setup

_spec.register(
    _spec.ModelEntry(
        name="msfr-h",
        kind="ode",
        summary="MSFR tasks with a general d×d H_s per task: (v, w) flow in R^d and the Riccati closed form",
        setup=setup,
    )
)
