"""MSFR with a general per-task d×d H_s (docs/msfr-h.md): the (v, w) gradient flow in R^d given to
the engine as maths (:class:`fastdyn.models.OdeMaths`; its rk4 or dopri5, on the CPU or a CUDA GPU),
beside the Riccati closed form with μ, Π from H_s's eigen-decomposition.

``ENTRY`` is what the ``fastdyn.models`` entry point ``msfr-h`` names.
"""

from ...core.device import Device
from .. import _spec
from .config import MsfrHConfig
from .setup import setup

ENTRY = _spec.ModelEntry(
    name="msfr-h",
    kind="ode",
    summary="MSFR tasks with a general d×d H_s per task: (v, w) flow in R^d and the Riccati closed form",
    run=_spec.RunHooks(
        setup=setup,
        schema=MsfrHConfig,
        # the engine compiles its integrators and these kernels for the GPU
        devices=(Device.CPU, Device.CUDA),
    ),
    warmup=_spec.WarmupHooks(
        sizes=("time.n_times=6", "time.t_max=10"),
        variants=(("msfr-h dopri5-free theory", "msfr_h", ('solver.integrator="none"',)),),
    ),
)
