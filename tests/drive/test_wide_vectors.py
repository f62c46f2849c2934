"""``prefer_wide_vectors``: the integrators' lane loops may use 512-bit registers.

The attribute is checked in the LLVM IR of a small function compiled here (on the tagged function
only), and its effect in that function's machine code on an AVX-512 host (512-bit registers). The
integrators' results with it are checked bit for bit by the golden runs (``tests/golden``: their hashes were recorded with 256-bit vectors).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from llvmlite import binding as llvm
from numba import njit

from fastdyn._jit import SERIAL, WIDE_VECTORS_ATTRIBUTE, prefer_wide_vectors
from fastdyn.models.msfr import lanes, lanes_dopri5, theory


def _axpy_wide(a, b, c):
    prefer_wide_vectors()
    for i in range(a.shape[0]):
        a[i] = b[i] * c[i] + a[i]


def _axpy_plain(a, b, c):
    for i in range(a.shape[0]):
        a[i] = b[i] * c[i] + a[i]


def _compiled(py_func):
    f = njit(py_func)  # not cached: the IR and assembly are inspected
    x = np.ones(64)
    f(x, x.copy(), x.copy())
    assert x[0] == 2.0
    (sig,) = f.signatures
    return f.inspect_llvm(sig), f.inspect_asm(sig)


def test_the_attribute_is_on_the_calling_function_only():
    ir_wide, _ = _compiled(_axpy_wide)
    ir_plain, _ = _compiled(_axpy_plain)
    assert WIDE_VECTORS_ATTRIBUTE in ir_wide
    assert WIDE_VECTORS_ATTRIBUTE not in ir_plain


def _compiles_for_this_avx512_host() -> bool:
    """numba targets the host (no NUMBA_CPU_NAME / NUMBA_CPU_FEATURES override), which has
    AVX-512: only there can the attribute's effect show in the machine code."""
    if numba.config.CPU_NAME or numba.config.CPU_FEATURES:
        return False
    return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(
    not _compiles_for_this_avx512_host(),
    reason="numba does not compile for this host's AVX-512 (no AVX-512, or a CPU override)",
)
def test_on_an_avx512_host_the_tagged_loop_uses_512_bit_registers():
    """What fastdyn controls: the tagged loop gets 512-bit registers. Whether LLVM also picks
    them for an untagged loop is its own heuristic (it differs between AVX-512 hosts), so the
    untagged loop is not asserted on; the IR test above shows the attribute is the tagged
    function's only."""
    _, asm_wide = _compiled(_axpy_wide)
    assert "zmm" in asm_wide


@pytest.mark.parametrize(
    "kernel",
    [
        lanes._lanes_rk4,
        lanes._lanes_rhs_rk4,
        lanes._lanes_gd,
        lanes._lanes_rhs,
        lanes_dopri5._dp_rhs_lanes,
        lanes_dopri5._dp_step_lanes,
        lanes_dopri5._dp_pow_lanes,
        lanes_dopri5._dp_control_lanes,
        theory._exp_terms,
        theory._lanes_0_5,
        theory._lanes_6_11,
        theory._lanes_12_18,
    ],
    ids=lambda k: k.__name__,
)
def test_the_lane_loops_ask_for_wide_vectors(kernel):
    assert "prefer_wide_vectors" in kernel.py_func.__code__.co_names


def test_without_the_jit_it_is_a_no_op():
    assert prefer_wide_vectors() is None  # NUMBA_DISABLE_JIT runs the kernels as Python


def _has_gathers() -> bool:
    """numba compiles for this host, which has AVX2 gathers (AVX-512 ones included)."""
    if numba.config.CPU_NAME or numba.config.CPU_FEATURES:
        return False
    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(not _has_gathers(), reason="no AVX2 gathers on this host (or a CPU override)")
def test_block_loops_load_contiguously():
    """The closed form's per-block loops index slices from 0, not ``x[lo + j]``: numba wraps
    negative indices, LLVM cannot prove lo + j ≥ 0, and the contiguous loads became gathers
    (vgatherqpd; `_fast_setup` took 9.1 instead of 7.3 ns per task)."""
    from fastdyn.models.msfr import _args
    from fastdyn.reduce import BLOCK

    n = 3 * BLOCK
    x = np.linspace(0.1, 1.0, n)
    flags = {**SERIAL, "cache": False}  # not cached: the assembly is inspected
    count_bad = njit(**flags)(_args._count_bad.py_func)
    out = np.zeros(3, dtype=np.int64)
    count_bad(x, BLOCK, 2 * BLOCK, out)
    assert out.tolist() == [0, 0, 0]
    fast_setup = njit(**flags)(theory._fast_setup.py_func)
    tb = np.empty(theory._NROW * BLOCK)
    v = 1e-3 * x
    assert fast_setup(0, x, x * 100, x, x, v, v, v, v, BLOCK, 2 * BLOCK, tb) == BLOCK
    lanes_in = njit(**flags)(theory._series_lanes.py_func)
    sv = np.zeros(theory._S_SIZE)
    lanes_in(sv, 64, 6, x[:64], x[:64], x[:64], x[:64], x[:64])
    for f in (count_bad, fast_setup, lanes_in):
        (sig,) = f.signatures
        assert "vgather" not in f.inspect_asm(sig), f.__name__
