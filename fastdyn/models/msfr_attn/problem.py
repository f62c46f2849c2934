"""② Sampled in-context MSFR sequences (docs/theory.md, MSFR), stored sparsely.

A data set of N sequences is the exact multinomial counts #_s of :class:`MsfrProblem` (the same
counts the msfr-core ODE uses) expanded into sequences sorted by task: sequences
``task_start[s] … task_start[s+1]−1`` (0-based s) belong to task s+1. Sequence n holds ψ_s context
inputs and one query input, tokens ``offset[n] … offset[n+1]−1`` of ``x`` (query last). A token's
feature is φ = x·e_s and its label y = Λ_s x; nothing N_s-wide is stored.

Draws are pure functions of (seed, sequence index n, token k) (:mod:`fastdyn.problems.rng`), so the
data do not depend on threads or chunking. x is stored as float32: Rademacher ±1 exactly; Gaussian
values are the float32 roundings of the N(0, 1) draws (the data set is defined by the stored values;
all arithmetic is float64).

Dense-feature variants (training only; a model of size D ≤ N_s reads coordinates c < D): ``feature_noise`` σ gives
every off-task coordinate c ≠ s of every token an independent N(0, σ²) value (the approximately
sparse features of the paper's App. H.2); ``tau`` > 0 gives the source/capacity variant, coordinate
c of a task-s token a N(0, ω_k) value with ω_k = k^-τ, k = 1 + ((c − s) mod N_s) (so ω_1 = 1 is the
task's own coordinate, the spectrum decays along the cyclic distance, and τ → ∞ recovers MSFR). The
extra values are stored as ``noise[token, c]`` (float32, raw N(0,1); the per-coordinate scale is
``scale[k−1]``), only when a variant is on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from ..._jit import PARALLEL
from ...problems import rng

STREAM_NOISE = 5
STREAM_TEST = 6


@dataclass(frozen=True)
class SeqData:
    """N sequences sorted by task (structure of arrays)."""

    task: np.ndarray  # int64 (N,), 0-based task index, non-decreasing
    offset: np.ndarray  # int64 (N+1,), token offsets; query = last token of each sequence
    x: np.ndarray  # float32 (n_tokens,)
    task_start: np.ndarray  # int64 (n_tasks+1,)
    lam: np.ndarray  # float64 (n_tasks,) Λ_s
    noise: np.ndarray  # float32 (n_tokens, n_tasks) or (0, 0)
    scale: np.ndarray  # float64 (n_tasks,) per-distance feature scale (scale[0] unused) or (0,)

    @property
    def n(self) -> int:
        return int(self.task.shape[0])

    @property
    def n_tasks(self) -> int:
        return int(self.lam.shape[0])

    @property
    def dense(self) -> bool:
        return self.noise.shape[0] > 0


# np.int64(i): a prange index is uint64 in the parallel loop, int64 while it is typed; passing it
# as is compiles the rng functions for both
@njit(**PARALLEL)
def _fill_x(seed, stream, offset, gaussian, x):
    n = offset.shape[0] - 1
    for i in prange(n):
        for k in range(offset[i + 1] - offset[i]):
            if gaussian:
                x[offset[i] + k] = rng.normal(seed, np.int64(i), stream, k)
            else:
                x[offset[i] + k] = 1.0 if rng.uniform(seed, np.int64(i), stream, k) < 0.5 else -1.0


@njit(**PARALLEL)
def _fill_noise(seed, stream, offset, task, noise):
    n = offset.shape[0] - 1
    d = noise.shape[1]
    for i in prange(n):
        s = task[i]
        for k in range(offset[i + 1] - offset[i]):
            t = offset[i] + k
            for c in range(d):
                noise[t, c] = 0.0 if c == s else rng.normal(seed, np.int64(i), stream, k * d + c)


def feature_scales(n_tasks: int, feature_noise: float, tau: float) -> np.ndarray:
    """scale[k−1] of cyclic distance k−1: σ (noise), or sqrt(k^-τ) (source/capacity); scale[0] = 1."""
    k = np.arange(1, n_tasks + 1, dtype=np.float64)
    out = np.sqrt(k ** (-tau)) if tau > 0 else np.full(n_tasks, float(feature_noise))
    out[0] = 1.0
    return out


def from_counts(
    counts: np.ndarray, lam: np.ndarray, psi: np.ndarray, seed: int, *, x_dist: str = "rademacher",
    feature_noise: float = 0.0, tau: float = 0.0, stream: int = rng.STREAM_DATA,
) -> SeqData:  # fmt: skip
    """Sequences with ``counts[s]`` of task s+1, context length ``psi[s]`` (tokens), strength ``lam[s]``."""
    counts = np.asarray(counts, dtype=np.int64)
    n_tasks = counts.shape[0]
    if x_dist not in ("rademacher", "gaussian"):
        raise ValueError(f"data.x_dist: one of 'rademacher', 'gaussian', got {x_dist!r}")
    task_start = np.zeros(n_tasks + 1, dtype=np.int64)
    np.cumsum(counts, out=task_start[1:])
    task = np.repeat(np.arange(n_tasks, dtype=np.int64), counts)
    lengths = np.asarray(psi, dtype=np.int64)[task] + 1
    offset = np.zeros(task.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offset[1:])
    x = np.empty(int(offset[-1]), dtype=np.float32)
    _fill_x(np.int64(seed), stream, offset, x_dist == "gaussian", x)
    dense = feature_noise > 0 or tau > 0
    if dense:
        noise = np.empty((x.shape[0], n_tasks), dtype=np.float32)
        _fill_noise(np.int64(seed), STREAM_NOISE + stream, offset, task, noise)
        scale = feature_scales(n_tasks, feature_noise, tau)
    else:
        noise = np.zeros((0, 0), dtype=np.float32)
        scale = np.zeros(0)
    return SeqData(
        task, offset, x, task_start, np.ascontiguousarray(lam, dtype=np.float64), noise, scale
    )


def training_set(
    problem, *, x_dist: str = "rademacher", feature_noise: float = 0.0, tau: float = 0.0
) -> SeqData:
    """The N training sequences of ``problem`` (an :class:`MsfrProblem` with finite n_samples): the
    exact counts #_s of all N_s tasks, tables from :meth:`MsfrProblem.chunk` (ψ_s, Λ_s)."""
    if not problem.finite_n:
        raise ValueError(
            "task.n_samples: sampled sequences need a finite number of sequences, got 'inf'"
        )
    lam, psi, counts = task_columns(problem)
    return from_counts(
        counts, lam, psi, problem.seed, x_dist=x_dist, feature_noise=feature_noise, tau=tau
    )


def task_columns(problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Λ_s, ψ_s, #_s) of all N_s tasks (ψ as int64 tokens)."""
    from ...reduce import BLOCK

    nt = problem.n_tasks
    lam = np.empty(nt)
    psi = np.empty(nt, dtype=np.int64)
    counts = np.zeros(nt, dtype=np.int64)
    step = 256 * BLOCK
    for first in range(0, nt, step):
        n = min(step, nt - first)
        lam[first : first + n], psi[first : first + n] = problem.lam_psi(first, n)
        if problem.finite_n:
            counts[first : first + n] = problem.counts(first, n)
    return lam, psi, counts


def test_set(problem, n_test: int, **kw) -> SeqData:
    """``n_test`` fresh sequences, tasks ~ P(s) (multinomial from its own stream), for held-out
    estimates where the population loss has no closed form."""
    lam, psi, _ = task_columns(problem)
    p = problem.weights(0, problem.n_tasks)
    counts = rng.generator(problem.seed, STREAM_TEST).multinomial(int(n_test), p / p.sum())
    return from_counts(counts, lam, psi, problem.seed, stream=STREAM_TEST, **kw)
