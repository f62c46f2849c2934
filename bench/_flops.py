"""FLOPs and bytes per full-batch epoch of fastdyn's per-sample kernels, counted by hand.

Counting rule: every floating-point multiply, add, subtract and divide the kernel executes is one
FLOP (no FMA contraction: a multiply-add is 2; an exp is counted separately, not as FLOPs; max and
compare are not counted). Bytes: the compulsory reads of the per-sample arrays per epoch, each read
once (float64 = 8 bytes, msfr-attn's stored tokens float32 = 4, int64 = 8); the O(parameters)
work arrays are left out. Each function returns (flops, bytes) per epoch.

ICL last-token linear attention (ATTN_M and ATTN_S share ``lin_last``; NP = (D+1)(D+2)/2 packed
pairs, NQ = NP·D): per sample 4·NQ + 4D + 4 (g_c = Σ_p M_pc S_p: 2NQ; ŷ = Σ_c x_c g_c: 2D; δ, δ²
and its sum: 4; w x_c = (δ/ρ) x_c: 2D; T_pc += S_p w x_c: 2NQ); per block the pairwise lane sums
(1 + NQ)(LANES − 1); per epoch ``contract_M`` 2 H D1² D, ``heads_from_T`` 4 H D1² D, the GD step
2 n_params, and for ATTN_S B_i = K_iᵀQ_i and the chain rule to K, Q: 6 H R D1 D. Bytes: packed S,
x_q, y_q: P (NP + D + 1)·8.

Minibatch step (``lin_minibatch``, B samples): the last-token count on the B gathered rows
(one block for B ≤ BLOCK), the optimiser's update 2 n_params (SGD) or 14 n_params (Adam).

Cumulative loss (ATTN_M, prefix n = 1..N, T = N terms per sample): ``lin_last`` on the P·N prefix
rows prepared once (packed S_n, x_n/ρ_n, y_n): the last-token count with P·N rows, bytes
P N (NP + D + 1)·8. (The token path ``lin_cum``, kept for sets above ``PREFIX_BYTES_MAX``, rebuilds
S_n per prefix: NP (4D + 7) + 5 per prefix, bytes P (N+1)(D+2)·8.)

Softmax (``_soft_block``, last token): forward H(2 D1 D + (N+1)(4 D1 + 4)), backward
H(N+1)(3 + D1(3 + 2D)) per sample; H(N+1) exps. Bytes as the cumulative loss.

MLP-cubic (features path, ``_mlp_block``; K = D², T = 1 per sample): ŷ = γ·z (2K), δ, δ² and its
sum (3), Σ δ z (2K): 4K + 3 per sample; per epoch γ = Σ_i w2_i W1_i (2HK) and the gradients (3HK)
and the GD step. Bytes: Z and Y, P (K + 1)·8.

Full-batch linear attention from the data's moments (``lin_moments``, the default for a
full-batch step on the CPU: G = Σ φφᵀ (NQ × NQ), b = Σ yφ, y2 taken once): per epoch u = Gm
(2 NQ²), m·b and m·u (4 NQ), Σ δ² (5) and T (3 NQ), plus the per-epoch work of the last-token
count above (fold, chain rule, GD step). Bytes: G and b, (NQ² + NQ)·8. MLP-cubic from its
sufficient statistics (``reduced_grad``; K = D²): L and G = c − Cγ (2K² + 4K), γ and the
gradients (5HK), the GD step; bytes (K² + K)·8.

msfr-attn sparse (``_sample_linear`` + ``_sparse_pass2``): S2 = Σ x_t² and the query q are stored
once per sequence when the workspace is built (2ψ_s FLOPs and 4(ψ_s + 1) bytes then, not per
epoch); per epoch u·v, u·w (4), ŷ (7), δ (2), c1, c2 (2 + 3), the four local gradients
(3 + 2 + 3 + 2), ℓ = δ²/2 and its sum (3); pass 2 adds the four (4) and scales per task: 35 per
sequence. Bytes: S2 and q (float64) 16, index and task 16, the local gradient written and read
back 64: 96 per sequence.

msfr-attn dense (``_dense_kernel``, linear, merged, d_tok = 2d, a sequence of T = ψ_s + 1 tokens):
noise features scale·noise ((d − 1) T) and labels (T − 1); a = W z_q (2 d_tok d); per token
s_t = z_t·a and m_t = z_t·v (4 d_tok), ŷ += m_t s_t (2), Σ s_t z_t and Σ m_t z_t (4 d_tok);
δ and ℓ (5); ∂/∂v (2 d_tok), ∂/∂W (d_tok + 2 d_tok d):
T (8 d_tok + d + 2) − 1 + 4 d_tok d + 3 d_tok + 5 per sequence. Bytes: x 4T, the d read noise
columns 4 T d, task and offset 16.
"""

