"""The compiled Philox permutation against numpy itself: ``Generator(Philox(SeedSequence(keys)))``
(numpy's own key, its ``permutation``, and each epoch's sorted batches drawn from it), bit for bit.

Every permutation here has P ≤ 2³², so numpy's ``random_interval`` takes its 32-bit branch (two
draws from each 64-bit Philox output, low half first) for every index; its 64-bit branch is
reached only for P > 2³², which fastdyn leaves to numpy (fastdyn.drive.optim)."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.problems.philox import epoch_batches, permutation, philox_key

#: seeds: zero (one entropy word), one-word extremes, two-word ones, and random 64-bit ones
SEEDS = (
    0,
    1,
    2**32 - 1,
    2**32,
    2**63 + 5,
    2**64 - 1,
    *np.random.default_rng(7).integers(0, 2**63, 3),
)
#: the keys after the seed: a stream and an epoch, one or two words (5 and more words in all
#: exceed SeedSequence's pool of 4 and take its second mixing loop)
KEYS = ((4, 0), (4, 1), (4, 2**32 + 3), (1, 2**64 - 1))
#: sizes: the masks' edges (255 = 2⁸ − 1 needs no rejection at its top, 257 half of them)
SIZES = (1, 2, 3, 255, 256, 257, 5000, 2**16 + 3)


def _numpy(seed: int, *keys: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([int(seed), *keys])))


def _entropy(seed: int, *keys: int) -> np.ndarray:
    return np.array([int(seed), *keys], dtype=np.uint64)


@pytest.mark.parametrize("keys", KEYS)
def test_the_key_is_numpys_seed_sequence_key(keys):
    for seed in SEEDS:
        want = np.random.Philox(np.random.SeedSequence([int(seed), *keys])).state["state"]["key"]
        assert [int(k) for k in philox_key(_entropy(seed, *keys))] == [int(k) for k in want]


@pytest.mark.parametrize("keys", KEYS)
def test_the_permutation_is_numpys(keys):
    for seed in SEEDS:
        for P in SIZES:
            got = permutation(_entropy(seed, *keys), P)
            np.testing.assert_array_equal(got, _numpy(seed, *keys).permutation(P))
            assert got.dtype == np.int64


#: (first, n, P, B): a block inside one epoch, across epochs, from mid-epoch, P mod B ≠ 0,
#: B = 1 and B = P
BLOCKS = ((0, 1, 300, 64), (3, 10, 300, 64), (5, 40, 5000, 256), (2, 3, 10, 10), (17, 50, 1000, 3),
          (0, 7, 7, 1), (123, 9, 257, 2), (0, 0, 5, 2))  # fmt: skip


@pytest.mark.parametrize("first, n, P, B", BLOCKS)
def test_epoch_batches_are_numpys_permutations_sliced_and_sorted(first, n, P, B):
    nb = P // B
    for seed in SEEDS[::2]:
        want = np.empty((n, B), dtype=np.int64)
        for s in range(n):
            e, j = divmod(first + s, nb)
            want[s] = np.sort(_numpy(seed, 4, e).permutation(P)[j * B : (j + 1) * B])
        got = np.full((n, B), -7, dtype=np.int64)  # every entry written
        epoch_batches(got, np.uint64(seed), 4, first, P, B)
        np.testing.assert_array_equal(got, want)


def test_the_same_integers_as_plain_python():
    """With ``NUMBA_DISABLE_JIT=1`` the kernels run as Python (the widening multiply in Python
    integers): a block of batches is still numpy's."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np, warnings; warnings.simplefilter('ignore')\n"
        "from fastdyn.problems.philox import epoch_batches\n"
        "g = np.random.Generator(np.random.Philox(np.random.SeedSequence([2**63 + 5, 4, 1])))\n"
        "want = np.sort(g.permutation(257)[64:128].reshape(2, 32), axis=1)\n"
        "got = np.empty((2, 32), dtype=np.int64)\n"
        "epoch_batches(got, np.uint64(2**63 + 5), 4, 10, 257, 32)\n"
        "assert np.array_equal(got, want), (got, want)\n"
    )
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
