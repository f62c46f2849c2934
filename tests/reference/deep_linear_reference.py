"""Readable references for the deep-linear example plug-in (numpy / scipy; no fastdyn kernel).

- :func:`spectrum`: σ_{s,k} = s0 · k^-b · s^-a, the teachers' singular values.
- :func:`saxe_u`: Saxe, McClelland & Ganguli (ICLR 2014)'s mode strength of a balanced aligned
  start, typed in as the paper writes it, u(t) = s e^{2st/τ} / (e^{2st/τ} − 1 + s/u0), τ = 1.
- :func:`aligned_loss`: the mean over tasks of L = ½ Σ_k (σ_k − u_k)², modes k > min(d, h, o)
  never learned (u_k = 0).
- :func:`matrix_flow`: τ dW1/dt = W2ᵀ(M − W2 W1), τ dW2/dt = (M − W2 W1) W1ᵀ for one network in
  matrix form, integrated by scipy's DOP853 at rtol 1e-12; its loss ½‖M − W2 W1‖² and the
  strength u_mᵀ W2 W1 v_m at the given times.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp


def spectrum(n: int, r: int, s0: float, a: float, b: float) -> np.ndarray:
    """(n, r): σ of task s (row s − 1), mode k (column k − 1)."""
    return np.array([[s0 * k**-b * s**-a for k in range(1, r + 1)] for s in range(1, n + 1)])


def saxe_u(t: np.ndarray, s: float, u0: float) -> np.ndarray:
    """u(t) = s e^{2st} / (e^{2st} − 1 + s/u0) (needs 2 s t < 700: no overflow guard)."""
    e = np.exp(2.0 * s * np.asarray(t, dtype=float))
    assert np.all(np.isfinite(e))
    return s * e / (e - 1.0 + s / u0)


def aligned_loss(times, n, d, h, o, s0, a, b, u0, mode=1):
    """(mean loss over the n tasks (T,), u_mode(t) of every task (n, T)) for an aligned start."""
    r = min(d, o)
    sig = spectrum(n, r, s0, a, b)
    loss = np.zeros(len(times))
    f = np.zeros((n, len(times)))
    for s in range(n):
        for k in range(r):
            u = saxe_u(times, sig[s, k], u0) if k < min(h, r) else np.zeros(len(times))
            loss += 0.5 * (sig[s, k] - u) ** 2 / n
            if k == mode - 1:
                f[s] = u
    return loss, f


def matrix_flow(W1, W2, M, times, um, vm):
    """(loss (T,), u_m (T,)) of one network along the matrix gradient flow (DOP853, rtol 1e-12)."""
    h, d = W1.shape
    o = W2.shape[0]

    def rhs(_t, y):
        A, B = y[: h * d].reshape(h, d), y[h * d :].reshape(o, h)
        E = M - B @ A
        return np.concatenate([(B.T @ E).ravel(), (E @ A.T).ravel()])

    y0 = np.concatenate([W1.ravel(), W2.ravel()])
    sol = solve_ivp(
        rhs, (0.0, times[-1]), y0, method="DOP853", t_eval=times, rtol=1e-12, atol=1e-15
    )
    assert sol.success
    loss, u = np.zeros(len(times)), np.zeros(len(times))
    for j in range(len(times)):
        A, B = sol.y[: h * d, j].reshape(h, d), sol.y[h * d :, j].reshape(o, h)
        loss[j] = 0.5 * np.sum((M - B @ A) ** 2)
        u[j] = um @ B @ A @ vm
    return loss, u
