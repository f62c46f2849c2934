"""Per-task tables: the teacher Σ_yx = U S Vᵀ, the initial weights and the closed form's inputs.

Task s draws U (o×o), V (d×d) and R (h×h), Haar-random orthogonal, then (``random`` init) W1(0)
and W2(0), from ``numpy.random.default_rng([seed, s])``: each task's tables depend only on its
index, so a run split by task range, or resumed, is bit-identical. Its singular values are
σ_{s,k} = s0 · k^-b · s^-a, k = 1..r, r = min(d, o).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .kernels import HEAD


def singular_values(s: np.ndarray, r: int, s0: float, a: float, b: float) -> np.ndarray:
    """σ_{s,k} = s0 · k^-b · s^-a, (r, len(s)): the teacher's spectrum of tasks s (1-based)."""
    k = np.arange(1, r + 1, dtype=np.float64)
    return s0 * k[:, None] ** -b * np.asarray(s, dtype=np.float64)[None, :] ** -a


def _orthogonal(rng: np.random.Generator, n: int) -> np.ndarray:
    """A Haar-random n×n orthogonal matrix (QR of a Gaussian, signs fixed by R's diagonal)."""
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def n_params(d: int, o: int) -> int:
    """Length of a task's parameter column (layout in :mod:`.kernels`)."""
    return HEAD + o * d + o + d + 2 * min(d, o)


def tables(task: Any, init: Any, seed: int, n_tasks: int, first: int, n: int):
    """(params (k, n), y0 (h·d + o·h, n)) of tasks first+1 … first+n."""
    d, h, o, m = task.d, task.h, task.o, task.mode
    r, learn = min(d, o), min(d, h, o)
    s_idx = np.arange(first + 1, first + n + 1)
    sig = singular_values(s_idx, r, task.s0, task.a, task.b)
    p = np.zeros((n_params(d, o), n))
    y0 = np.zeros((h * d + o * h, n))
    p[0], p[1], p[2], p[3] = d, h, o, 1.0 / n_tasks
    uo, base = HEAD + o * d, HEAD + o * d + o + d
    p[base : base + r] = sig
    for c, s in enumerate(s_idx):
        rng = np.random.default_rng([seed, int(s)])
        U, V, R = _orthogonal(rng, o), _orthogonal(rng, d), _orthogonal(rng, h)
        S = np.zeros((o, d))
        S[np.arange(r), np.arange(r)] = sig[:, c]
        p[HEAD:uo, c] = (U @ S @ V.T).ravel()
        p[uo : uo + o, c], p[uo + o : base, c] = U[:, m - 1], V[:, m - 1]
        if init.scheme == "aligned":
            root = np.sqrt(init.u0)
            W1 = root * R @ np.eye(h, d) @ V.T
            W2 = root * U @ np.eye(o, h) @ R.T
            u0 = np.full(learn, init.u0)
        else:
            W1 = init.scale * rng.standard_normal((h, d))
            W2 = init.scale * rng.standard_normal((o, h))
            grow = W1 @ V[:, :learn] + W2.T @ U[:, :learn]  # column k: W1 v_k + W2ᵀ u_k
            u0 = np.sum(grow * grow, axis=0) / 4.0
        p[base + r : base + r + learn, c] = u0
        y0[:, c] = np.concatenate([W1.ravel(), W2.ravel()])
    return p, y0
