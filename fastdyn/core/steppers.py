"""④ What every adaptive Runge–Kutta solver of fastdyn shares: the Dormand–Prince 5(4)
coefficients (Dormand & Prince 1980), the norm-wise scaled error of a step and the one step-size
controller (:func:`step_factor`, Hairer, Nørsett & Wanner I, §II.4).

The engine's generic solver (:mod:`fastdyn.drive.tableaux`, :mod:`fastdyn.drive.soa_tasks`, any
state width) and MSFR's fast path (:mod:`fastdyn.models.msfr.steps`, its lane kernels) both take
their coefficients and their step-size control from here. The functions are scalar, inlined at
the numba IR level, and compile for CUDA from the same source.
"""

from __future__ import annotations

import math

from numba import njit

from .._jit import SERIAL

_INLINE = dict(SERIAL, inline="always")

# ---- Dormand–Prince 5(4) tableau (Dormand & Prince 1980; Hairer, Nørsett & Wanner I, Table 5.2) ----
DP_C = (0.0, 1.0 / 5.0, 3.0 / 10.0, 4.0 / 5.0, 8.0 / 9.0, 1.0, 1.0)
DP_A21 = 1.0 / 5.0
DP_A31, DP_A32 = 3.0 / 40.0, 9.0 / 40.0
DP_A41, DP_A42, DP_A43 = 44.0 / 45.0, -56.0 / 15.0, 32.0 / 9.0
DP_A51, DP_A52, DP_A53, DP_A54 = (
    19372.0 / 6561.0,
    -25360.0 / 2187.0,
    64448.0 / 6561.0,
    -212.0 / 729.0,
)
DP_A61, DP_A62, DP_A63, DP_A64, DP_A65 = (
    9017.0 / 3168.0,
    -355.0 / 33.0,
    46732.0 / 5247.0,
    49.0 / 176.0,
    -5103.0 / 18656.0,
)
#: 5th-order weights (= row 7 of A: the FSAL property)
DP_B = (35.0 / 384.0, 0.0, 500.0 / 1113.0, 125.0 / 192.0, -2187.0 / 6784.0, 11.0 / 84.0, 0.0)
#: B − B̂ (5th minus embedded 4th order weights), as in scipy.integrate.RK45.E
DP_E = (
    -71.0 / 57600.0,
    0.0,
    71.0 / 16695.0,
    -71.0 / 1920.0,
    17253.0 / 339200.0,
    -22.0 / 525.0,
    1.0 / 40.0,
)
DP_ORDER_EST = 4  # order of the embedded error estimate: controller exponent −1/(order+1)

# standard controller constants (Hairer, Nørsett & Wanner I, §II.4; scipy.integrate.RK45)
SAFETY = 0.9
MIN_FACTOR = 0.2
MAX_FACTOR = 10.0


@njit(**_INLINE)
def error_norm_of_rms(e, ry, ryn, atol, rtol):
    """The norm-wise scaled error of a step, ‖err‖ / (atol + rtol · max(‖y‖, ‖y_new‖)), from the
    RMS norms e = ‖err‖, ry = ‖y‖, ryn = ‖y_new‖ over the state's components (a caller that keeps
    ‖y‖ from the previous step saves a square root). Norm-wise (not component-wise), so that a
    state whose size spans decades (small init) is controlled relative to its own size and a
    component that crosses zero costs no extra steps. Returns 0 for a zero error, inf when the
    scale is zero but the error is not."""
    sc = atol + rtol * max(ry, ryn)
    if e == 0.0:
        return 0.0
    if sc == 0.0:
        return math.inf
    return e / sc


#: the controller's exponent −1/(q + 1), q the order of the embedded error estimate
CONTROL_EXPONENT = -1.0 / (DP_ORDER_EST + 1)


@njit(**_INLINE)
def step_factor(err, pw, rejected_before):
    """The one step-size controller (Hairer, Nørsett & Wanner I, §II.4), h_new = h · factor:
    accepted (err ≤ 1): min(MAX_FACTOR, SAFETY·pw) (MAX_FACTOR for err = 0), at most 1 right
    after a rejection; rejected: max(MIN_FACTOR, SAFETY·pw) (MIN_FACTOR for a non-finite err).
    ``pw`` = err^CONTROL_EXPONENT, computed by the caller (``err**CONTROL_EXPONENT``, or MSFR's
    vectorised lanes' exp/log), used only for 0 < err < inf. Branch-free (selects), so lane
    loops calling it still vectorise; the generic solver, MSFR's lanes and their CUDA twins all
    call it."""
    fa = MAX_FACTOR if err == 0.0 else min(MAX_FACTOR, SAFETY * pw)
    fa = min(1.0, fa) if rejected_before else fa
    fr = MIN_FACTOR if not (err < math.inf) else max(MIN_FACTOR, SAFETY * pw)
    return fa if err <= 1.0 else fr


@njit(**_INLINE)
def dopri5_controller(err, h, rejected_before):
    """:func:`step_factor` with pw = err^(−1/5): returns (accept iff err ≤ 1, h_new)."""
    pw = err**CONTROL_EXPONENT if (err > 0.0 and err < math.inf) else 1.0
    return err <= 1.0, h * step_factor(err, pw, rejected_before)
