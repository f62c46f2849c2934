"""③ Linear (or softmax) self-attention on sampled MSFR sequences: forward + hand-derived gradients.

Model (docs/theory.md, MSFR): ŷ = v · Z Zᵀ · W_KQ · z_q (linear) or ŷ = v · Z softmax(Zᵀ W_KQ z_q)
(softmax over the ψ_s + 1 tokens, query included; no 1/ψ normaliser, no temperature), v the label
row of W_V, W_KQ merged or W_Kᵀ W_Q (rank r). Loss L = (1/m) Σ_n (ŷ_n − y_q,n)²/2 over the m
sequences given (all N, or a minibatch). Token coordinates (model size D, tasks s ≤ D):

- ``block``: each task its own [x, y] pair, x-slot 2(s−1), label slot 2(s−1)+1 (d_tok = 2D);
- ``shared``: x-slot s−1, one common label slot D (d_tok = D + 1).

Sparse path (exact sparse features, :class:`SeqData` without noise): restricted to task s only the
local pairs v_s = (v[x_s], v[label_s]), w_s = (W[x_s, x_s], W[label_s, x_s]) = K[:, (x_s, label_s)]ᵀ
q_s (separate, q_s = W_Q[:, x_s]) matter; with S2 = Σ_ctx x_i², u = (1, Λ_s), e = (1, 0),
ŷ = q (S2 (uᵀv)(uᵀw) + q² v_x w_x). Stored parameters (all can receive gradient, no others can):

    block/merged     4D          vx[D] vy[D] kx[D] ky[D]
    shared/merged    3D + 1      vx[D] vy[1] kx[D] ky[D]
    block/separate   D(2 + 3r)   vx[D] vy[D] kx[D,r] ky[D,r] q[D,r]
    shared/separate  D(1 + 2r) + 1 + r   vx[D] vy[1] kx[D,r] ky[1,r] q[D,r]

Sequences of tasks s > D have ŷ = 0 and give no gradient. Linear attention reads each sequence's
S2 and q, summed from the tokens once per :class:`Workspace` (O(1) a sample per call after an
O(ψ_s) set-up); softmax reads the tokens every call (two passes). Pass 1 runs ``prange`` over fixed
blocks of BLOCK samples and writes each sample's loss and local gradient (∂ℓ/∂v_s, ∂ℓ/∂w_s); pass 2
runs over fixed blocks of tasks and adds each task's samples in sample order (data are sorted by
task), then maps ∂/∂w_s to K and Q by the chain rule; shared coordinates are summed per task block
and the blocks added in order. Results are bit-identical for any thread count. Calls with less than
``SMALL_WORK`` token·coordinate units (a sparse linear sample: ``LINEAR_SAMPLE_WORK``) run on one
thread: a parallel region costs a thread wake-up per call, which on a loaded machine was
measured at ~8 ms (against ~0.7 ms of work for 16 000 sequences of 5 tokens), and training loops
make one call per step.

Dense path (``feature_noise`` or ``tau``: every token has N_s feature coordinates, the model of
size D ≤ N_s reads coordinates c < D): v[d_tok], merged W[d_tok, D] (row-major; the label column of
W_KQ multiplies the query's zero label and is not stored), separate K[r, d_tok], Q[r, D]; counts
d_tok(D+1) and d_tok(r+1) + rD. Coordinate c of a task-s token is x (c = s) or
scale[(c − s) mod N_s]·noise (the cyclic distance over all N_s tasks). A task s ≥ D has neither its
own coordinate nor a label slot in the model: its ŷ comes from the visible coordinates' noise only
(a sequence of such a task still has a nonzero ŷ and gradient, unlike the sparse path). Per-sample
cost O(ψ_s d_tok + d_tok D). Per-block gradient partials (n_blocks × n_params) added in block order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit, prange

from ..._jit import PARALLEL, SERIAL
from ...reduce import BLOCK, n_blocks


@dataclass(frozen=True)
class Layout:
    """Where each weight lives in the flat float64 parameter vector θ."""

    d: int
    embedding: str = "block"  # "block" | "shared"
    kq: str = "merged"  # "merged" | "separate"
    rank: int = 1
    softmax: bool = False
    dense: bool = False

    @property
    def shared(self) -> bool:
        return self.embedding == "shared"

    @property
    def separate(self) -> bool:
        return self.kq == "separate"

    @property
    def r(self) -> int:
        return int(self.rank) if self.separate else 1

    @property
    def d_tok(self) -> int:
        return self.d + 1 if self.shared else 2 * self.d

    # sparse offsets
    @property
    def n_vy(self) -> int:
        return 1 if self.shared else self.d

    @property
    def n_ky(self) -> int:
        return (1 if self.shared else self.d) * self.r if self.separate else self.d

    @property
    def offsets(self) -> tuple[int, int, int, int, int]:
        """(ovx, ovy, okx, oky, oq) of the sparse layout; dense: (ov, oW|oK, oQ, 0, end)."""
        d, r = self.d, self.r
        if self.dense:
            ow = self.d_tok
            oq = ow + (self.d_tok * d if not self.separate else r * self.d_tok)
            return 0, ow, oq, 0, oq + (r * d if self.separate else 0)
        ovy = d
        okx = ovy + self.n_vy
        oky = okx + d * r
        oq = oky + self.n_ky
        return 0, ovy, okx, oky, oq

    @property
    def n_params(self) -> int:
        if self.dense:
            return self.offsets[4]
        return self.offsets[4] + (self.d * self.r if self.separate else 0)


# ----------------------------------------------------------------------------------------------
# sparse path
# ----------------------------------------------------------------------------------------------


@njit(**SERIAL, inline="always")
def _local_w(theta, s, shared, separate, r, okx, oky, oq):
    if separate:
        wx = 0.0
        wy = 0.0
        j = 0 if shared else s
        for k in range(r):
            qk = theta[oq + s * r + k]
            wx += theta[okx + s * r + k] * qk
            wy += theta[oky + j * r + k] * qk
        return wx, wy
    return theta[okx + s], theta[oky + s]


@njit(**SERIAL, inline="always")
def _local_u(theta, lam, s, shared, separate, r, ovy, okx, oky, oq):
    """(v_x, w_x, uᵀv, uᵀw) of task s, u = (1, Λ_s)."""
    vx = theta[s]
    vy = theta[ovy + (0 if shared else s)]
    wx, wy = _local_w(theta, s, shared, separate, r, okx, oky, oq)
    return vx, wx, vx + lam * vy, wx + lam * wy


@njit(**SERIAL, inline="always")
def _sample_linear(theta, q, s2, lam, s, shared, separate, r, ovy, okx, oky, oq, gout):
    """Linear attention's ℓ = (ŷ − Λq)²/2 of one sequence from its query q and S2 = Σ_ctx x_t²;
    gout = ∂ℓ/∂(vx,vy,wx,wy)."""
    vx, wx, uv, uw = _local_u(theta, lam, s, shared, separate, r, ovy, okx, oky, oq)
    yhat = q * (s2 * uv * uw + q * q * vx * wx)
    err = yhat - lam * q
    c1 = err * q * s2
    c2 = err * q * q * q
    gout[0] = c1 * uw + c2 * wx
    gout[1] = c1 * uw * lam
    gout[2] = c1 * uv + c2 * vx
    gout[3] = c1 * uv * lam
    return 0.5 * err * err


@njit(**SERIAL)
def _sample_softmax(theta, x, a, e, lam, s, shared, separate, r, ovy, okx, oky, oq, gout):
    """Softmax attention's ℓ of one sequence (tokens x[a..e), query x[e]); gout as above."""
    q = np.float64(x[e])
    vx, wx, uv, uw = _local_u(theta, lam, s, shared, separate, r, ovy, okx, oky, oq)
    # softmax over scores a_t = z_tᵀ w q: context x_t q (uᵀw), query q² w_x
    sq = q * q * wx
    mx = sq
    for t in range(a, e):
        sc = np.float64(x[t]) * q * uw
        if sc > mx:
            mx = sc
    eq = math.exp(sq - mx)
    zs = eq
    sx = 0.0
    sxx = 0.0
    for t in range(a, e):
        xi = np.float64(x[t])
        w = math.exp(xi * q * uw - mx)
        zs += w
        sx += w * xi
        sxx += w * xi * xi
    pq = eq / zs
    px = sx / zs
    pxx = sxx / zs
    yhat = px * uv + pq * q * vx
    err = yhat - lam * q
    # ∂ŷ/∂v = Σ p z ; ∂ŷ/∂w = q Σ p (vᵀz − ŷ) z
    gout[0] = err * (px + pq * q)
    gout[1] = err * lam * px
    cu = q * (uv * pxx - yhat * px)
    ce = q * pq * q * (q * vx - yhat)
    gout[2] = err * (cu + ce)
    gout[3] = err * cu * lam
    return 0.5 * err * err


