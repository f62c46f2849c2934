"""numpy's ``Generator(Philox(SeedSequence(entropy))).permutation(P)`` in compiled code: the same
integers, without building a numpy Generator for each draw (≈ 10 µs, against 1 µs for the key
here), and shuffled ≈ 4× faster than numpy's (13.6 against 60 µs for P = 5000).

Each piece is numpy's algorithm (numpy 2.x; the tests compare with numpy itself):

- SeedSequence (O'Neill's ``seed_seq``): every entropy integer is split into 32-bit words, lowest
  first (0 is one word); the words are hashed into a pool of 4 uint32 (``hashmix``, ``mix``), and
  ``generate_state(2, uint64)`` hashes the pool into the 128-bit Philox key;
- Philox4x64-10 (Salmon et al., SC'11): the counter starts at 0 and is incremented before each
  block of four 64-bit outputs; a 32-bit draw is the low half of the next 64-bit output, the next
  32-bit draw its high half;
- ``random_interval(max)`` (max < 2³², the only branch a permutation of P ≤ 2³² reaches): 32-bit
  draws masked by the smallest all-ones mask ≥ max, until one is ≤ max;
- ``shuffle``: Fisher–Yates from the last index down, ``j = random_interval(i)``, swap i and j.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types, uint64
from numba.extending import intrinsic, overload

from .._jit import SERIAL

_MASK32 = 0xFFFFFFFF
# SeedSequence's hash constants
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
# Philox4x64's multipliers and key increments (Weyl constants)
_M0, _M1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157
_W0, _W1 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
_ROUNDS = 10

#: the largest P whose permutation takes only 32-bit draws (random_interval's max = P − 1 < 2³²)
MAX_P = 1 << 32

#: epoch_batches(out, seed, stream, first, P, B): the argument types fastdyn.drive.optim passes (a
#: model may declare the kernel for a first run's second process, fastdyn.drive.compile_beside)
EPOCH_BATCHES_ARGS = "(int64[:, ::1], uint64, int64, int64, int64, int64)"


def _mulhilo(a, b):
    """(hi, lo) of the 128-bit product of two uint64 (in plain Python, ``NUMBA_DISABLE_JIT=1``;
    compiled: one widening multiply, :func:`_mul128`)."""
    p = int(a) * int(b)
    return uint64(p >> 64), uint64(p & 0xFFFF_FFFF_FFFF_FFFF)


@intrinsic
def _mul128(typingctx, a, b):  # noqa: ARG001 (numba passes the typing context)
    """:func:`_mulhilo` in LLVM: both operands widened to 128 bits, multiplied, split."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        wide = ir.IntType(128)
        p = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        hi = builder.trunc(builder.lshr(p, ir.Constant(wide, 64)), ir.IntType(64))
        lo = builder.trunc(p, ir.IntType(64))
        return context.make_tuple(builder, signature.return_type, (hi, lo))

    return sig, codegen


@overload(_mulhilo, inline="always")
def _mulhilo_jit(a, b):
    def impl(a, b):
        return _mul128(a, b)

    return impl


@njit(**SERIAL)
def philox_key(entropy):
    """The Philox key (k0, k1) of ``Philox(SeedSequence(list(entropy)))``; ``entropy`` a uint64
    array of the integers (each < 2⁶⁴). All arithmetic mod 2³² (held in uint64)."""
    m32 = uint64(_MASK32)
    words = np.empty(max(2 * entropy.size, 4), dtype=np.uint64)
    nw = 0
    for v in entropy:  # each integer as 32-bit words, lowest first (0 is one word)
        words[nw] = v & m32
        nw += 1
        if v >> uint64(32) != 0:
            words[nw] = v >> uint64(32)
            nw += 1
    for i in range(nw, 4):  # a short entropy is padded by hashing zeros
        words[i] = 0
    pool = np.empty(4, dtype=np.uint64)
    h = uint64(_INIT_A)
    # pool[i] = hashmix(word i); then each pool word, and each further word, hashmix'ed
    # and mixed into the other pool words: mix(x, y) = (L x − R y) xor-shifted
    for t in range(4 + 12 + 4 * max(nw - 4, 0)):
        if t < 4:
            src, dst, val = t, t, words[t]
        elif t < 16:
            src, dst = divmod(t - 4, 3)
            dst += dst >= src  # the three other pool words
            val = pool[src]
        else:
            src, dst = divmod(t - 16, 4)
            val = words[4 + src]
        val = (val ^ h) & m32  # hashmix(val)
        h = (h * uint64(_MULT_A)) & m32
        val = (val * h) & m32
        val ^= val >> uint64(16)
        if t < 4:
            pool[dst] = val
        else:
            r = (uint64(_MIX_L) * pool[dst] - uint64(_MIX_R) * val) & m32
            pool[dst] = r ^ (r >> uint64(16))
    # generate_state(2, uint64): the pool's four words hashed, read as two little-endian uint64
    h = uint64(_INIT_B)
    for i in range(4):
        d = pool[i] ^ h
        h = (h * uint64(_MULT_B)) & m32
        d = (d * h) & m32
        pool[i] = d ^ (d >> uint64(16))
    return pool[0] | (pool[1] << uint64(32)), pool[2] | (pool[3] << uint64(32))


