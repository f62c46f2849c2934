"""A branch-free, vectorisable e^x on (−∞, 0], shared by the models' kernels (the MSFR closed
form's logistic fast path, the softmax attention weights)."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .._jit import SERIAL


@intrinsic
def _int64_bits_as_float64(typingctx, bits):
    """Reinterpret the bits of an int64 as a float64 (an LLVM bitcast, free and vectorisable)."""
    if not isinstance(bits, types.Integer):
        return None
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm: low 21 bits zero, so k·_LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_EXP_FLOOR = -708.0  # e^-708 ≈ 3.3e-308 is still a normal double


@njit(**SERIAL)
def exp_nonpos(x):
    """e^x for x ≤ 0, branch free so that loops calling it vectorise (|rel. error| ≲ 2 ulp).

    Cody–Waite reduction x = k ln2 + r, |r| ≤ ln2/2, a degree-13 Taylor polynomial for e^r
    (truncation r¹⁴/14! ≤ 5e-18) and 2^k assembled from its exponent bits. Arguments below −708
    (including −inf) return e^−708 ≈ 3e-308 instead of a smaller number: callers use it only
    where such a value is negligible. Arguments > 0 are not allowed (2^k would overflow).
    """
    x = max(x, _EXP_FLOOR)
    kf = math.floor(x * _LOG2E + 0.5)
    r = (x - kf * _LN2_HI) - kf * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    k = np.int64(kf)
    return p * _int64_bits_as_float64((k + np.int64(1023)) << np.int64(52))
