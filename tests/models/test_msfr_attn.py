"""msfr-attn kernels: finite differences, the dense reference, parameter counts, closed forms."""

import itertools

import numpy as np
import pytest

from fastdyn.models.msfr_attn import kernels as K
from fastdyn.problems import msfr_seq
from tests.reference import msfr_attn_reference as R

VARIANTS = list(itertools.product(("block", "shared"), ("merged", "separate"), (False, True)))


def _data(dense, x_dist, seed=1):
    rng = np.random.default_rng(seed)
    lam = 0.5 + rng.random(6)
    return msfr_seq.from_counts(
        np.array([3, 2, 2, 1, 2, 1]),
        lam,
        np.array([3, 4, 2, 5, 3, 2]),
        seed,
        x_dist=x_dist,
        feature_noise=0.3 if dense else 0.0,
    )


@pytest.mark.parametrize(
    "dense,x_dist", [(False, "rademacher"), (False, "gaussian"), (True, "gaussian")]
)
@pytest.mark.parametrize("emb,kq,softmax", VARIANTS)
def test_gradient_fd_and_reference(dense, x_dist, emb, kq, softmax):
    data = _data(dense, x_dist)
    d = 6 if dense else 4  # sparse: tasks 5, 6 lie beyond the model size
    lay = K.Layout(d, emb, kq, 2, softmax, dense)
    th = np.random.default_rng(7).normal(0, 0.5, lay.n_params)
    g = np.zeros_like(th)
    loss = K.loss_and_grad(th, lay, data, g)
    ref = R.loss(data, K.dense_weights(th, lay), d, emb == "shared", softmax)
    assert abs(loss - ref) <= 1e-13 * abs(ref)  # same sums, different order: rounding only
    h = 1e-5  # central differences: truncation ~h²·|∂³L| ≈ 1e-10, rounding ~1e-16/h ≈ 1e-11
    fd = np.empty_like(th)
    z = np.zeros_like(th)
    for i in range(th.size):
        e = np.zeros_like(th)
        e[i] = h
        fd[i] = (K.loss_and_grad(th + e, lay, data, z) - K.loss_and_grad(th - e, lay, data, z)) / (
            2 * h
        )
    assert np.max(np.abs(fd - g)) <= 1e-7 * np.max(np.abs(g))


@pytest.mark.parametrize("emb,kq", [("block", "merged"), ("shared", "separate")])
def test_unstored_entries_get_no_gradient(emb, kq):
    """FD of the dense reference on entries the layout does not store is exactly zero."""
    data = _data(False, "gaussian")
    lay = K.Layout(4, emb, kq, 2, False, False)
    th = np.random.default_rng(3).normal(0, 0.5, lay.n_params)
    w = K.dense_weights(th, lay)
    name = "W" if kq == "merged" else "WQ"
    lab = 4 if emb == "shared" else 1  # a label column (the query's label is 0)
    for i, j in [(0, lab), (w[name].shape[0] - 1, lab)] + ([(3, 0)] if kq == "merged" else []):
        wp = {k: v.copy() for k, v in w.items()}
        wp[name][i, j] += 0.1
        assert R.loss(data, wp, 4, emb == "shared", False) == R.loss(
            data, w, 4, emb == "shared", False
        )


def test_parameter_counts():
    d, r = 10, 3
    assert K.Layout(d).n_params == 4 * d
    assert K.Layout(d, "shared").n_params == 3 * d + 1
    assert K.Layout(d, "block", "separate", r).n_params == d * (2 + 3 * r)
    assert K.Layout(d, "shared", "separate", r).n_params == d * (1 + 2 * r) + 1 + r
    assert K.Layout(d, "block", "merged", dense=True).n_params == 2 * d * (d + 1)


