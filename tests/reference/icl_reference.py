"""Slow, readable numpy versions of the ICL kernels, written straight from the matrix formulas.

    ATTN_M(X) = X + Σ_i (1/ρ) W^V_i X Xᵀ W^KQ_i X
    ATTN_S(X) = X + Σ_i (1/ρ) W^V_i X Xᵀ W^K_iᵀ W^Q_i X
    softmax:    X + Σ_i W^V_i X softmax_col(Xᵀ W^KQ_i X)       (column-wise softmax, no ρ)
    MLP:        ŷ = w_2ᵀ W_1 z,  z = (1/ρ) vec(Σ_n y_n x_n x_qᵀ)

The prediction is the bottom-right entry. Weights in the full paper layout (W_V, W_KQ (H, D+1,
D+1); W_K, W_Q (H, R, D+1); W1 (H, D²), w2 (H,)). Data: ``tokens`` (P, N+1, D+1) with the query
label already zero, ``labels`` (P, N+1). Cumulative loss: prefix n = 1..N uses the first n+1 tokens
with token n+1's label hidden and ρ_n = n (scale "N") or 1; the loss is the mean over (μ, n).
"""

from __future__ import annotations

import numpy as np

from fastdyn.models.icl.problem import generate


def _softmax_cols(A: np.ndarray) -> np.ndarray:
    A = A - A.max(axis=0, keepdims=True)
    E = np.exp(A)
    return E / E.sum(axis=0, keepdims=True)


def attention_output(
    X: np.ndarray, WV: np.ndarray, KQ: np.ndarray, rho: float, softmax: bool
) -> np.ndarray:
    """ATTN(X) for X (D+1, T) and per-head key-query products KQ (H, D+1, D+1)."""
    out = X.copy()
    for i in range(WV.shape[0]):
        A = X.T @ KQ[i] @ X  # (T, T): A[j, k] = x̂_jᵀ W x̂_k
        if softmax:
            out = out + WV[i] @ X @ _softmax_cols(A)
        else:
            out = out + WV[i] @ X @ X.T @ KQ[i] @ X / rho
    return out


def _prefixes(tokens, labels, loss):
    N = tokens.shape[1] - 1
    ns = range(1, N + 1) if loss == "cumulative" else [N]
    for mu in range(tokens.shape[0]):
        for n in ns:
            X = tokens[mu, : n + 1].T.copy()  # (D+1, n+1)
            X[:-1, :n] = tokens[mu, :n, :-1].T
            X[-1, :n] = labels[mu, :n]
            X[-1, n] = 0.0
            yield X, labels[mu, n], n


def attn_loss(arrays: dict, tokens, labels, *, scale="N", loss="last", softmax=False) -> float:
    """Mean squared query error of ATTN_M (arrays W_V, W_KQ) or ATTN_S (W_V, W_K, W_Q)."""
    WV = arrays["W_V"]
    if "W_KQ" in arrays:
        KQ = arrays["W_KQ"]
    else:
        KQ = np.einsum("irb,irc->ibc", arrays["W_K"], arrays["W_Q"])
    errs = []
    for X, target, n in _prefixes(tokens, labels, loss):
        rho = n if scale == "N" else 1.0
        out = attention_output(X, WV, KQ, rho, softmax)
        errs.append((target - out[-1, -1]) ** 2)
    return float(np.mean(errs))


def mlp_loss(arrays: dict, tokens, labels, *, scale="N", loss="last") -> float:
    """Mean squared error of ŷ = w2ᵀ W1 z on the cubic features."""
    W1, w2 = arrays["W1"], arrays["w2"]
    errs = []
    for X, target, n in _prefixes(tokens, labels, loss):
        rho = n if scale == "N" else 1.0
        x, y = X[:-1, :-1], X[-1, :-1]
        z = np.outer(x @ y, X[:-1, -1]).ravel() / rho
        errs.append((target - w2 @ (W1 @ z)) ** 2)
    return float(np.mean(errs))


