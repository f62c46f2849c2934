"""fastdyn-deep-linear: an example model plug-in whose state is coupled weight matrices
(docs/adding-a-model.md walks through it).

Task s = 1..n is an independent two-layer linear network y = W2 W1 x, W1 ∈ R^{h×d},
W2 ∈ R^{o×h}, trained by gradient flow on L = ½ E‖y − W2 W1 x‖² (Saxe, McClelland & Ganguli,
ICLR 2014, "Exact solutions to the nonlinear dynamics of learning in deep linear neural
networks"). With whitened inputs (Σ_xx = I) and a noiseless linear teacher y = Σ_yx x,
L = ½‖Σ_yx − W2 W1‖_F² and

    τ dW1/dt = W2ᵀ (Σ_yx − W2 W1),        τ dW2/dt = (Σ_yx − W2 W1) W1ᵀ;

time is in units of τ (τ = 1: t counts learning-rate-scaled gradient steps). Task s has its own
teacher Σ_yx = U S Vᵀ: random orthogonal U, V from (seed, s), singular values
S_kk = σ_{s,k} = s0 · k^-b · s^-a, k = 1..min(d, o).

Aligned small initialisation (``init.scheme = "aligned"``): W1(0) = √u0 R Ĩ Vᵀ,
W2(0) = √u0 U Ĩ Rᵀ (R a random orthogonal h×h, Ĩ rectangular identities), so every mode
k ≤ min(d, h, o) starts at strength u0 and, exactly,

    u_k(t) = σ_k e^{2σ_k t/τ} / (e^{2σ_k t/τ} − 1 + σ_k/u0),   L = ½ Σ_k (σ_k − u_k)²

(modes beyond the hidden width stay at 0). With ``init.scheme = "random"`` (entries iid
N(0, scale²)) the same formula with u0_k = ‖W1(0) v_k + W2(0)ᵀ u_k‖²/4 (the growing part of
mode k) is an approximation, not exact: the modes interact and the decaying part is dropped.

The package gives fastdyn its maths only (:class:`fastdyn.models.OdeMaths`): :mod:`.kernels`
the per-task ``@njit`` functions and the closed form, :mod:`.tables` the per-task teacher and
initial matrices, :mod:`.entry` ``setup`` and ``ENTRY``. This file imports nothing.
"""
