"""The one place that holds numba's compilation flags.

Every kernel in fastdyn is compiled with ``@njit(**SERIAL)`` (per-block, per-task kernels) or
``@njit(**PARALLEL)`` (the outer ``prange`` over fixed-size blocks). ``fastmath`` stays off so that
results are reproducible across machines and thread counts, except FMA contraction
(``fastmath={"contract"}``) in the lane kernels that ask for it (the integrators' lanes, the closed
form's series lanes): their bits then depend on whether the host has FMA, never on the thread count.

:func:`prefer_wide_vectors` lets one kernel use 512-bit vectors where the host has them.
"""

from __future__ import annotations

from numba.core import types
from numba.extending import intrinsic, overload

SERIAL: dict = {"cache": True, "nogil": True, "error_model": "numpy"}
PARALLEL: dict = {"cache": True, "nogil": True, "parallel": True, "error_model": "numpy"}

#: the LLVM function attribute that :func:`prefer_wide_vectors` sets
WIDE_VECTORS_ATTRIBUTE: str = '"prefer-vector-width"="512"'


def prefer_wide_vectors() -> None:
    """Called first thing in a jitted function: LLVM may vectorise that function with 512-bit
    registers where the host has AVX-512 (``prefer-vector-width=512``; elsewhere nothing changes).
    In plain Python (``NUMBA_DISABLE_JIT=1``) it does nothing.

    On AVX-512 hosts LLVM prefers 256-bit vectors for every function (the 512-bit units lower the
    clock on some Intel parts). That suits most of the closed form (22 % slower with 512 bits
    everywhere), but the lock-step lane loops of the integrators are FMA-bound and gain 30 % (RK4)
    and 18 % (dopri5), and the closed form's exp loop (``_exp_terms``) 3–9 %: numbers in
    ``bench/RESULTS.md``. Results are unchanged bit for bit: without reassociation
    (fastdyn never enables it) the width of a vector does not change any lane's arithmetic.

    The attribute goes on the LLVM function of the jitted function that calls this (the overload
    below is inlined into it at the numba IR level). That function is optimised, and its loops
    vectorised, on its own before LLVM links it into its callers, so its 512-bit code survives
    being inlined into an untagged caller.
    """


@intrinsic
def _tag_wide_vectors(typingctx):  # noqa: ARG001 (numba passes the typing context)
    """The LLVM attribute of :func:`prefer_wide_vectors` on the function being lowered."""

    def codegen(context, builder, signature, args):
        # llvmlite's attribute set accepts only keyword attributes; a string attribute written
        # into it verbatim is printed as is in the function definition. Should a later llvmlite
        # store attributes differently, the function keeps LLVM's default width (slower only).
        attributes = builder.function.attributes
        if isinstance(attributes, set):
            set.add(attributes, WIDE_VECTORS_ATTRIBUTE)
        return context.get_dummy_value()

    return types.none(), codegen


@overload(prefer_wide_vectors, inline="always")
def _prefer_wide_vectors_jit():
    def impl():
        _tag_wide_vectors()

    return impl