@njit(**SERIAL)
def _philox_fill(draws, ctr, k0, k1):
    """The next ``draws.size // 8`` blocks of Philox4x64-10 under key (k0, k1) as 32-bit draws
    (each 64-bit output's low half, then its high half); ``ctr`` (4 uint64, the last block's
    counter) is incremented, with carry, before each block."""
    for b in range(draws.size // 8):
        ctr[0] += uint64(1)
        for w in range(3):  # carry
            if ctr[w] != 0:
                break
            ctr[w + 1] += uint64(1)
        c0, c1, c2, c3 = ctr[0], ctr[1], ctr[2], ctr[3]
        r0, r1 = k0, k1
        for r in range(_ROUNDS):
            if r > 0:  # the key is bumped between rounds
                r0 += uint64(_W0)
                r1 += uint64(_W1)
            hi0, lo0 = _mulhilo(uint64(_M0), c0)
            hi1, lo1 = _mulhilo(uint64(_M1), c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ r0, lo1, hi0 ^ c3 ^ r1, lo0
        for w, c in enumerate((c0, c1, c2, c3)):
            draws[8 * b + 2 * w] = c & uint64(_MASK32)
            draws[8 * b + 2 * w + 1] = c >> uint64(32)


@njit(**SERIAL)
def shuffle_down_to(data, lo, k0, k1):
    """numpy's ``Generator.shuffle(data)`` on a fresh Philox of key (k0, k1), whose Fisher–Yates
    loop stops after index ``lo`` (≥ 1): ``data[lo:]`` is then final, ``data[:lo]`` not (``lo = 1``:
    the whole shuffle). ``data.size`` ≤ :data:`MAX_P`.

    One pass over the draws without a data-dependent branch: a draw v & mask > i is rejected by
    swapping i with itself and keeping i (a branch on it mispredicts: 1.6× slower); the mask
    halves when i falls to half of it (recomputed per index, its chain of shifts bounds the loop:
    1.7× slower)."""
    draws = np.empty(512, dtype=np.uint32)
    ctr = np.zeros(4, dtype=np.uint64)
    pos = draws.size
    i = data.size - 1
    m = i  # the smallest all-ones mask >= i
    for s in (1, 2, 4, 8, 16):
        m |= m >> s
    while i >= lo:
        if pos == draws.size:
            _philox_fill(draws, ctr, k0, k1)
            pos = 0
        if i <= m >> 1:
            m >>= 1
        v = np.int64(draws[pos]) & m
        pos += 1
        ok = v <= i
        j = v if ok else i
        t = data[j]
        data[j] = data[i]
        data[i] = t
        i -= np.int64(ok)


@njit(**SERIAL)
def permutation(entropy, P):
    """``Generator(Philox(SeedSequence(list(entropy)))).permutation(P)`` (int64; P ≤
    :data:`MAX_P`)."""
    k0, k1 = philox_key(entropy)
    perm = np.arange(P)
    shuffle_down_to(perm, 1, k0, k1)
    return perm


@njit(**SERIAL)
def epoch_batches(out, seed, stream, first, P, B):
    """Fill the (n, B) int64 array ``out``: row s holds, in increasing order, the samples at
    positions [jB, (j+1)B) of ``permutation([seed, stream, e], P)``, where
    (e, j) = divmod(first + s, P // B): consecutive batches of B samples, each epoch a fresh
    permutation whose last P mod B samples are dropped. Each epoch is shuffled once, down to the
    block's first batch in it, and its batches sorted by one pass over the samples (a counting
    sort, O(P)). A caller that reuses ``out`` saves the first touch of a fresh array's pages
    (0.8 µs a step at P = 5000, B = 256, on top of the draw's 1.3 µs)."""
    n = out.shape[0]
    nb = P // B
    entropy = np.empty(3, dtype=np.uint64)
    entropy[0], entropy[1] = seed, stream
    perm = np.empty(P, dtype=np.int64)
    row = np.full(P, -1, dtype=np.int64)  # a sample's row of out (< s: an earlier epoch's)
    fill = np.empty(nb, dtype=np.int64)
    s = 0
    while s < n:
        e, j = divmod(first + s, nb)
        cnt = min(nb - j, n - s)
        entropy[2] = e
        k0, k1 = philox_key(entropy)
        for i in range(P):
            perm[i] = i
        shuffle_down_to(perm, max(j * B, 1), k0, k1)
        for r in range(cnt):
            for p in range((j + r) * B, (j + r + 1) * B):
                row[perm[p]] = s + r
        fill[:cnt] = 0
        for x in range(P):
            r = row[x] - s
            if r >= 0:
                out[s + r, fill[r]] = x
                fill[r] += 1
        s += cnt
