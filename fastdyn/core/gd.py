"""The checked gradient-descent step of the fused full-batch training loops.

A fused loop (several GD epochs in one compiled call) must stop before a step that the trained-run
driver would report as diverged, and take the others exactly as the driver's one-call-per-epoch
path does: the gradient times the trained mask, then ``θ ← θ − η g`` (``fastdyn.drive.optim``'s
``gd_step``), element by element in the same order, so both give bit-identical θ.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import SERIAL


@njit(**SERIAL)
def masked_gd_step(theta, grad, maskf, loss, limit, lr):
    """grad ← grad · maskf (1.0 trained, 0.0 held); then, if ``loss`` is finite and not above
    ``limit`` and every grad entry is finite, θ ← θ − lr · grad (in place) and True; else θ is
    left as it was and False."""
    bad = 0  # a count, not an early exit, so the loop vectorises (200 entries: 95 -> 50-70 ns)
    for k in range(theta.shape[0]):
        g = grad[k] * maskf[k]
        grad[k] = g
        bad += not np.isfinite(g)
    ok = bad == 0 and np.isfinite(loss) and not loss > limit
    if ok:
        for k in range(theta.shape[0]):
            theta[k] -= lr * grad[k]
    return ok
