"""Optimisers: updates against plain numpy formulas, checkpoint/resume, minibatch draws."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.drive.optim import make_optimizer, minibatch_indices


def _quadratic_grad(theta):
    A = np.diag([1.0, 3.0, 0.5])
    return A @ (theta - np.array([1.0, -2.0, 0.5]))


def _numpy_adam(theta, steps, lr, b1, b2, eps, wd, decoupled):
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    for t in range(1, steps + 1):
        g = _quadratic_grad(theta)
        if not decoupled:
            g = g + wd * theta
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        upd = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        if decoupled:
            theta = theta - lr * wd * theta
        theta = theta - lr * upd
    return theta


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_matches_numpy(name):
    th = np.array([0.3, 0.2, -0.1])
    opt = make_optimizer(name, 3, 0.01, weight_decay=0.1)
    for _ in range(50):
        opt.step(th, _quadratic_grad(th))
    ref = _numpy_adam(np.array([0.3, 0.2, -0.1]), 50, 0.01, 0.9, 0.999, 1e-8, 0.1, name == "adamw")
    np.testing.assert_allclose(th, ref, rtol=1e-14, atol=1e-15)  # same formula, same order
    assert opt.state["step"][0] == 50


def test_gd_and_momentum():
    th = np.array([0.3, 0.2, -0.1])
    g = _quadratic_grad(th)
    make_optimizer("gd", 3, 0.1).step(th, g)
    np.testing.assert_array_equal(th, np.array([0.3, 0.2, -0.1]) - 0.1 * g)
    th = np.zeros(3)
    opt = make_optimizer("sgd", 3, 0.1, momentum=0.5)
    buf = np.zeros(3)
    ref = np.zeros(3)
    for _ in range(5):
        g = _quadratic_grad(th)
        opt.step(th, g)
        buf = 0.5 * buf + _quadratic_grad(ref)
        ref = ref - 0.1 * buf
    np.testing.assert_array_equal(th, ref)


def test_checkpoint_resume_bit_identical():
    th = np.array([0.3, 0.2, -0.1])
    opt = make_optimizer("adam", 3, 0.01)
    for _ in range(10):
        opt.step(th, _quadratic_grad(th))
    saved_th, saved = th.copy(), opt.state_dict()
    for _ in range(10):
        opt.step(th, _quadratic_grad(th))
    opt2 = make_optimizer("adam", 3, 0.01)
    opt2.load_state(saved)
    th2 = saved_th
    for _ in range(10):
        opt2.step(th2, _quadratic_grad(th2))
    np.testing.assert_array_equal(th, th2)


def test_minibatches():
    a = minibatch_indices(3, 7, 100, 30)
    np.testing.assert_array_equal(a, minibatch_indices(3, 7, 100, 30))
    assert a.size == 30 and np.all(np.diff(a) > 0)
    # the 3 batches of one epoch are disjoint
    ep = np.concatenate([minibatch_indices(3, k, 100, 30) for k in range(3, 6)])
    assert np.unique(ep).size == 90
    assert not np.array_equal(minibatch_indices(3, 0, 100, 30), minibatch_indices(3, 3, 100, 30))
    with pytest.raises(ValueError, match=r"^optim.batch_size: must lie in \[1, P = 100\], got 0$"):
        minibatch_indices(3, 0, 100, 0)


def test_minibatches_equal_the_documented_draw_in_any_call_order():
    """The per-epoch permutation is cached; every batch must still equal the definition
    (the epoch's permutation drawn afresh), whichever seeds, sizes and epochs came before."""
    from fastdyn.problems.rng import STREAM_MINIBATCH, generator

    calls = [(3, 7, 100, 30), (4, 7, 100, 30), (3, 7, 101, 30), (3, 0, 100, 30), (3, 7, 100, 30)]
    for seed, step, P, B in calls:
        e, j = divmod(step, P // B)
        perm = generator(seed, STREAM_MINIBATCH, e).permutation(P)
        want = np.sort(perm[j * B : (j + 1) * B])
        got = minibatch_indices(seed, step, P, B)
        np.testing.assert_array_equal(got, want)
        got[0] = -1  # callers may write to their batch: the cached permutation is unaffected
    np.testing.assert_array_equal(minibatch_indices(3, 7, 100, 30), want)


def test_bad_settings():
    with pytest.raises(
        ValueError, match=r"^optim.name: one of gd, sgd, adam, adamw, got 'rmsprop'$"
    ):
        make_optimizer("rmsprop", 3, 0.1)
    with pytest.raises(ValueError, match=r"^optim.lr: must be a finite number > 0, got -1"):
        make_optimizer("gd", 3, -1.0)
    with pytest.raises(ValueError, match=r"^optim.beta1: must lie in \[0, 1\), got 1.0$"):
        make_optimizer("adam", 3, 0.1, beta1=1.0)


def test_minibatch_block_beyond_the_compiled_range_is_numpys_own_draw(monkeypatch):
    """P above philox.MAX_P (2³², numpy's 64-bit draws) goes to numpy's Generator itself: the
    bound lowered to 100 here, a block of P = 300 across two epochs is numpy's, and the compiled
    draw is not called."""
    from fastdyn.drive.optim import minibatch_block
    from fastdyn.problems import philox
    from fastdyn.problems.rng import STREAM_MINIBATCH, generator

    def compiled(*args):
        raise AssertionError("the compiled draw was called")

    monkeypatch.setattr(philox, "MAX_P", 100)
    monkeypatch.setattr(philox, "epoch_batches", compiled)
    want = [
        np.sort(generator(3, STREAM_MINIBATCH, e).permutation(300)[j * 64 : (j + 1) * 64])
        for e, j in (divmod(k, 4) for k in range(2, 8))
    ]
    np.testing.assert_array_equal(minibatch_block(3, 2, 6, 300, 64), np.stack(want))


def test_minibatch_block_calls_its_kernel_with_the_declared_types():
    """The types a model declares for the draw's kernel (philox.EPOCH_BATCHES_ARGS, compiled in
    a first run's second process) are those minibatch_block passes, for any seed and any integer
    types of the other arguments (one compiled entry)."""
    from fastdyn import _precompile as pc
    from fastdyn.drive.optim import minibatch_block
    from fastdyn.problems import philox

    minibatch_block(3, 0, 2, 300, 64)
    before = set(philox.epoch_batches.overloads)
    minibatch_block(2**64 - 1, np.int32(5), np.int64(2), np.uint16(300), np.int8(64))
    assert pc.argument_types(philox.EPOCH_BATCHES_ARGS) in before
    assert set(philox.epoch_batches.overloads) == before


def test_minibatch_block_fills_a_given_array():
    """``out`` (reused by the driver block after block) is filled with the same batches and
    returned; a wrong shape, type or layout is refused."""
    from fastdyn.drive.optim import minibatch_block

    buf = np.full((12, 64), -1, dtype=np.int64)
    got = minibatch_block(3, 2, 9, 300, 64, buf[:9])
    assert np.shares_memory(got, buf)
    np.testing.assert_array_equal(buf[:9], minibatch_block(3, 2, 9, 300, 64))
    assert np.all(buf[9:] == -1)
    for bad in (np.empty((9, 32), np.int64), np.empty((9, 64), np.int32), buf[:9, :].T.copy().T):
        with pytest.raises(
            ValueError, match=r"^out: a C-contiguous int64 array of shape \(9, 64\)$"
        ):
            minibatch_block(3, 2, 9, 300, 64, bad)