def test_thread_and_batch_independence():
    """Per-sample kernel summed per task: gradient of a batch = weighted sum of its task parts."""
    data = msfr_seq.from_counts(
        np.full(3, 1500), np.array([1.0, 0.7, 0.4]), np.array([5, 5, 5]), 2, x_dist="gaussian"
    )
    lay = K.Layout(3)
    th = np.random.default_rng(0).normal(0, 0.3, lay.n_params)
    g_all = np.zeros_like(th)
    K.loss_and_grad(th, lay, data, g_all)
    parts = np.zeros_like(th)
    for s in range(3):
        idx = np.arange(data.task_start[s], data.task_start[s + 1])
        g = np.zeros_like(th)
        K.loss_and_grad(th, lay, data, g, K.Workspace(lay, data, idx))
        parts += g * idx.size / data.n
    assert np.max(np.abs(parts - g_all)) <= 1e-14 * np.max(np.abs(g_all))


@pytest.mark.parametrize("x_dist,softmax", [("gaussian", False), ("rademacher", True)])
def test_population_loss_matches_monte_carlo(x_dist, softmax):
    lam = np.array([0.9, 0.6])
    psi = np.array([6, 3])
    data = msfr_seq.from_counts(np.array([40000, 40000]), lam, psi, 5, x_dist=x_dist)
    lay = K.Layout(2, softmax=softmax)
    th = np.array([0.3, 0.2, 0.25, -0.1, 0.2, 0.35, 0.15, 0.3])
    f, lo = K.population(th, lay, lam, psi, x_dist)
    per = []
    for s in range(2):
        idx = np.arange(data.task_start[s], data.task_start[s + 1])
        per.append(K.loss_and_grad(th, lay, data, np.zeros(8), K.Workspace(lay, data, idx)))
    # Monte Carlo over 4e4 sequences per task: relative standard error ≲ 1.5e-2 for these weights
    assert np.allclose(per, lo, rtol=0.05)


def test_paper_in_context_adaptation():
    """Converged block/merged weights from small balanced init on a new strength Λ̃ give
    f̃ = Λ(1 + Λ̃Λ)²/(1 + Λ²)² as ψ → ∞ (author responses); checked at ψ = 1e6, tolerance O(1/ψ)."""
    lam, psi = 0.7, 10**6
    # ε = 0 gradient flow keeps v = w ∥ û: converged at f = ψ|u|²g² = Λ
    g = np.sqrt(lam / (psi * (1 + lam * lam)))
    th = g * np.array([1, lam, 1, lam]) / np.hypot(1, lam)
    lt = 1.3
    uv, uw = th[0] + lt * th[1], th[2] + lt * th[3]
    ftil = psi * uv * uw + th[0] * th[2]
    assert abs(ftil - lam * (1 + lt * lam) ** 2 / (1 + lam**2) ** 2) < 1e-5


@pytest.mark.parametrize("emb,kq", [("block", "merged"), ("shared", "separate")])
def test_one_vs_many_threads_bit_identical(emb, kq):
    """Above SMALL_WORK the kernels run on every thread, below on one: both bit-identical."""
    import numba

    n = K.SMALL_WORK // 6 + 4000  # 6 tokens a sequence: just above the threshold
    data = msfr_seq.from_counts(
        np.array([n // 2, n // 3, n - n // 2 - n // 3]), np.array([1.0, 0.7, 0.4]), np.full(3, 5), 4
    )
    lay = K.Layout(3, emb, kq, 2)
    th = np.random.default_rng(1).normal(0, 0.3, lay.n_params)
    before = numba.get_num_threads()
    out = []
    try:
        for nt in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(nt)
            g = np.zeros_like(th)
            ws = K.Workspace(lay, data)
            assert ws.work >= K.SMALL_WORK
            out.append((K.loss_and_grad(th, lay, data, g, ws), g))
    finally:
        numba.set_num_threads(before)
    assert out[0][0] == out[1][0] and np.array_equal(out[0][1], out[1][1])
    assert numba.get_num_threads() == before