from __future__ import annotations


def lin_last(D: int, H: int, P: int, n_params: int, R: int = 0) -> tuple[float, float]:
    """ATTN_M (R = 0) or ATTN_S (rank R) last-token linear attention, one GD epoch."""
    from fastdyn.models.icl.attn_m.kernels import LANES
    from fastdyn.reduce import n_blocks

    D1 = D + 1
    NP = D1 * (D1 + 1) // 2
    NQ = NP * D
    fl = P * (4 * NQ + 4 * D + 4) + n_blocks(P) * (1 + NQ) * (LANES - 1)
    fl += 6 * H * D1 * D1 * D + 2 * n_params + 6 * H * R * D1 * D
    return float(fl), 8.0 * P * (NP + D + 1)


def lin_minibatch(D: int, H: int, B: int, n_params: int, opt: str) -> tuple[float, float]:
    """One minibatch step of last-token linear attention (ATTN_M) on B samples: the last-token
    count on B rows, with Adam's update (14 n_params: m 3, v 4, the bias-corrected ratio with its
    square root 5, θ 2) in place of GD's (2 n_params). Bytes: the B rows read once; their gather
    into block-local arrays (as many bytes again, written) is not counted."""
    fl, by = lin_last(D, H, B, n_params)
    if opt == "adam":
        fl += 12 * n_params
    return fl, by


def lin_cum(D: int, N: int, H: int, P: int, n_params: int) -> tuple[float, float]:
    """ATTN_M with the cumulative loss (N prefixes per sample), one GD epoch: the last-token
    kernel on the P·N prepared prefix rows."""
    return lin_last(D, H, P * N, n_params)


def lin_moments(D: int, H: int, n_params: int, R: int = 0) -> tuple[float, float]:
    """Full-batch linear attention (any P, last-token or cumulative) from the data's moments."""
    D1 = D + 1
    NQ = D1 * (D1 + 1) // 2 * D
    fl = 2 * NQ * NQ + 7 * NQ + 5 + 6 * H * D1 * D1 * D + 2 * n_params + 6 * H * R * D1 * D
    return float(fl), 8.0 * (NQ * NQ + NQ)


def mlp_stats(D: int, H: int, n_params: int) -> tuple[float, float]:
    """MLP-cubic, full batch, from its sufficient statistics."""
    K = D * D
    return float(2 * K * K + 4 * K + 5 * H * K + 2 * n_params), 8.0 * (K * K + K)


def softmax(D: int, N: int, H: int, P: int) -> tuple[float, float, float]:
    """Softmax ATTN_S/ATTN_M, last token: (flops, bytes, exps) per epoch."""
    D1 = D + 1
    fwd = H * (2 * D1 * D + (N + 1) * (4 * D1 + 4))
    bwd = H * (N + 1) * (3 + D1 * (3 + 2 * D))
    return float(P * (fwd + bwd)), 8.0 * P * (N + 1) * (D + 2), float(P * H * (N + 1))


def mlp(D: int, H: int, P: int, n_params: int) -> tuple[float, float]:
    """MLP-cubic, per-sample features, last token, one GD epoch."""
    K = D * D
    return float(P * (4 * K + 3) + 5 * H * K + 2 * n_params), 8.0 * P * (K + 1)


def msfr_sparse(n: int) -> tuple[float, float]:
    """msfr-attn sparse linear path over ``n`` sequences (S2 and q stored, not re-summed)."""
    return 35.0 * n, 96.0 * n


def msfr_dense(len_of_seq, d: int) -> tuple[float, float]:
    """msfr-attn dense linear path (block, merged); ``len_of_seq``: tokens T of every sequence."""
    n = len_of_seq.shape[0]
    T = float(len_of_seq.sum())
    dt = 2 * d
    fl = T * (8 * dt + d + 2) + n * (4 * dt * d + 3 * dt + 4)
    return fl, 4.0 * T * (1 + d) + 16.0 * n
