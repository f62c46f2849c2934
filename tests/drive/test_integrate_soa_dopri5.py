"""The generic per-task dopri5 of ``drive/integrate_soa`` (:func:`advance_dopri5`) against closed
forms (the logistic flow, a linear system through scipy's expm), its segment/resume and thread
bit-identity, its step budget, its stalled tasks and its adaptivity.

The logistic flow runs on the example plug-in's own three functions (``fastdyn_logistic.kernels``,
which the suite installs), so this file shares its kernel with every other logistic dopri5 run of
the suite (memoised per process and function objects; compiled once, ≈ 3 s, then loaded from
numba's cache, drive/_kernel_cache.py); the linear system brings its own. Every run after that is
well under a second.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from fastdyn_logistic import kernels as logistic
from numba import njit

from fastdyn.core import stop_flag
from fastdyn.drive import integrate_soa as soa
from fastdyn.reduce import BLOCK, accumulate_blocks, block_partials
from tests._threads import assert_bit_identical, outputs_per_thread_count

# ---- the logistic flow df/dt = r f (K − f): p = (r, K, w), y = (f,) -----------------------------
# the plug-in's functions: rhs, observe (f = y[0]) and loss = (w (f − K)²/2, r (f − K)²/2); the
# tables below set w = 1

logistic_rhs, first_component, logistic_loss = logistic.rhs, logistic.observe, logistic.loss


def logistic_exact(r, k, f0, t):
    """f(t) = K f0 / (f0 + (K − f0) e^{−rKt}), tasks × times."""
    e = np.exp(-(r * k)[:, None] * t[None, :])
    return k[:, None] * f0 / (f0 + (k[:, None] - f0) * e)


# ---- a linear system y' = c A y: p = (c, A row-major), y ∈ R³ -------------------------------------

A0 = np.array([[-0.2, 2.0, 0.0], [-2.0, -0.2, 0.5], [0.0, 0.0, -0.5]])


@njit
def linear_rhs(p, y, dy):
    for a in range(3):
        s = 0.0
        for b in range(3):
            s += p[1 + 3 * a + b] * y[b]
        dy[a] = p[0] * s


@njit
def linear_loss(p, y):
    s = y[0] * y[0] + y[1] * y[1] + y[2] * y[2]
    return 0.5 * s, p[0] * 0.5 * s


def _run(rhs, obs, loss, params, y0, times, rtol, *, t0=0.0, h=None, counts=None, atol=1e-14,
         max_steps=10**7):  # fmt: skip
    """One call of advance_dopri5 on every task (all tracked); (y, h, counts, f, test, train)."""
    n = y0.shape[1]
    y = np.array(y0)
    h = np.zeros(n) if h is None else h
    counts = np.zeros((3, n), np.int64) if counts is None else counts
    nt = len(times)
    pt, pr, f = block_partials(n, nt), block_partials(n, nt), np.zeros((n, nt))
    soa.advance_dopri5(
        rhs, obs, loss, params, y, h, counts, t0, np.asarray(times, float), rtol, atol,
        max_steps, np.arange(n), pt, pr, f,
    )  # fmt: skip
    test, train = np.zeros(nt), np.zeros(nt)
    accumulate_blocks(test, pt)
    accumulate_blocks(train, pr)
    return y, h, counts, f, test, train


def _logistic_table(n, rmin=1e-2, rmax=1e2):
    """p = (r, K = 1, w = 1) for n rates r = rmin … rmax (log-spaced), f0 = 1e-3."""
    r = np.geomspace(rmin, rmax, n)
    return np.ascontiguousarray(np.stack([r, np.ones(n), np.ones(n)])), np.full((1, n), 1e-3)


@pytest.fixture(autouse=True)
def _clear_stop_flag():
    stop_flag.clear()
    yield
    stop_flag.clear()


@pytest.mark.parametrize("rtol", [1e-6, 1e-10])
def test_logistic_matches_its_closed_form(rtol):
    """300 tasks, rates r = 1e-2 … 1e2 (K = 1, f0 = 1e-3), 40 log-spaced outputs to t = 1e3: max
    |f − exact|/exact ≤ 5·rtol. Measured 1.18e-6 (rtol 1e-6), 1.09e-10 (rtol 1e-10): ≈ 1.1 rtol,
    the global error of the norm-wise local control. The summed losses: with |Δf_s| ≤ 5 rtol f_s,
    |ΔL| ≤ Σ_s w_s |f_s − K| · 5 rtol f_s (+ O(rtol²)), w_s = 1 (test) or r_s (train)."""
    params, y0 = _logistic_table(300)
    times = np.geomspace(1e-2, 1e3, 40)
    y, _h, counts, f, test, train = _run(
        logistic_rhs, first_component, logistic_loss, params, y0, times, rtol
    )
    ex = logistic_exact(params[0], params[1], 1e-3, times)
    rel = np.max(np.abs(f - ex) / ex)
    assert rel <= 5 * rtol, rel
    assert np.array_equal(y[0], f[:, -1])
    assert np.all(counts[2] == 0) and np.all(counts[0] > 0)
    for got, w in ((test, np.ones(300)), (train, params[0])):
        want = np.sum(w[:, None] * 0.5 * (ex - 1.0) ** 2, axis=0)
        bound = 5 * rtol * np.sum(w[:, None] * np.abs(ex - 1.0) * ex, axis=0)
        assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)


@pytest.mark.parametrize("rtol", [1e-7, 1e-11])
def test_linear_system_matches_expm(rtol):
    """y' = c A y (a damped rotation coupled to a decaying mode), c = 0.1 … 10 over 64 tasks, y0
    random: y(t) = expm(c A t) y0 (scipy) at 20 outputs to t = 20, error relative to max |y0|:
    ≤ 5·rtol. Measured 9.7e-8 (rtol 1e-7) and 9.8e-12 (1e-11): ≈ rtol."""
    n = 64
    c = np.geomspace(0.1, 10.0, n)
    params = np.ascontiguousarray(np.vstack([c, np.repeat(A0.reshape(9, 1), n, axis=1)]))
    y0 = np.random.default_rng(3).standard_normal((3, n))
    times = np.linspace(1.0, 20.0, 20)
    y, _h, counts, f, *_ = _run(linear_rhs, first_component, linear_loss, params, y0, times, rtol)
    worst = 0.0
    for i in range(n):
        want = np.stack([scipy.linalg.expm(c[i] * A0 * t) @ y0[:, i] for t in times], axis=1)
        scale = np.max(np.abs(y0[:, i]))
        worst = max(worst, np.max(np.abs(f[i] - want[0])) / scale)
        worst = max(worst, np.max(np.abs(y[:, i] - want[:, -1])) / scale)
    assert worst <= 5 * rtol, worst
    assert np.all(counts[2] == 0) and counts[0, 0] < counts[0, -1]


def test_two_segments_are_bit_identical_to_one_call():
    """The output times cut into two calls (h and counts carried over, the second call from the
    first's last time, the state copied as a checkpoint would be): y, h, counts, f and the loss
    partials bit-identical to one call; also when the first call chooses the initial step."""
    params, y0 = _logistic_table(2 * BLOCK + 37, 1e-2, 1e1)
    times = np.geomspace(1e-2, 3e2, 30)
    whole = _run(logistic_rhs, first_component, logistic_loss, params, y0, times, 1e-8)
    k = 13
    a = _run(logistic_rhs, first_component, logistic_loss, params, y0, times[:k], 1e-8)
    y_ck, h_ck, c_ck = a[0].copy(), a[1].copy(), a[2].copy()  # a checkpoint
    b = _run(
        logistic_rhs, first_component, logistic_loss, params, y_ck, times[k:], 1e-8,
        t0=times[k - 1], h=h_ck, counts=c_ck,
    )  # fmt: skip
    for name, w, got in (
        ("y", whole[0], b[0]),
        ("h", whole[1], b[1]),
        ("counts", whole[2], b[2]),
        ("f", whole[3], np.hstack([a[3], b[3]])),
        ("test", whole[4], np.concatenate([a[4], b[4]])),
        ("train", whole[5], np.concatenate([a[5], b[5]])),
    ):
        assert w.tobytes() == got.tobytes(), name
    assert np.sum(whole[2][1] > 0) > 1000  # rejections too: the carried controller state counts
    # the carried h matters: restarting the second call with a fresh h changes the bits
    c = _run(
        logistic_rhs, first_component, logistic_loss, params, a[0].copy(), times[k:], 1e-8,
        t0=times[k - 1], h=np.zeros(params.shape[1]), counts=a[2].copy(),
    )  # fmt: skip
    assert c[3].tobytes() != b[3].tobytes()


_THREADS = """
from tests.drive.test_integrate_soa_dopri5 import (
    _logistic_table, _run, first_component, logistic_loss, logistic_rhs,
)
params, y0 = _logistic_table(3 * 1024 + 100)
times = np.geomspace(1e-2, 1e3, 25)
y, h, counts, f, test, train = _run(
    logistic_rhs, first_component, logistic_loss, params, y0, times, 1e-8
)
OUT.update(y=y, h=h, counts=counts, f=f, test=test, train=train)
"""


def test_bit_identical_for_one_and_two_threads(tmp_path):
    """4 blocks of tasks (rates 1e-2 … 1e2: uneven work per block), 1 vs 2 numba threads in fresh
    interpreters: y, h, counts, tracked f and the summed losses bit-identical."""
    assert_bit_identical(outputs_per_thread_count(_THREADS, tmp_path))


def test_step_budget_fails_the_call():
    """max_steps = 200 accepted steps: the fast tasks (r up to 1e2 need ~3e4 steps to t = 1e3)
    use it up: the first to do so is counted failed with exactly 200 steps, the halt
    flag is set (every block gives up; the ODE driver reports the failure), and a call that
    needs fewer steps clears it."""
    params, y0 = _logistic_table(200)
    times = np.geomspace(1e-2, 1e3, 10)
    _y, _h, counts, *_ = _run(
        logistic_rhs, first_component, logistic_loss, params, y0, times, 1e-8, max_steps=200
    )
    assert stop_flag.halted()
    failed = np.nonzero(counts[2])[0]
    assert len(failed) >= 1 and np.all(counts[2, failed] == 1)
    assert np.all(counts[0, failed] == 200)
    assert np.all(counts[0] <= 200)
    slow = params[:, :1], y0[:, :1]  # r = 1e-2: ~100 steps
    _y, _h, c1, *_ = _run(logistic_rhs, first_component, logistic_loss, *slow, times, 1e-8,
                          max_steps=200)  # fmt: skip
    assert not stop_flag.halted() and c1[2, 0] == 0 and 0 < c1[0, 0] < 200


def test_finite_time_blowup_stalls_and_freezes():
    """y' = y², y(0) = 1 (the logistic flow at r = −1, K = 0: −y·(0 − y) is y·y to the bit) blows
    up at t = 1: the step shrinks until t + h == t, the task is failed (counts[2] = 1, no halt)
    and its outputs after t = 1 stay at its last state (finite, ≥ 1e12,
    as y = 1/(1 − t) near the pole; measured 7e14 after 900 steps); the outputs before t = 1
    match 1/(1 − t) to ≤ 5·rtol (measured 6.7e-11, 6.1e-10 at rtol 1e-9). A later call leaves
    the stalled task as it is."""
    params, y0 = np.array([[-1.0], [0.0], [1.0]]), np.ones((1, 1))
    times = np.array([0.5, 0.9, 1.5, 2.0])
    y, h, counts, f, *_ = _run(
        logistic_rhs, first_component, logistic_loss, params, y0, times, 1e-9
    )
    assert counts[2, 0] == 1 and not stop_flag.halted()
    assert np.max(np.abs(f[0, :2] * (1 - times[:2]) - 1)) <= 5e-9
    assert np.isfinite(f[0, 2]) and f[0, 2] >= 1e12 and f[0, 3] == f[0, 2] == y[0, 0]
    y2, _h2, c2, f2, *_ = _run(logistic_rhs, first_component, logistic_loss, params, y.copy(),
                               [3.0], 1e-9, t0=2.0, h=h.copy(), counts=counts.copy())  # fmt: skip
    assert f2[0, 0] == y[0, 0] and np.array_equal(c2, counts)


def test_slow_tasks_take_fewer_steps():
    """Adaptivity: logistic tasks with rates 1e-3 … 1e1 to t = 100 (every task sees the same 20
    output times): the accepted steps grow with the rate, measured 20 (r = 1e-3, which barely
    moves), 27, 93, 146 and 411 (r = 10, stability-bound on its converged tail) at the start of
    each decade and its end; a fixed-step method at the fastest task's step takes 411 for all."""
    params, y0 = _logistic_table(100, 1e-3, 1e1)
    times = np.geomspace(1e-2, 1e2, 20)
    _y, _h, counts, *_ = _run(logistic_rhs, first_component, logistic_loss, params, y0, times, 1e-8)
    steps = counts[0]
    assert steps[0] * 10 < steps[-1], (steps[0], steps[-1])
    dec = [steps[i : i + 25].mean() for i in range(0, 100, 25)]  # per decade of the rate
    assert all(a < b for a, b in zip(dec, dec[1:], strict=False)), dec


def test_signal_stops_before_any_step():
    """A stop request (FLAG[0]) set before the call: the kernel returns at once, the state and
    counters untouched."""
    params, y0 = _logistic_table(10)
    stop_flag.request(15)
    y, h, counts, *_ = _run(
        logistic_rhs, first_component, logistic_loss, params, y0, [1.0, 2.0], 1e-8
    )
    assert np.array_equal(y, y0) and np.all(counts == 0)


def test_bad_arguments_are_refused():
    params, y0 = _logistic_table(4)
    with pytest.raises(ValueError, match="counts"):
        _run(logistic_rhs, first_component, logistic_loss, params, y0, [1.0], 1e-8,
             counts=np.zeros((2, 4), np.int64))  # fmt: skip
    with pytest.raises(ValueError, match="rtol"):
        _run(logistic_rhs, first_component, logistic_loss, params, y0, [1.0], 0.0)
