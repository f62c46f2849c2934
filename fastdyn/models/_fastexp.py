"""Branch-free, vectorisable e^x on (−∞, 0] and ln x on positive normal numbers, shared by the
kernels (the MSFR closed form's logistic fast path, the softmax attention weights, the dopri5
lanes' step-size control)."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .._jit import SERIAL


def _bitcast(name: str, source: type, sig: types.Signature, target: ir.Type) -> object:
    """The intrinsic ``name`` that reinterprets the bits of its argument (of numba type class
    ``source``) as LLVM type ``target``, typed ``sig``: an LLVM bitcast, free and vectorisable."""

    def bits_as(typingctx, x):  # noqa: ARG001 (numba passes the typing context)
        if not isinstance(x, source):
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], target)

        return sig, codegen

    bits_as.__name__ = bits_as.__qualname__ = name
    return intrinsic(bits_as)


_int64_bits_as_float64 = _bitcast(
    "_int64_bits_as_float64", types.Integer, types.float64(types.int64), ir.DoubleType()
)
_float64_bits_as_int64 = _bitcast(
    "_float64_bits_as_int64", types.Float, types.int64(types.float64), ir.IntType(64)
)


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


# ---------------------------------------------------------------------------------------------
# branch-free, vectorisable log on positive normal numbers
# ---------------------------------------------------------------------------------------------


_LN2 = 0.6931471805599453


@njit(**SERIAL)
def log_upper(x):
    """(e + 1)·ln 2 for positive, finite, normal x = m·2^e, m ∈ [1, 2): an upper bound of ln x
    within ln 2 (ln x ≤ it ≤ ln x + ln 2, up to the rounding of (e + 1)·ln 2), from the exponent
    bits alone: no arithmetic on the mantissa, so it costs a shift and a multiply."""
    e1 = (_float64_bits_as_int64(x) >> np.int64(52)) - np.int64(1022)
    return float(e1) * _LN2


_LG1 = 6.666666666666735130e-01
_LG2 = 3.999999999940941908e-01
_LG3 = 2.857142874366239149e-01
_LG4 = 2.222219843214978396e-01
_LG5 = 1.818357216161805012e-01
_LG6 = 1.531383769920937332e-01
_LG7 = 1.479819860511658591e-01


@njit(**SERIAL)
def log_pos(x):
    """ln x for positive, finite, normal x, branch free so that loops calling it vectorise.

    fdlibm's e_log.c without its branches: x = 2^k (1 + f), 1 + f ∈ [√2/2, √2), s = f/(2 + f),
    log(1 + f) = f − (hfsq − s(hfsq + R(s²))), hfsq = f²/2, R its minimax polynomial (error
    < 1 ulp in fdlibm; measured ≤ 1 ulp here). Zero, subnormal, negative, inf and NaN
    arguments give garbage: callers must exclude them.
    """
    bits = _float64_bits_as_int64(x)
    hx = bits >> np.int64(32)
    k = (hx >> np.int64(20)) - np.int64(1023)
    hm = hx & np.int64(0x000FFFFF)
    i = (hm + np.int64(0x95F64)) & np.int64(0x100000)
    hi = hm | (i ^ np.int64(0x3FF00000))
    xm = _int64_bits_as_float64((hi << np.int64(32)) | (bits & np.int64(0xFFFFFFFF)))
    k = k + (i >> np.int64(20))
    f = xm - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
    t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
    r = t2 + t1
    hfsq = 0.5 * f * f
    dk = float(k)
    return dk * _LN2_HI - ((hfsq - (s * (hfsq + r) + dk * _LN2_LO)) - f)


#: numba-IR-inlined copies of :func:`exp_nonpos` and :func:`log_pos`: compiled as part of the
#: caller, with its flags (a caller with FMA contraction gets a contracted copy), while the shared
#: compiled functions keep theirs. A callee compiled from a caller with fastmath flags would
#: inherit them, and every later caller in the process (or loading it from the cache) would get
#: that version: its results would depend on which kernel was compiled first.
exp_nonpos_inline = njit(**dict(SERIAL, inline="always", cache=False))(exp_nonpos.py_func)
log_pos_inline = njit(**dict(SERIAL, inline="always", cache=False))(log_pos.py_func)
