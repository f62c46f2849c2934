"""The optimisers' updates of a flat float64 parameter vector, as numba kernels: the one copy of
their maths, called by the trained-run driver's optimiser objects (``fastdyn.drive.optim``) and
by the models' fused training loops (several steps in one compiled call), so both give
bit-identical θ and optimiser state.

- :func:`gd_step`       θ ← θ − η g (gd; sgd without momentum);
- :func:`momentum_step` b ← μ b + g, θ ← θ − η b (sgd with heavy-ball momentum μ);
- :func:`adam_step`     Adam with bias correction, L2 weight decay in the gradient, or AdamW's
  decoupled decay.

A fused loop names its rule by a code (:data:`PLAIN`, :data:`MOMENTUM`, :data:`ADAM`,
:data:`ADAMW`) and passes the hyperparameters as ``hyper = [η, μ, β1, β2, ε, λ]``
(:data:`HYPER`); :func:`checked_update` masks the gradient, checks it and applies the rule.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._jit import SERIAL

#: rule codes of :func:`apply_update`
PLAIN, MOMENTUM, ADAM, ADAMW = 0, 1, 2, 3
#: the entries of ``hyper``, in order
HYPER = ("lr", "momentum", "beta1", "beta2", "eps", "weight_decay")


@njit(**SERIAL)
def gd_step(theta, grad, lr):
    """θ ← θ − η g (in place)."""
    for k in range(theta.shape[0]):
        theta[k] -= lr * grad[k]


@njit(**SERIAL)
def momentum_step(theta, grad, buf, lr, mu):
    """b ← μ b + g; θ ← θ − η b (in place)."""
    for k in range(theta.shape[0]):
        buf[k] = mu * buf[k] + grad[k]
        theta[k] -= lr * buf[k]


@njit(**SERIAL)
def adam_step(theta, grad, m, v, step, lr, b1, b2, eps, wd, decoupled):
    """One Adam/AdamW update; ``step`` is a length-1 int64 array (incremented here).

    g ← g + λθ (Adam) ; m ← β1 m + (1−β1) g ; v ← β2 v + (1−β2) g² ;
    θ ← θ − η [m/(1−β1^t)] / (√(v/(1−β2^t)) + ε) − η λ θ (AdamW only)."""
    step[0] += 1
    t = step[0]
    c1 = 1.0 - b1**t
    c2 = 1.0 - b2**t
    for k in range(theta.shape[0]):
        g = grad[k]
        if not decoupled:
            g += wd * theta[k]
        m[k] = b1 * m[k] + (1.0 - b1) * g
        v[k] = b2 * v[k] + (1.0 - b2) * g * g
        upd = (m[k] / c1) / (math.sqrt(v[k] / c2) + eps)
        if decoupled:
            theta[k] -= lr * wd * theta[k]
        theta[k] -= lr * upd


@njit(**SERIAL)
def apply_update(rule, theta, grad, hyper, buf, m, v, step):
    """The update of rule ``rule`` (:data:`PLAIN` … :data:`ADAMW`) with ``hyper`` (:data:`HYPER`)
    and its state: ``buf`` (momentum), ``m``, ``v``, ``step`` (Adam; empty arrays where unused)."""
    if rule == PLAIN:
        gd_step(theta, grad, hyper[0])
    elif rule == MOMENTUM:
        momentum_step(theta, grad, buf, hyper[0], hyper[1])
    else:
        adam_step(
            theta, grad, m, v, step, hyper[0], hyper[2], hyper[3], hyper[4], hyper[5],
            rule == ADAMW,
        )  # fmt: skip


@njit(**SERIAL)
def checked_update(rule, theta, grad, maskf, loss, limit, hyper, buf, m, v, step):
    """grad ← grad · maskf (1.0 trained, 0.0 held); then, if ``loss`` is finite and not above
    ``limit`` and every grad entry is finite, :func:`apply_update` and True; else θ and the
    optimiser state are left as they were and False."""
    ok = np.isfinite(loss) and not loss > limit
    for k in range(theta.shape[0]):
        grad[k] = grad[k] * maskf[k]
        ok = ok and np.isfinite(grad[k])
    if ok:
        apply_update(rule, theta, grad, hyper, buf, m, v, step)
    return ok
