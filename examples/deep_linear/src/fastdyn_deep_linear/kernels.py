"""The model's maths, per task, and its closed form.

A task's state y is its two weight matrices, row-major, one after the other (width h·d + o·h):

    y[i·d + j]       = W1[i, j]   (i < h, j < d)
    y[h·d + a·h + i] = W2[a, i]   (a < o, i < h)

and its parameter column p (length 4 + o·d + o + d + 2r, r = min(d, o)):

    p[0:4]                  d, h, o (as floats) and w = 1/n_tasks (the task's weight in the mean loss)
    p[4 + a·d + j]          Σ_yx[a, j], the teacher (input–output correlation, Σ_xx = I)
    p[4 + o·d : … + o]      u_m, the stored mode's output singular vector (column m of U)
    p[4 + o·d + o : … + d]  v_m, its input singular vector (column m of V)
    then σ_1..σ_r and u0_1..u0_r: the singular values and initial mode strengths, read only by
    the closed form (:func:`closed_form`).

The three ``@njit`` functions read the sizes from p, so one compiled kernel serves every (d, h, o);
they allocate nothing (the driver also compiles them as CUDA device functions).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: rows of p before Σ_yx
HEAD = 4


@njit(cache=True)
def rhs(p, y, dy):
    """dW1/dt = W2ᵀ E, dW2/dt = E W1ᵀ with E = Σ_yx − W2 W1 (time in units of τ): each entry of
    E is formed once and added into both products."""
    d, h, o = int(p[0]), int(p[1]), int(p[2])
    n1 = h * d
    for r in range(n1 + o * h):
        dy[r] = 0.0
    for a in range(o):
        for j in range(d):
            e = p[HEAD + a * d + j]
            for b in range(h):
                e -= y[n1 + a * h + b] * y[b * d + j]
            for i in range(h):
                dy[i * d + j] += y[n1 + a * h + i] * e
                dy[n1 + a * h + i] += e * y[i * d + j]


@njit(cache=True)
def observe(p, y):
    """u_mᵀ W2 W1 v_m: the strength of the stored mode m (σ_m once learned)."""
    d, h, o = int(p[0]), int(p[1]), int(p[2])
    n1 = h * d
    uo, vo = HEAD + o * d, HEAD + o * d + o
    total = 0.0
    for a in range(o):
        for j in range(d):
            wa = 0.0
            for b in range(h):
                wa += y[n1 + a * h + b] * y[b * d + j]
            total += p[uo + a] * wa * p[vo + j]
    return total


@njit(cache=True)
def loss(p, y):
    """(w L, w L) with L = ½‖Σ_yx − W2 W1‖_F² (the population loss: train and test coincide)."""
    d, h, o = int(p[0]), int(p[1]), int(p[2])
    n1 = h * d
    total = 0.0
    for a in range(o):
        for j in range(d):
            e = p[HEAD + a * d + j]
            for b in range(h):
                e -= y[n1 + a * h + b] * y[b * d + j]
            total += e * e
    lo = p[3] * total / 2.0
    return lo, lo


def mode_strength(t: np.ndarray, sigma: np.ndarray, u0: np.ndarray) -> np.ndarray:
    """u(t) = σ / (1 + (σ/u0 − 1) e^{−2σt}) for modes (rows) and times (columns): Saxe et al.'s
    σ e^{2σt}/(e^{2σt} − 1 + σ/u0), written so that it does not overflow; 0 where u0 = 0."""
    sigma, u0 = sigma[:, None], u0[:, None]
    live = u0 > 0
    ratio = np.where(live, sigma / np.where(live, u0, 1.0), 0.0)
    u = sigma / (1.0 + (ratio - 1.0) * np.exp(-2.0 * sigma * t[None, :]))
    return np.where(live, u, 0.0)


def closed_form(params: np.ndarray, times: np.ndarray, mode: int):
    """(test terms, train terms, f), each (n, T): w ½ Σ_k (σ_k − u_k(t))² and u_mode(t) per task."""
    d, o = int(params[0, 0]), int(params[2, 0])
    r = min(d, o)
    base = HEAD + o * d + o + d
    sigma, u0 = params[base : base + r], params[base + r : base + 2 * r]
    n = params.shape[1]
    terms = np.zeros((n, times.size))
    f = np.zeros((n, times.size))
    for k in range(r):
        u = mode_strength(times, sigma[k], u0[k])
        terms += (sigma[k][:, None] - u) ** 2
        if k == mode - 1:
            f = u
    terms *= params[3][:, None] / 2.0
    return terms, terms.copy(), f
