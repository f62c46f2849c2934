"""Fixed-block, fixed-order reductions shared by every kernel.

Determinism contract: a sum over tasks (or samples) is computed as
``Σ_b partial[b]`` where block ``b`` holds the indices ``[b·BLOCK, (b+1)·BLOCK)`` of the *global*
index range, each partial is summed serially in index order inside its block, and the partials are
added in block order. Chunks handed to kernels always start on a block boundary, so the result is
bit-identical for any number of threads and any chunk size that is a multiple of ``BLOCK``.
"""

from __future__ import annotations

import numpy as np
from numba import float64, njit

from ._jit import SERIAL

#: tasks (or samples) per reduction block; chunk sizes must be multiples of this
BLOCK: int = 1024

#: a parallel region wakes the other threads, which sleep between regions (OMP_WAIT_POLICY =
#: PASSIVE, ``fastdyn._threads``): ≈ 57 µs per region on the project's 2-core machine, against
#: ≈ 10–25 µs of work per block of the per-sample ICL kernels. Below this many blocks those
#: kernels run their blocks on the calling thread, in the same order (the same result).
MIN_PARALLEL_BLOCKS: int = 16


def n_blocks(n: int) -> int:
    """Number of blocks covering ``n`` consecutive indices that start on a block boundary."""
    return (int(n) + BLOCK - 1) // BLOCK


def block_partials(n: int, width: int) -> np.ndarray:
    """A zeroed ``(n_blocks(n), width)`` float64 array for per-block partial sums."""
    return np.zeros((n_blocks(n), width), dtype=np.float64)


@njit(**SERIAL)
def accumulate_blocks(total: np.ndarray, partials: np.ndarray) -> None:
    """``total[k] += Σ_b partials[b, k]``, blocks added one at a time in order (in place)."""
    nb, width = partials.shape
    for b in range(nb):
        for k in range(width):
            total[k] += partials[b, k]


@njit(**SERIAL)
def add_block_sums(terms: np.ndarray, partials: np.ndarray) -> None:
    """``partials[b, k] += Σ_{i in block b} terms[i, k]`` for per-item terms (n, width), items
    added in index order within each block (in place)."""
    n, width = terms.shape
    for b in range(partials.shape[0]):
        for i in range(b * BLOCK, min(b * BLOCK + BLOCK, n)):
            for k in range(width):
                partials[b, k] += terms[i, k]


def round_up_to_block(n: int) -> int:
    """The smallest multiple of ``BLOCK`` that is ≥ ``n`` (and ≥ BLOCK)."""
    n = max(int(n), 1)
    return ((n + BLOCK - 1) // BLOCK) * BLOCK


@njit(**dict(SERIAL, inline="always", cache=False))
def lane_dot(a: np.ndarray, b: np.ndarray, n: int) -> float:
    """Σ_{t<n} a_t b_t in a fixed order that does not wait on one add chain: four lanes (t mod 4)
    summed in t order, the tail t ≥ 4⌊n/4⌋ added to lane 0, then (l0 + l1) + (l2 + l3)."""
    p0 = float64(0.0)
    p1 = float64(0.0)
    p2 = float64(0.0)
    p3 = float64(0.0)
    n4 = n - n % 4
    for i in range(0, n4, 4):
        p0 += a[i] * b[i]
        p1 += a[i + 1] * b[i + 1]
        p2 += a[i + 2] * b[i + 2]
        p3 += a[i + 3] * b[i + 3]
    for i in range(n4, n):
        p0 += a[i] * b[i]
    return (p0 + p1) + (p2 + p3)
