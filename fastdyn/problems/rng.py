"""Counter-based random numbers keyed by (seed, index, stream).

No global stream: every draw is a pure function of its key, so results do not depend on chunking,
thread count or the order in which tasks are visited.

- Inside kernels: :func:`uniform`, :func:`normal` (SplitMix64 finaliser as the hash, 53-bit
  uniforms, Box–Muller normals).
- In Python: :func:`generator` returns a ``numpy.random.Generator`` (Philox) keyed by
  ``(seed, *keys)`` for draws that need numpy's exact samplers (multinomial, binomial).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, uint64

from .._jit import SERIAL

_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_INV53 = 1.0 / 9007199254740992.0  # 2**-53

# named streams, so that different uses of one (seed, index) never collide
STREAM_INIT_V = 1
STREAM_INIT_W = 2
STREAM_DATA = 3
STREAM_MINIBATCH = 4


@njit(**SERIAL)
def mix64(z):
    """SplitMix64 finaliser: a bijective avalanche hash of a uint64."""
    z = uint64(z)
    z = (z ^ (z >> uint64(30))) * uint64(_M1)
    z = (z ^ (z >> uint64(27))) * uint64(_M2)
    return z ^ (z >> uint64(31))


@njit(**SERIAL)
def key(seed, index, stream):
    """Hash of (seed, index, stream) to one uint64 key."""
    h = mix64(uint64(seed) * uint64(_GOLDEN) + uint64(stream))
    return mix64(h ^ (uint64(index) * uint64(_GOLDEN) + uint64(0x632BE59BD9B4E019)))


@njit(**SERIAL)
def uniform(seed, index, stream, k):
    """The k-th U(0, 1) draw (open interval) of key (seed, index, stream)."""
    z = mix64(key(seed, index, stream) + uint64(k) * uint64(_GOLDEN))
    return ((z >> uint64(11)) + 0.5) * _INV53


@njit(**SERIAL)
def normal(seed, index, stream, k):
    """The k-th N(0, 1) draw of key (seed, index, stream) (Box–Muller, cosine branch)."""
    u1 = uniform(seed, index, stream, 2 * k)
    u2 = uniform(seed, index, stream, 2 * k + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def generator(seed: int, *keys: int) -> np.random.Generator:
    """A numpy Generator whose stream depends only on (seed, *keys)."""
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, *[int(k) for k in keys]])
    return np.random.Generator(np.random.Philox(ss))
