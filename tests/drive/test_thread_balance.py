"""The rk4 / gd / dopri5 kernels on an uneven (power-law) task table: work dealt cyclically to one
bin per thread, losses reduced per block from the per-task f buffer (issue 20).

Bit-identical outputs for 1 and 2 numba threads, and block partials equal to the per-task loss
terms added in task order inside each block (an independent numpy reference), also when the kernel
works through the chunk in several slices (many output times)."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.models.msfr import integrate as I
from fastdyn.models.msfr import integrate_kernels as K
from fastdyn.reduce import BLOCK
from tests._threads import assert_bit_identical, outputs_per_thread_count

_TABLE = """
def power_table(n):
    # P(s) ∝ s^-2, Λ = 1, ψ = 100, balanced init 1e-3: the work falls like s^-2 with the index
    s = np.arange(1, n + 1, dtype=float)
    rate = s**-2 / np.sum(s**-2)
    lam, psi = np.ones(n), np.full(n, 100.0)
    u = np.array([1.0, 1.0]) / np.sqrt(2.0)
    v = np.outer(u, np.full(n, 1e-3))
    return lam, psi, rate, v
"""

_KW = {"rk4": {"steps_per_timescale": 10.0}, "dopri5": {"rtol": 1e-6}, "gd": {"eta": 0.002}}


def _ns():
    ns = {"np": np}
    exec(_TABLE, ns)  # noqa: S102  (the same table in-process and in the thread-count scripts)
    return ns


def test_power_law_table_is_uneven():
    """The table of these tests puts most of the rk4 steps into the first block, so a prange over
    blocks would leave one thread with most of the work."""
    lam, psi, rate, v = _ns()["power_table"](3 * BLOCK + 100)
    r = I.integrate_rk4(lam, psi, rate, rate, v[0], v[1], v[0], v[1], [0.0, 3e3], **_KW["rk4"])
    steps = r.state.steps.astype(float)
    assert steps[:BLOCK].sum() > 0.6 * steps.sum()


def test_bit_identical_threads_power_law(tmp_path):
    """rk4, gd and dopri5 on the power-law table: partials, tracked f and the whole final state
    bit-identical with 1 and 2 threads."""
    script = (
        _TABLE
        + """
from fastdyn.models.msfr import integrate as I
n = 3 * 1024 + 100
lam, psi, rate, v = power_table(n)
times = np.geomspace(1.0, 3e3, 300)  # block 0 split into work items, blocks 1-3 whole
fns = {"rk4": I.integrate_rk4, "dopri5": I.integrate_dopri5, "gd": I.integrate_gd}
kws = {"rk4": {"steps_per_timescale": 10.0}, "dopri5": {"rtol": 1e-6}, "gd": {"eta": 0.002}}
for m, fn in fns.items():
    tt = times / 300.0 if m == "gd" else times  # gd: η below 2/(rate·κ) of the fastest task
    r = fn(lam, psi, rate, rate, v[0], v[1], v[0], v[1], tt, track=[0, 1, 40, n - 1], **kws[m])
    OUT[m + "_pt"], OUT[m + "_pr"], OUT[m + "_f"] = r.test_partials, r.train_partials, r.f_track
    OUT[m + "_y"], OUT[m + "_h"] = r.state.y, r.state.h
    OUT[m + "_steps"], OUT[m + "_status"] = r.state.steps, r.state.status
"""
    )
    assert_bit_identical(outputs_per_thread_count(script, tmp_path))


@pytest.mark.parametrize("method", ["rk4", "dopri5", "gd"])
def test_partials_are_task_order_sums(method):
    """With 600 output times the kernels split the first block into work items (f buffered, the
    block reduced by whoever finishes it) and run the others whole; every block partial is the
    sequential task-order sum of its tasks' loss terms computed here from the tracked f of every
    task."""
    n = 2 * BLOCK + 300
    nt = 600
    assert K.head_blocks(n, nt) == 1
    lam, psi, rate, v = _ns()["power_table"](n)
    wt = rate[::-1].copy()  # test weights ≠ rates: both partials are checked
    fn = {"rk4": I.integrate_rk4, "dopri5": I.integrate_dopri5, "gd": I.integrate_gd}[method]
    times = 0.002 * np.arange(1, nt + 1) if method == "gd" else np.geomspace(1e-2, 3e3, nt)
    r = fn(lam, psi, rate, wt, v[0], v[1], v[0], v[1], times, track=np.arange(n), **_KW[method])
    assert np.all(r.state.steps > 0)
    rr = 0.5 * (r.f_track - lam[:, None]) ** 2
    for w, part in ((wt, r.test_partials), (rate, r.train_partials)):
        terms = w[:, None] * rr
        for b in range(part.shape[0]):
            seq = np.cumsum(terms[b * BLOCK : (b + 1) * BLOCK], axis=0)[-1]  # in task order
            assert part[b].tobytes() == seq.tobytes(), (method, b)
