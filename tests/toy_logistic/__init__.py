"""A test-only toy ODE model, registered from ``tests/`` (docs/adding-a-model.md walks through it).

Task s = 1..n learns a target K_s = 1 at rate r_s = r0·s^-a by the logistic gradient flow

    df/dt = r_s f (K_s − f),        f(0) = f0,

whose closed form is f(t) = K f0 / (f0 + (K − f0) e^{−r K t}). The test loss weighs task s by
P(s) = s^-α / Σ s^-α: L_test = Σ_s P(s) (f_s − K_s)²/2 (train: the same terms, weighted by r_s).

Everything the model needs is in this package: its config schema (``config.py``), its kernels
(``kernels.py``) and its :class:`fastdyn.models._spec.OdeSetup` (``setup.py``). Importing the package
registers both; nothing outside it names the model.
"""

from fastdyn.config.load import register_schema
from fastdyn.models import _spec
from fastdyn.models import registry as _registry

from .config import ToyConfig
from .setup import setup

NAME = "toy-logistic"

register_schema(NAME, ToyConfig)
_registry._load()  # the built-in models first, so a later _load() does not replace this entry
_spec.register(
    _spec.ModelEntry(
        name=NAME, kind="ode", summary="test-only toy: per-task logistic flow", setup=setup
    )
)