def reduced_loss_population(
    Gamma: np.ndarray, eigvals: np.ndarray, eigvecs: np.ndarray, N: int, kappa: float = 1.0
) -> float:
    """Population loss of ŷ = κ βᵀ Γ x_q: E(y_q − ŷ)² = tr Λ − 2κ tr(Γ Λ²)... written as an
    expectation over Gaussian moments: tr Λ − 2κ tr(Λ² Γᵀ) + κ² tr(Γᵀ E[Λ̂²] Γ Λ)."""
    Lam = (eigvecs * eigvals) @ eigvecs.T
    EL2 = Lam @ Lam + (Lam + np.trace(Lam) * np.eye(len(eigvals))) @ Lam / N
    return float(
        np.trace(Lam)
        - 2 * kappa * np.trace(Lam @ Lam @ Gamma.T)
        + kappa**2 * np.trace(Gamma.T @ EL2 @ Gamma @ Lam)
    )


def finite_difference(f, theta: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """Central differences (f(θ + h e_k) − f(θ − h e_k)) / 2h; truncation error O(h² f''')."""
    g = np.empty_like(theta)
    for k in range(theta.size):
        tp, tm = theta.copy(), theta.copy()
        tp[k] += h
        tm[k] -= h
        g[k] = (f(tp) - f(tm)) / (2 * h)
    return g


# ---------------------------------------------------------------- shared test helpers

#: central differences with h = 1e-5 on O(1) losses: truncation ~h²·f''' ≈ 1e-10 and round-off
#: ~ε·L/h ≈ 1e-11, so 1e-7 (the acceptance bound) has three decades of margin
FD_RTOL = 1e-7
#: one forward pass, kernel vs numpy reference: different summation order only (~10 ulp)
FWD_RTOL = 1e-12


def small_data(D=3, N=5, P=7, seed=1):
    return generate(D, N, P, seed=seed)


def check_gradient(model, data, theta):
    """(rel. FD error of the gradient, rel. error of the loss vs the numpy reference)."""
    prep = model.prepare(data.tokens, data.labels)
    g = np.empty(model.n_params)
    L = model.loss_and_grad(theta, prep, g)
    fd = finite_difference(lambda t: model.loss_value(t, prep), theta) * model.mask
    arr = model.to_arrays(theta)
    if model.name == "mlp-cubic":
        Lr = mlp_loss(arr, data.tokens, data.labels, scale=model.scale, loss=model.loss)
    else:
        Lr = attn_loss(
            arr, data.tokens, data.labels, scale=model.scale, loss=model.loss, softmax=model.softmax
        )
    assert np.all(g[~model.mask] == 0.0)
    return np.abs(g - fd).max() / np.abs(fd).max(), abs(L - Lr) / abs(Lr)


def random_theta(model, scale=0.5, seed=0):
    return np.random.default_rng(seed).normal(size=model.n_params) * scale * model.mask


def longest_run(mask: np.ndarray) -> int:
    best = cur = 0
    for c in mask:
        cur = cur + 1 if c else 0
        best = max(best, cur)
    return best


def reduced_loss_at(Gamma: np.ndarray, Lam: np.ndarray, n: int) -> float:
    """Population last-token loss E(y_q − βᵀΓx_q)² of the reduced predictor at context length n,
    β = (1/n) Σ_{i≤n} y_i x_i, y = wᵀx, w ~ N(0, I), x ~ N(0, Λ), written from Gaussian moments:
    with Λ̂ = (1/n) Σ x_i x_iᵀ and A = ΓΛΓᵀ, the loss is tr Λ − 2 tr(ΓΛ²) + E tr(Λ̂AΛ̂), and
    E[Λ̂AΛ̂] = ΛAΛ + (ΛAΛ + tr(AΛ) Λ)/n (Isserlis, A symmetric)."""
    A = Gamma @ Lam @ Gamma.T
    e = Lam @ A @ Lam + (Lam @ A @ Lam + np.trace(A @ Lam) * Lam) / n
    return float(np.trace(Lam) - 2 * np.trace(Gamma @ Lam @ Lam) + np.trace(e))
