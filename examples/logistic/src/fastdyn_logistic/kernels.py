"""The model's maths, per task: p = (r, K, w) (rate, target, test weight), y = (f,).

Three ``@njit`` functions of one task, which the driver's integrators (CPU and CUDA) take as
compile-time arguments, and the closed form.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def rhs(p, y, dy):
    """df/dt = r f (K − f): the logistic flow of f toward K at rate r."""
    dy[0] = p[0] * y[0] * (p[1] - y[0])


@njit(cache=True)
def observe(p, y):
    """f, the stored per-task value."""
    return y[0]


@njit(cache=True)
def loss(p, y):
    """(w (f − K)²/2, r (f − K)²/2): the task's terms of L_test and L_train."""
    e = y[0] - p[1]
    return p[2] * e * e / 2.0, p[0] * e * e / 2.0


def closed_form(t: np.ndarray, r: np.ndarray, K: np.ndarray, f0: float) -> np.ndarray:
    """f(t) = K f0 / (f0 + (K − f0) e^{−r K t}) for every task (rows) and time (columns)."""
    return K[:, None] * f0 / (f0 + (K[:, None] - f0) * np.exp(-np.outer(r * K, t)))
