"""The per-task matrices M_s = H_s/κ_s of msfr-h, their eigen-data and the initial (v, w).

Random draws are counter-based (``problems.rng``: keyed by (seed, task index, stream)), so a task's
M_s and init do not depend on chunking or threads. Haar eigenvectors: modified Gram–Schmidt on the
columns of a d×d standard normal matrix (= QR with a positive diagonal of R, the Haar measure).
Perturbation E_s = (G + Gᵀ)/2 / ‖(G + Gᵀ)/2‖_F for another normal matrix G.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..._jit import PARALLEL
from ...problems import rng

#: rng streams of msfr-h's draws (problems/rng.py uses 1–4: v, w init, data, minibatch)
STREAM_EIGVEC = 11
STREAM_PERTURB = 12
#: eigenvalues ≥ this × the largest span Π (the idempotent-like part)
PI_FRACTION = 0.5
#: relative defect ‖H² − μH‖_F / ‖H‖_F² below which the closed form is exact
EXACT_DEFECT = 1e-12


@njit(**PARALLEL)
def _spectral(first, seed, spec, random_vecs, delta, out):
    """out[i] = Q diag(spec) Qᵀ + δ E for task index first + i (0-based)."""
    n, d = out.shape[0], out.shape[1]
    for i in prange(n):
        idx = first + i
        q = np.zeros((d, d))
        if random_vecs:
            for a in range(d):
                for b in range(d):
                    q[a, b] = rng.normal(seed, idx, np.int64(STREAM_EIGVEC), a * d + b)
            for b in range(d):  # modified Gram–Schmidt on the columns
                for c in range(b):
                    dot = 0.0
                    for a in range(d):
                        dot += q[a, c] * q[a, b]
                    for a in range(d):
                        q[a, b] -= dot * q[a, c]
                nrm = 0.0
                for a in range(d):
                    nrm += q[a, b] * q[a, b]
                nrm = math.sqrt(nrm)
                for a in range(d):
                    q[a, b] /= nrm
        else:
            for a in range(d):
                q[a, a] = 1.0
        for a in range(d):
            for b in range(a, d):
                acc = 0.0
                for k in range(d):
                    acc += q[a, k] * spec[k] * q[b, k]
                out[i, a, b] = acc
                out[i, b, a] = acc
        if delta != 0.0:
            _add_perturbation(idx, seed, delta, out[i])


@njit(**PARALLEL)
def _perturb_all(first, seed, delta, out):
    for i in prange(out.shape[0]):
        _add_perturbation(first + i, seed, delta, out[i])


@njit(cache=True, nogil=True)
def _add_perturbation(idx, seed, delta, m):
    d = m.shape[0]
    e = np.empty((d, d))
    for a in range(d):
        for b in range(d):
            e[a, b] = rng.normal(seed, idx, np.int64(STREAM_PERTURB), a * d + b)
    fro = 0.0
    for a in range(d):
        for b in range(d):
            s = 0.5 * (e[a, b] + e[b, a])
            fro += s * s
    c = delta / math.sqrt(fro)
    for a in range(d):
        for b in range(a, d):
            s = c * 0.5 * (e[a, b] + e[b, a])
            m[a, b] += s
            if b != a:
                m[b, a] += s


@njit(**PARALLEL)
def _random_init(first, seed, scale, v, w):
    """v[:, i], w[:, i] = σ0 N(0, 1) entries (MSFR's init streams: d = 2 gives MSFR's random init)."""
    d, n = v.shape
    for i in prange(n):
        for a in range(d):
            v[a, i] = scale * rng.normal(seed, first + i, rng.STREAM_INIT_V, a)
            w[a, i] = scale * rng.normal(seed, first + i, rng.STREAM_INIT_W, a)


def unit_matrices(h_cfg, h_file: np.ndarray | None, seed: int, first: int, n: int) -> np.ndarray:
    """M_s = H_s/κ_s for tasks first+1 … first+n, shape (n, d, d)."""
    d = int(h_cfg.dim)
    if h_file is not None:
        m = np.array(
            np.broadcast_to(h_file, (n, d, d)) if h_file.ndim == 2 else h_file[first : first + n],
            dtype=np.float64,
        )
        m = 0.5 * (m + np.swapaxes(m, 1, 2))
        if h_cfg.perturbation:
            _perturb_all(first, seed, float(h_cfg.perturbation), m)
        return m
    m = np.empty((n, d, d))
    _spectral(
        first,
        int(seed),
        h_cfg.eigenvalues(),
        h_cfg.eigenvectors == "random",
        float(h_cfg.perturbation),
        m,
    )
    return m


def eigen_data(h: np.ndarray, v0: np.ndarray, w0: np.ndarray):
    """(μ, P0, Q0, defect, λmax) per task of H (n, d, d): Π the projector on the eigenvalues
    ≥ PI_FRACTION·λmax, μ their mean, P0 = |Π(v0 + w0)|², Q0 = |Π(v0 − w0)|² (v0, w0: (d, n)),
    defect ‖H² − μH‖_F / ‖H‖_F²."""
    lam, x = np.linalg.eigh(h)  # ascending
    lmax = lam[:, -1]
    sel = lam >= PI_FRACTION * lmax[:, None]
    mu = np.sum(np.where(sel, lam, 0.0), axis=1) / np.sum(sel, axis=1)
    cp = np.einsum("nab,an->nb", x, v0 + w0)  # components on the eigenvectors
    cm = np.einsum("nab,an->nb", x, v0 - w0)
    p0 = np.sum(np.where(sel, cp * cp, 0.0), axis=1)
    q0 = np.sum(np.where(sel, cm * cm, 0.0), axis=1)
    fro2 = np.sum(h * h, axis=(1, 2))
    dev = np.linalg.norm(h @ h - mu[:, None, None] * h, axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        defect = np.where(fro2 > 0, dev / fro2, 0.0)
    return mu, p0, q0, defect, lmax


def initial_state(init_cfg, h: np.ndarray, seed: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """(v0, w0), each (d, n): balanced σ0·x_1 (top eigenvector of H_s, its largest-|·| entry
    positive), or random (seeded per task)."""
    n, d = h.shape[0], h.shape[1]
    scale = float(init_cfg.scale)
    if init_cfg.scheme == "random":
        v, w = np.empty((d, n)), np.empty((d, n))
        _random_init(first, int(seed), scale, v, w)
        return v, w
    _lam, x = np.linalg.eigh(h)
    x1 = x[:, :, -1]  # (n, d)
    k = np.argmax(np.abs(x1), axis=1)
    x1 = x1 * np.sign(x1[np.arange(n), k])[:, None]
    v = np.ascontiguousarray(scale * x1.T)
    return v, v.copy()
