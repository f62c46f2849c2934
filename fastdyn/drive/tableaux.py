"""④ The generic solver's Runge–Kutta methods as data (Butcher tableaux, as scipy.integrate._ivp
keeps them), driven by the one RK loop of :mod:`fastdyn.drive.soa_tasks`.

A tableau is (c, A, b, e): stage i evaluates k_i = rhs(y + h Σ_{j<i} A_ij k_j), the step is
y_new = y + (h / b_den) Σ_j b_j k_j, and an embedded pair gives the error estimate
err = h Σ_j e_j k_j (e = b − b̂). ``b`` is stored as integers over ``b_den`` where that is how the
method is written (RK4: (1, 2, 2, 1)/6), so the loop's rounding is the textbook formula's; zero
coefficients are skipped, never multiplied. ``fsal``: the last stage is rhs(y_new) (Dormand–Prince),
the next step's first.

Registered methods (:data:`METHODS`, by ``solver.integrator``): ``rk4`` (classical, 4 stages),
``dopri5`` (Dormand–Prince 5(4), 7 stages with FSAL, the 5th-order solution propagated) and
``gd`` (forward Euler: one gradient-descent step of learning rate h when rhs is a negative
gradient). Step-size control is :func:`fastdyn.core.steppers.step_factor`, the one controller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import steppers as S


@dataclass(frozen=True)
class Tableau:
    """One explicit Runge–Kutta method (float64 arrays; A strictly lower triangular)."""

    name: str
    c: np.ndarray
    a: np.ndarray
    b: np.ndarray
    b_den: float
    #: e = b − b̂ of an embedded pair (None: fixed steps only), and the order of b̂
    e: np.ndarray | None = None
    error_order: int = 0
    fsal: bool = False

    @property
    def stages(self) -> int:
        return int(self.c.shape[0])


def _lower(rows: list[tuple[float, ...]], s: int) -> np.ndarray:
    a = np.zeros((s, s))
    for i, row in enumerate(rows):
        a[i + 1, : len(row)] = row
    return a


RK4 = Tableau(
    "rk4",
    c=np.array([0.0, 0.5, 0.5, 1.0]),
    a=_lower([(0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)], 4),
    b=np.array([1.0, 2.0, 2.0, 1.0]),
    b_den=6.0,
)

DOPRI5 = Tableau(
    "dopri5",
    c=np.array(S.DP_C),
    a=_lower(
        [
            (S.DP_A21,),
            (S.DP_A31, S.DP_A32),
            (S.DP_A41, S.DP_A42, S.DP_A43),
            (S.DP_A51, S.DP_A52, S.DP_A53, S.DP_A54),
            (S.DP_A61, S.DP_A62, S.DP_A63, S.DP_A64, S.DP_A65),
            S.DP_B[:6],
        ],
        7,
    ),
    b=np.array(S.DP_B),
    b_den=1.0,
    e=np.array(S.DP_E),
    error_order=S.DP_ORDER_EST,
    fsal=True,
)

EULER = Tableau("gd", c=np.array([0.0]), a=np.zeros((1, 1)), b=np.array([1.0]), b_den=1.0)

#: ``solver.integrator`` → its method
METHODS: dict[str, Tableau] = {t.name: t for t in (RK4, DOPRI5, EULER)}