@njit(**PARALLEL)
def _context_sums(idx, offset, x, s2, q):
    """Per workspace row j (sequence n = idx[j]): S2 = Σ_ctx x_t² (summed in token order) and the
    query q, as float64; what the linear sparse pass reads instead of the tokens, every epoch."""
    m = idx.shape[0]
    for b in prange((m + BLOCK - 1) // BLOCK):
        for j in range(b * BLOCK, min(m, (b + 1) * BLOCK)):
            n = idx[j]
            e = offset[n + 1] - 1
            acc = 0.0
            for t in range(offset[n], e):
                xi = np.float64(x[t])
                acc += xi * xi
            s2[j] = acc
            q[j] = np.float64(x[e])


@njit(**PARALLEL)
def _sparse_pass1(
    theta, idx, task, offset, x, s2, qs, lam, d, shared, separate, r, softmax, ovy, okx, oky, oq,
    g, lpart,
):  # fmt: skip
    """Per sample j: loss into its block's partial, local gradient into g[j]. Linear attention
    reads the stored S2 and query (s2[j], qs[j]); softmax reads the tokens."""
    m = idx.shape[0]
    for b in prange(lpart.shape[0]):
        acc = 0.0
        gl = np.zeros(4)
        for j in range(b * BLOCK, min(m, (b + 1) * BLOCK)):
            n = idx[j]
            s = task[n]
            e = 0
            if softmax:
                e = offset[n + 1] - 1
                q = np.float64(x[e])
            else:
                q = qs[j]
            if s >= d:
                acc += 0.5 * (lam[s] * q) ** 2
                for k in range(4):
                    g[j, k] = 0.0
                continue
            if softmax:
                acc += _sample_softmax(
                    theta, x, offset[n], e, lam[s], s, shared, separate, r, ovy, okx, oky, oq, gl
                )
            else:
                acc += _sample_linear(
                    theta, q, s2[j], lam[s], s, shared, separate, r, ovy, okx, oky, oq, gl
                )
            for k in range(4):
                g[j, k] = gl[k]
        lpart[b] = acc


@njit(**PARALLEL)
def _sparse_pass2(theta, g, gstart, d, shared, separate, r, ovy, okx, oky, oq, inv_m, grad, spart):
    for b in prange(spart.shape[0]):
        for s in range(b * BLOCK, min(d, (b + 1) * BLOCK)):
            g0 = 0.0
            g1 = 0.0
            g2 = 0.0
            g3 = 0.0
            for j in range(gstart[s], gstart[s + 1]):
                g0 += g[j, 0]
                g1 += g[j, 1]
                g2 += g[j, 2]
                g3 += g[j, 3]
            g0 *= inv_m
            g1 *= inv_m
            g2 *= inv_m
            g3 *= inv_m
            grad[s] = g0
            if shared:
                spart[b, 0] += g1
            else:
                grad[ovy + s] = g1
            if separate:
                jj = 0 if shared else s
                for k in range(r):
                    qk = theta[oq + s * r + k]
                    grad[okx + s * r + k] = g2 * qk
                    if shared:
                        spart[b, 1 + k] += g3 * qk
                    else:
                        grad[oky + s * r + k] = g3 * qk
                    grad[oq + s * r + k] = (
                        g2 * theta[okx + s * r + k] + g3 * theta[oky + jj * r + k]
                    )
            else:
                grad[okx + s] = g2
                grad[oky + s] = g3


# ----------------------------------------------------------------------------------------------
# dense path (feature noise / source-capacity)
# ----------------------------------------------------------------------------------------------


@njit(**PARALLEL)
def _dense_kernel(
    theta,
    idx,
    task,
    offset,
    x,
    noise,
    scale,
    lam,
    d,
    ns,
    shared,
    separate,
    r,
    softmax,
    max_len,
    gpart,
    lpart,
):
    m = idx.shape[0]
    dt = d + 1 if shared else 2 * d
    ow = dt
    oq = ow + (r * dt if separate else dt * d)
    for b in prange(lpart.shape[0]):
        z = np.zeros((max_len, dt))
        sc = np.zeros(max_len)
        mv = np.zeros(max_len)
        av = np.zeros(dt)
        bv = np.zeros(dt)
        dv = np.zeros(dt)
        zqx = np.zeros(d)
        cq = np.zeros(r)
        kb = np.zeros(r)
        acc = 0.0
        for j in range(b * BLOCK, min(m, (b + 1) * BLOCK)):
            n = idx[j]
            s = task[n]
            t0 = offset[n]
            T = offset[n + 1] - t0
            lm = lam[s]
            lab = d if shared else 2 * s + 1
            for t in range(T):
                for c in range(dt):
                    z[t, c] = 0.0
                xt = np.float64(x[t0 + t])
                for c in range(d):
                    phi = xt if c == s else scale[(c - s) % ns] * np.float64(noise[t0 + t, c])
                    z[t, c if shared else 2 * c] = phi
                if t < T - 1 and s < d:
                    z[t, lab] = lm * xt
            for c in range(d):
                zqx[c] = z[T - 1, c if shared else 2 * c]
            # a = W_KQ z_q
            if separate:
                for k in range(r):
                    acc_c = 0.0
                    for c in range(d):
                        acc_c += theta[oq + k * d + c] * zqx[c]
                    cq[k] = acc_c
                for row in range(dt):
                    acc_a = 0.0
                    for k in range(r):
                        acc_a += theta[ow + k * dt + row] * cq[k]
                    av[row] = acc_a
            else:
                for row in range(dt):
                    acc_a = 0.0
                    for c in range(d):
                        acc_a += theta[ow + row * d + c] * zqx[c]
                    av[row] = acc_a
            mx = -np.inf
            for t in range(T):
                st = 0.0
                mt = 0.0
                for c in range(dt):
                    st += z[t, c] * av[c]
                    mt += z[t, c] * theta[c]
                sc[t] = st
                mv[t] = mt
                if st > mx:
                    mx = st
            if softmax:
                zs = 0.0
                for t in range(T):
                    sc[t] = math.exp(sc[t] - mx)
                    zs += sc[t]
                yhat = 0.0
                for t in range(T):
                    sc[t] /= zs
                    yhat += sc[t] * mv[t]
                for c in range(dt):
                    dv[c] = 0.0
                    bv[c] = 0.0
                for t in range(T):
                    wt = sc[t] * (mv[t] - yhat)
                    for c in range(dt):
                        dv[c] += sc[t] * z[t, c]
                        bv[c] += wt * z[t, c]
            else:
                yhat = 0.0
                for c in range(dt):
                    dv[c] = 0.0
                    bv[c] = 0.0
                for t in range(T):
                    yhat += mv[t] * sc[t]
                    for c in range(dt):
                        dv[c] += sc[t] * z[t, c]
                        bv[c] += mv[t] * z[t, c]
            q = np.float64(x[t0 + T - 1])
            err = yhat - lm * q
            acc += 0.5 * err * err
            for c in range(dt):
                gpart[b, c] += err * dv[c]
            if separate:
                for k in range(r):
                    acc_k = 0.0
                    for row in range(dt):
                        gpart[b, ow + k * dt + row] += err * cq[k] * bv[row]
                        acc_k += theta[ow + k * dt + row] * bv[row]
                    kb[k] = acc_k
                    for c in range(d):
                        gpart[b, oq + k * d + c] += err * kb[k] * zqx[c]
            else:
                for row in range(dt):
                    eb = err * bv[row]
                    for c in range(d):
                        gpart[b, ow + row * d + c] += eb * zqx[c]
        lpart[b] = acc


# ----------------------------------------------------------------------------------------------
# Python layer
# ----------------------------------------------------------------------------------------------


#: below this many token·coordinate units of work per call, kernels run on one thread
SMALL_WORK = 1 << 19
#: work units of one sparse linear sample (from its stored S2 and q): measured ~11 ns a sample
#: against ~1.1 ns a token when the tokens were read (10^6 sequences of ~100 tokens, one thread)
LINEAR_SAMPLE_WORK = 10


class Workspace:
    """Scratch arrays for one (layout, data, index set), reused across steps.

    Sparse linear attention also holds each sample's S2 = Σ_ctx x_t² and query q (float64,
    ``s2``, ``q``; 16 bytes a sample), computed here once instead of from the tokens every call;
    ``sums``, the (s2, q) of a whole-data workspace, is gathered from instead of re-reading tokens.
    """

    def __init__(
        self,
        layout: Layout,
        data,
        idx: np.ndarray | None = None,
        sums: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        self.layout = layout
        self.idx = (
            np.arange(data.n, dtype=np.int64)
            if idx is None
            else np.ascontiguousarray(idx, dtype=np.int64)
        )
        m = self.idx.shape[0]
        lens = data.offset[self.idx + 1] - data.offset[self.idx]
        self.work = int(lens.sum()) * (layout.d_tok if layout.dense else 1)
        if not (layout.dense or layout.softmax):  # reads S2 and q, not the tokens
            self.work = m * LINEAR_SAMPLE_WORK
        self.lpart = np.zeros(n_blocks(m))
        if layout.dense:
            self.gpart = np.zeros((n_blocks(m), layout.n_params))
            lens = np.diff(data.offset)
            self.max_len = int(lens.max()) if lens.size else 1
        else:
            self.g = np.zeros((m, 4))
            self.s2, self.q = _sums(layout, data, self.idx, sums)
            tsel = data.task[self.idx]
            self.gstart = np.searchsorted(tsel, np.arange(layout.d + 1)).astype(np.int64)
            self.spart = np.zeros((n_blocks(layout.d), 1 + layout.r))


def _sums(layout: Layout, data, idx: np.ndarray, sums) -> tuple[np.ndarray, np.ndarray]:
    """(S2, q) of the samples idx: gathered from whole-data ``sums``, else from the tokens; empty
    for softmax (it reads the tokens)."""
    if layout.softmax:
        return np.zeros(0), np.zeros(0)
    if sums is not None:
        return sums[0][idx], sums[1][idx]
    s2 = np.empty(idx.shape[0])
    q = np.empty(idx.shape[0])
    _context_sums(idx, data.offset, data.x, s2, q)
    return s2, q


def check_data(layout: Layout, data) -> None:
    """ValueError naming what does not fit between the layout and the data."""
    if layout.dense != data.dense:
        raise ValueError(
            "data: dense-feature data (feature_noise/tau) need the dense layout and vice versa"
        )
    if layout.dense and layout.d > data.n_tasks:
        raise ValueError(
            f"task.model_size: feature_noise/tau need model_size ≤ n_tasks ({data.n_tasks}), got {layout.d}"
        )
    if layout.separate and layout.rank < 1:
        raise ValueError("attention.rank: must be ≥ 1")


def loss_and_grad(
    theta: np.ndarray, layout: Layout, data, grad: np.ndarray, ws: Workspace | None = None
) -> float:
    """L = (1/m) Σ_n (ŷ_n − y_n)²/2 over the workspace's samples (all by default); ∂L/∂θ into grad."""
    if ws is None:
        check_data(layout, data)
        ws = Workspace(layout, data)
    m = ws.idx.shape[0]
    if m == 0:
        grad[:] = 0.0
        return 0.0
    if ws.work >= SMALL_WORK:
        return _loss_and_grad(theta, layout, data, grad, ws)
    nt = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return _loss_and_grad(theta, layout, data, grad, ws)
    finally:
        numba.set_num_threads(nt)


def _loss_and_grad(theta, layout, data, grad, ws) -> float:
    m = ws.idx.shape[0]
    sh, sep, r = layout.shared, layout.separate, layout.r
    if layout.dense:
        ws.gpart[:] = 0.0
        _dense_kernel(
            theta,
            ws.idx,
            data.task,
            data.offset,
            data.x,
            data.noise,
            data.scale,
            data.lam,
            layout.d,
            data.n_tasks,
            sh,
            sep,
            r,
            layout.softmax,
            ws.max_len,
            ws.gpart,
            ws.lpart,
        )
        grad[:] = 0.0
        for b in range(ws.gpart.shape[0]):
            grad += ws.gpart[b]
        grad *= 1.0 / m
        return _ordered(ws.lpart) / m
    _, ovy, okx, oky, oq = layout.offsets
    _sparse_pass1(
        theta,
        ws.idx,
        data.task,
        data.offset,
        data.x,
        ws.s2,
        ws.q,
        data.lam,
        layout.d,
        sh,
        sep,
        r,
        layout.softmax,
        ovy,
        okx,
        oky,
        oq,
        ws.g,
        ws.lpart,
    )
    ws.spart[:] = 0.0
    grad[:] = 0.0
    _sparse_pass2(
        theta, ws.g, ws.gstart, layout.d, sh, sep, r, ovy, okx, oky, oq, 1.0 / m, grad, ws.spart
    )
    if sh:
        tot = np.zeros(1 + r)
        for b in range(ws.spart.shape[0]):
            tot += ws.spart[b]
        grad[ovy] = tot[0]
        if sep:
            grad[oky : oky + r] = tot[1:]
    return _ordered(ws.lpart) / m


def _ordered(a: np.ndarray) -> float:
    acc = 0.0
    for v in a.tolist():
        acc += v
    return acc


def init_params(
    layout: Layout, v0x, v0y, w0x, w0y, scale: float, scheme: str, seed: int
) -> np.ndarray:
    """θ0 from the per-task msfr-core initial pairs v_s = (v0x, v0y), w_s = (w0x, w0y) (s ≤ D).

    merged: exactly those pairs (shared: the common label weight v_y takes task 1's value).
    separate: balanced puts w_s = K[0, (x_s, label_s)]ᵀ q_s[0] with q_s[0] = √σ0, other rows 0
    (they then stay 0: rank 1 dynamics); random draws every K, Q entry i.i.d. N(0, σ0) (seeded).
    """
    from ...problems import rng

    d, r = layout.d, layout.r
    th = np.zeros(layout.n_params)
    v0x, v0y, w0x, w0y = (np.asarray(a, dtype=np.float64)[:d] for a in (v0x, v0y, w0x, w0y))
    if layout.dense:
        dt = layout.d_tok
        xs = np.arange(d) if layout.shared else 2 * np.arange(d)
        lab = np.full(d, d) if layout.shared else 2 * np.arange(d) + 1
        th[xs] = v0x
        if layout.shared:
            th[d] = v0y[0]
        else:
            th[lab] = v0y
        ow, oq = layout.offsets[1], layout.offsets[2]
        if not layout.separate:
            W = th[ow:oq].reshape(dt, d)
            W[xs, np.arange(d)] = w0x
            W[lab, np.arange(d)] = w0y
        else:
            K = th[ow:oq].reshape(r, dt)
            Q = th[oq:].reshape(r, d)
            if scheme == "random":
                g = rng.generator(seed, 11)
                K[:] = g.normal(0.0, math.sqrt(scale), K.shape)
                Q[:] = g.normal(0.0, math.sqrt(scale), Q.shape)
            else:
                sq = math.sqrt(scale)
                K[0, xs] = w0x / sq
                if layout.shared:
                    K[0, d] = w0y[0] / sq
                else:
                    K[0, lab] = w0y / sq
                Q[0, :] = sq
        return th
    _, ovy, okx, oky, oq = layout.offsets
    th[:d] = v0x
    th[ovy : ovy + layout.n_vy] = v0y[: layout.n_vy]
    if not layout.separate:
        th[okx : okx + d] = w0x
        th[oky : oky + d] = w0y
        return th
    kx = th[okx : okx + d * r].reshape(d, r)
    ky = th[oky : oky + layout.n_ky].reshape(-1, r)
    qq = th[oq : oq + d * r].reshape(d, r)
    if scheme == "random":
        g = rng.generator(seed, 11)
        for a in (kx, ky, qq):
            a[:] = g.normal(0.0, math.sqrt(scale), a.shape)
    else:
        sq = math.sqrt(scale)
        kx[:, 0] = w0x / sq
        ky[:, 0] = w0y[: ky.shape[0]] / sq
        qq[:, 0] = sq
    return th


def clean_response(
    theta: np.ndarray, layout: Layout, lam: np.ndarray, psi: np.ndarray, x_dist: str
) -> np.ndarray:
    """Per task s ≤ D, f_s = E[ŷ x_q] on a noise-free sequence of task s (linear attention, any
    layout): ψA + B (Rademacher) or ψA + 3B (Gaussian), A = (uᵀv)(uᵀw), B = v_x w_x of the local
    pairs; NaN for softmax. In the dense variants this is the response the closed form f⁰ predicts
    (the paper's App. H.2); the noise's own contribution is not in it."""
    d = layout.d
    if layout.softmax:
        return np.full(d, np.nan)
    vx, vy, wx, wy = local_pairs(theta, layout)
    lm, ps = lam[:d], psi[:d].astype(np.float64)
    return ps * (vx + lm * vy) * (wx + lm * wy) + (1.0 if x_dist == "rademacher" else 3.0) * vx * wx


def constrained_indices(layout: Layout) -> np.ndarray:
    """Entries of θ that the constrained model holds at 0 (block, merged, sparse layout): every
    task's value weight on its own feature coordinate, v_{s;s} = v_x[s], and its W_KQ entry from the
    label coordinate, w_{s;N+1} = w_y[s]. Then f_s = ψ_s Λ_s v_y w_x (Rademacher, spec msfr.md §2)."""
    if layout.dense or layout.shared or layout.separate or layout.softmax:
        raise ValueError("the constrained model needs the block, merged, linear, sparse layout")
    d = layout.d
    oky = layout.offsets[3]
    return np.concatenate([np.arange(d), oky + np.arange(d)]).astype(np.int64)


def local_pairs(
    theta: np.ndarray, layout: Layout
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per task s ≤ D the local (v_x, v_y, w_x, w_y) of the spec's per-task map (both layouts)."""
    d, r = layout.d, layout.r
    if layout.dense:
        dt = layout.d_tok
        xs = np.arange(d) if layout.shared else 2 * np.arange(d)
        lab = np.full(d, d) if layout.shared else 2 * np.arange(d) + 1
        ow, oq = layout.offsets[1], layout.offsets[2]
        W = (
            theta[ow:oq].reshape(dt, d)
            if not layout.separate
            else theta[ow:oq].reshape(r, dt).T @ theta[oq:].reshape(r, d)
        )
        cols = np.arange(d)
        return theta[xs].copy(), theta[lab].copy(), W[xs, cols].copy(), W[lab, cols].copy()
    _, ovy, okx, oky, oq = layout.offsets
    vx = theta[:d].copy()
    vy = (
        np.broadcast_to(theta[ovy : ovy + layout.n_vy], (d,)).copy()
        if layout.shared
        else theta[ovy : ovy + d].copy()
    )
    if not layout.separate:
        return vx, vy, theta[okx : okx + d].copy(), theta[oky : oky + d].copy()
    kx = theta[okx : okx + d * r].reshape(d, r)
    ky = theta[oky : oky + layout.n_ky].reshape(-1, r)
    qq = theta[oq : oq + d * r].reshape(d, r)
    return vx, vy, (kx * qq).sum(1), (np.broadcast_to(ky, (d, r)) * qq).sum(1)


def dense_weights(theta: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """The full matrices in model token coordinates: v (d_tok,), and W_KQ (d_tok, d_tok) or
    W_K (r, d_tok), W_Q (r, d_tok), zeros where no parameter is stored (for the reference)."""
    d, dt, r = layout.d, layout.d_tok, layout.r
    xs = np.arange(d) if layout.shared else 2 * np.arange(d)
    lab = np.full(d, d) if layout.shared else 2 * np.arange(d) + 1
    if layout.dense:
        ow, oq = layout.offsets[1], layout.offsets[2]
        v = theta[:dt].copy()
        if not layout.separate:
            W = np.zeros((dt, dt))
            W[:, xs] = theta[ow:oq].reshape(dt, d)
            return {"v": v, "W": W}
        WQ = np.zeros((r, dt))
        WQ[:, xs] = theta[oq:].reshape(r, d)
        return {"v": v, "WK": theta[ow:oq].reshape(r, dt).copy(), "WQ": WQ}
    _, ovy, okx, oky, oq = layout.offsets
    v = np.zeros(dt)
    v[xs] = theta[:d]
    if layout.shared:
        v[d] = theta[ovy]
    else:
        v[lab] = theta[ovy : ovy + d]
    if not layout.separate:
        W = np.zeros((dt, dt))
        W[xs, xs] = theta[okx : okx + d]
        W[lab, xs] = theta[oky : oky + d]
        return {"v": v, "W": W}
    WK = np.zeros((r, dt))
    WK[:, xs] = theta[okx : okx + d * r].reshape(d, r).T
    ky = theta[oky : oky + layout.n_ky].reshape(-1, r)
    if layout.shared:
        WK[:, d] = ky[0]
    else:
        WK[:, lab] = ky.T
    WQ = np.zeros((r, dt))
    WQ[:, xs] = theta[oq : oq + d * r].reshape(d, r).T
    return {"v": v, "WK": WK, "WQ": WQ}


def _softmax_rademacher(vx, vy, wx, wy, lam, psi):
    """E over Rademacher sequences of (ŷ/q, (ŷ/q − Λ)²) for softmax: k ~ Bin(ψ, ½) context tokens
    share the query's sign (scores +uᵀw), ψ − k the other sign (−uᵀw), query score w_x."""
    from scipy.special import gammaln

    uv, uw = vx + lam * vy, wx + lam * wy
    k = np.arange(psi + 1, dtype=np.float64)
    logp = gammaln(psi + 1) - gammaln(k + 1) - gammaln(psi - k + 1) - psi * math.log(2.0)
    m = max(abs(uw), wx)
    ep, em, eq = math.exp(uw - m), math.exp(-uw - m), math.exp(wx - m)
    yk = (k * ep * uv - (psi - k) * em * uv + eq * vx) / (k * ep + (psi - k) * em + eq)
    p = np.exp(logp)
    return float(p @ yk), float(p @ ((yk - lam) ** 2))


def population(
    theta: np.ndarray, layout: Layout, lam: np.ndarray, psi: np.ndarray, x_dist: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """Exact per-task (f_s, E(ŷ − y)²/2) for s ≤ D from the weights (sparse path), or None.

    linear, Rademacher: f = ψ(uᵀv)(uᵀw) + v_x w_x, loss (f − Λ)²/2.
    linear, Gaussian (S2 ~ χ²_ψ, E q² = 1, E q⁴ = 3, E q⁶ = 15), A = (uᵀv)(uᵀw), B = v_x w_x:
      E q²(S2 A + q² B − Λ)² = (ψ² + 2ψ)A² + 15B² + Λ² + 6ψAB − 2ψAΛ − 6BΛ; f = ψA + 3B (= E ŷ q).
    softmax, Rademacher: the binomial sum of :func:`_softmax_rademacher`. Otherwise None.
    """
    if layout.dense or (layout.softmax and x_dist != "rademacher"):
        return None
    vx, vy, wx, wy = local_pairs(theta, layout)
    d = layout.d
    lm, ps = lam[:d], psi[:d].astype(np.float64)
    if layout.softmax:
        f = np.empty(d)
        lo = np.empty(d)
        for s in range(d):
            f[s], e2 = _softmax_rademacher(vx[s], vy[s], wx[s], wy[s], lm[s], int(ps[s]))
            lo[s] = 0.5 * e2
        return f, lo
    A = (vx + lm * vy) * (wx + lm * wy)
    B = vx * wx
    if x_dist == "rademacher":
        f = ps * A + B
        return f, 0.5 * (f - lm) ** 2
    f = ps * A + 3.0 * B
    e2 = (
        (ps * ps + 2 * ps) * A * A
        + 15 * B * B
        + lm * lm
        + 6 * ps * A * B
        - 2 * ps * A * lm
        - 6 * B * lm
    )
    return f, 0.5 * e2
