"""ATTN_M: gradients vs finite differences, kernels vs the numpy reference, reduced path and
population theory (Γ*, L*, Eq. 10), and the full per-sample model vs the population curve."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fastdyn.drive.optim import make_optimizer
from fastdyn.drive.train import train
from fastdyn.models.icl.attn_m import AttnM
from fastdyn.models.icl.attn_m import theory as tm
from fastdyn.models.icl.problem import generate, rotation, spectrum_eigenvalues
from tests.reference.icl_reference import (
    FD_RTOL,
    FWD_RTOL,
    attn_loss,
    check_gradient,
    finite_difference,
    random_theta,
    reduced_loss_population,
    small_data,
)


@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("scale", ["N", "1"])
@pytest.mark.parametrize("loss", ["last", "cumulative"])
@pytest.mark.parametrize("ic_only", [False, True])
def test_gradient_and_forward(softmax, scale, loss, ic_only):
    data = small_data()
    m = AttnM(3, 2, 5, softmax=softmax, attention_scale=scale, loss=loss, ic_only=ic_only)
    fd_err, fwd_err = check_gradient(m, data, random_theta(m))
    assert fd_err < FD_RTOL
    assert fwd_err < FWD_RTOL


def test_forward_multi_block_matches_reference():
    # P spans two reduction blocks (BLOCK = 1024) with a partial last block
    data = generate(2, 3, 1100, seed=4)
    for softmax in (False, True):
        m = AttnM(2, 2, 3, softmax=softmax, attention_scale="1")
        th = random_theta(m, 0.3, seed=2)
        L = m.loss_value(th, m.prepare(data.tokens, data.labels))
        Lr = attn_loss(m.to_arrays(th), data.tokens, data.labels, scale="1", softmax=softmax)
        assert abs(L - Lr) / Lr < FWD_RTOL


@pytest.mark.parametrize("D", [1, 2, 4, 5, 8])
def test_last_token_kernel_tiles_match_reference(D):
    # P = 1024 + 600: a block of full tiles, then a block with full tiles and a partial one; D = 4
    # and 8 take the four-column passes only, D = 1, 2, 5 the one-column remainder too
    data = generate(D, 3, 1624, seed=D)
    m = AttnM(D, 2, 3, attention_scale="1")
    th = random_theta(m, 0.3, seed=D)
    prep = m.prepare(data.tokens, data.labels)
    g = np.empty(m.n_params)
    L = m.loss_and_grad(th, prep, g)
    Lr = attn_loss(m.to_arrays(th), data.tokens, data.labels, scale="1")
    assert abs(L - Lr) / Lr < FWD_RTOL
    fd = finite_difference(lambda t: m.loss_value(t, prep), th)
    assert np.max(np.abs(g - fd)) / np.max(np.abs(fd)) < FD_RTOL


def test_last_token_kernel_gathered_samples_and_threads_bit_identical():
    import numba

    data = generate(4, 31, 5000, seed=3)
    m = AttnM(4, 8, 31, attention_scale="1")
    th = random_theta(m, 0.3, seed=1)
    prep = m.prepare(data.tokens, data.labels)
    perm = np.random.default_rng(0).permutation(5000)
    # a minibatch (gathered per block) equals the same samples laid out in that order, in place
    Pp = m.prepare(data.tokens[perm], data.labels[perm])
    Pp.moments = False  # the per-sample kernel in place (all samples: else the data's moments)
    out = {}
    before = numba.get_num_threads()
    try:
        for nt in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(nt)
            for name, pr, idx in (("gathered", prep, perm), ("in place", Pp, None)):
                g = np.empty(m.n_params)
                L = m.loss_and_grad(th, pr, g, idx)
                out[nt, name] = (L, g)
    finally:
        numba.set_num_threads(before)
    (L0, g0), *rest = out.values()
    for L1, g1 in rest:
        assert L1 == L0
        np.testing.assert_array_equal(g1, g0)


def test_layout_counts_and_roundtrip():
    D, H = 4, 3
    m = AttnM(D, H, 7)
    assert m.n_params == m.n_trained == H * (D + 1) ** 2
    assert AttnM(D, H, 7, ic_only=True).n_trained == H * (D * D + 1)
    th = random_theta(m)
    arr = m.to_arrays(th)
    assert arr["W_V"].shape == arr["W_KQ"].shape == (H, D + 1, D + 1)
    assert np.all(arr["W_V"][:, :D, :] == 0) and np.all(arr["W_KQ"][:, :, D] == 0)
    np.testing.assert_array_equal(m.from_arrays(arr), th)
    with pytest.raises(ValueError, match="init.from_file: array 'W_KQ' must have shape"):
        m.from_arrays({"W_V": arr["W_V"], "W_KQ": arr["W_KQ"][:, :D]})


def test_reference_init_zero_blocks():
    m = AttnM(4, 8, 31)
    r, W = m.views(m.init("reference", 1e-3, 5))
    assert np.all(r[:, :4] == 0) and np.all(W[:, 4, :] == 0)
    assert 0.5e-3 < np.std(W[:, :4, :]) < 2e-3  # 128 draws of std 1e-3: a loose sanity band
    r, W = m.views(m.init("paper", 1e-3, 5))
    assert np.all(r[:, :4] != 0)


@pytest.mark.parametrize("scale", ["N", "1"])
@pytest.mark.parametrize("loss", ["last", "cumulative"])
def test_reduced_equals_full_ic_only_and_fd(scale, loss):
    # the sufficient statistics are exact: reduced loss = full loss with 𝐯 = 𝐮 = 0 held
    data = small_data(P=9)
    full = AttnM(3, 2, 5, attention_scale=scale, loss=loss, ic_only=True)
    red = AttnM(3, 2, 5, attention_scale=scale, loss=loss, reduced=True)
    th = random_theta(full)
    pf, pr = full.prepare(data.tokens, data.labels), red.prepare(data.tokens, data.labels)
    gf, gr = np.empty(full.n_params), np.empty(red.n_params)
    Lf, Lr = full.loss_and_grad(th, pf, gf), red.loss_and_grad(th, pr, gr)
    # one O(P D⁴) moment pass vs per-sample sums: cancellation in yy − 2γc + γCγ costs ~1e-13
    assert abs(Lf - Lr) / Lf < 1e-11
    np.testing.assert_allclose(gr, gf, rtol=0, atol=1e-11 * np.abs(gf).max())
    fd = finite_difference(lambda t: red.loss_value(t, pr), th) * red.mask
    assert np.abs(gr - fd).max() / np.abs(fd).max() < FD_RTOL


def test_population_loss_matches_closed_form():
    lam = spectrum_eigenvalues(4)
    Q = rotation(4, 2)
    for scale, kappa in (("N", 1.0), ("1", 31.0)):
        m = AttnM(4, 3, 31, reduced=True, attention_scale=scale)
        th = random_theta(m, 0.3)
        L = m.loss_value(th, m.prepare_population(lam, Q))
        Lr = reduced_loss_population(m.gamma(th), lam, Q, 31, kappa)
        assert abs(L - Lr) / Lr < 1e-12  # two O(D⁴) evaluations of the same quadratic form


def test_population_converges_to_gamma_star():
    D, N = 4, 31
    lam, Q = spectrum_eigenvalues(D), rotation(D, 3)
    m = AttnM(D, 3, N, reduced=True)
    prep = m.prepare_population(lam, Q)
    th = m.init("paper", 0.1, 0)
    rec = train(m, prep, th, make_optimizer("gd", m.n_params, 0.3), 40000, [40000], eigvecs=Q)
    err = np.abs(rec["Gamma"][-1] - tm.gamma_star(lam, Q, N)).max()
    assert err <= 1e-6  # acceptance 3 (measured ~4e-14 after 40000 steps)
    assert abs(rec["loss/train"][-1] - tm.loss_star(lam, N)) < 1e-12
    np.testing.assert_allclose(
        tm.plateau_losses(lam, N)[[0, -1]], [1.0, tm.loss_star(lam, N)], rtol=1e-14
    )
    np.testing.assert_allclose(
        tm.plateau_losses(lam, N), [1, 0.64058, 0.37737, 0.20980, 0.13600], atol=5e-6
    )  # spec §4's 5-digit table


def _eq10_run(eta, D=4, N=31, H=2, a=1e-2, t_end=6.0):
    lam, Q = np.ones(D), np.eye(D)
    m = AttnM(D, H, N, reduced=True)
    prep = m.prepare_population(lam, Q)
    th = np.zeros(m.n_params)
    r, W = m.views(th)
    r[:, D] = a  # balanced, aligned heads: v_i = u_i = a, U_i = u_i I/√D
    W[:, :D, :] = a * np.eye(D) / np.sqrt(D)
    n = int(round(t_end / (2 * eta)))
    rec = train(m, prep, th, make_optimizer("gd", m.n_params, eta), n, np.arange(0, n + 1, 5))
    sigma = np.trace(rec["Gamma"], axis1=1, axis2=2) / D
    ref = tm.eq10_sigma(2 * eta * rec["step"], 1.0, D, N, H * a * a)
    return np.abs(sigma - ref).max(), sigma[-1]


def test_eq10_time_course_and_discretisation_order():
    dev1, s_end = _eq10_run(1e-3)
    dev2, _ = _eq10_run(5e-4)
    assert dev1 < 5e-3  # acceptance 3 (measured 3.0e-3)
    assert 0.8 * 2 < dev1 / dev2 < 1.2 * 2  # GD is first order in η: halves ±20% (measured 2.00)
    assert abs(s_end - 1 / (1 + 5 / 31)) < 1e-5  # σ(∞) = 1/(s c)


def test_eq10_helpers():
    # σ(0) = κ a0/√D, σ(∞) = 1/(s c); half-rise time from plateau_duration_m
    s, D, N, a0, kappa = 0.5, 4, 31, 1e-6, 31.0
    assert abs(tm.eq10_sigma(0.0, s, D, N, a0, kappa) - kappa * a0 / np.sqrt(D)) < 1e-18
    c = 1 + (1 + D) / N
    t_half = tm.plateau_duration_m(s, D, a0, kappa, N)
    assert abs(tm.eq10_sigma(t_half, s, D, N, a0, kappa) * s * c - 0.5) < 1e-12
    assert abs(tm.eq10_sigma(1e3, s, D, N, a0, kappa) * s * c - 1) < 1e-12


@pytest.mark.slow
def test_full_model_large_sample_approaches_population():
    # acceptance 5: P = 10^5 per-sample ATTN_M vs the population reduced model from the same init.
    # η = 0.004 stays inside GD stability of the in-weight blocks 𝐯, 𝐮 (at ρ = 1 their
    # curvature grows like v²·E[(Σy²)²]; η ≥ 0.008 shows edge-of-stability spikes at P = 10^5)
    D, N, P, eta, n = 4, 31, 100_000, 0.004, 2000
    data = generate(D, N, P, seed=7)
    full = AttnM(D, 4, N, attention_scale="1")
    pop = AttnM(D, 4, N, attention_scale="1", reduced=True)
    th_f = full.init("reference", 1e-2, 3)
    th_p = pop.init("reference", 1e-2, 3)
    np.testing.assert_array_equal(th_f, th_p)  # same draws; reference init has 𝐯 = 𝐮 = 0
    steps = np.arange(0, n + 1, 50)
    rf = train(
        full,
        full.prepare(data.tokens, data.labels),
        th_f,
        make_optimizer("gd", full.n_params, eta),
        n,
        steps,
    )
    rp = train(
        pop,
        pop.prepare_population(data.eigvals, data.eigvecs),
        th_p,
        make_optimizer("gd", pop.n_params, eta),
        n,
        steps,
    )
    Lf, Lp = rf["loss/train"], rp["loss/train"]
    assert Lp[0] > 0.99 and Lp[-1] < 0.2  # the run crosses the drop
    # sampling error of the moments is O(P^-1/2) ≈ 3e-3 of tr Λ; allow 10×
    assert np.abs(Lf - Lp).max() < 0.03  # measured 3.5e-3
    assert abs(Lf[-1] - tm.loss_star(data.eigvals, N)) < 0.01  # measured 9e-4


@pytest.mark.parametrize("scale", ["N", "1"])
def test_cumulative_prefix_rows_match_tokens_path_and_reference(scale):
    """The cumulative loss on the prepared prefix rows (lin_last over P·N rows, 1/ρ_n folded into
    x_n) equals the token path (lin_cum, a set above PREFIX_BYTES_MAX) and the numpy reference
    to round-off; P spans two blocks of rows and more than one of samples."""
    data = generate(3, 5, 1100, seed=6)
    m = AttnM(3, 2, 5, attention_scale=scale, loss="cumulative")
    th = random_theta(m, 0.3, seed=4)
    prep = m.prepare(data.tokens, data.labels)
    assert prep.SpT.shape == (10, 5 * 1100)
    toks = dataclasses.replace(prep, SpT=None, xqT=None, yq=None)
    toks.inv_rho = 1.0 / 5 if scale == "N" else 1.0
    idx = np.random.default_rng(1).permutation(1100)[:300]
    for sub in (None, idx):
        g, gt = np.empty(m.n_params), np.empty(m.n_params)
        L, Lt = m.loss_and_grad(th, prep, g, sub), m.loss_and_grad(th, toks, gt, sub)
        assert abs(L - Lt) / Lt < 1e-13
        assert np.max(np.abs(g - gt)) / np.max(np.abs(gt)) < 1e-13
    Lr = attn_loss(m.to_arrays(th), data.tokens, data.labels, scale=scale, loss="cumulative")
    assert abs(m.loss_value(th, prep) - Lr) / Lr < FWD_RTOL


def test_cumulative_gathered_threads_and_fused_steps_bit_identical():
    """Cumulative loss on prefix rows: a minibatch equals its samples laid out in order, for 1 and
    2 threads, and the fused GD steps (gd_steps) equal loss_and_grad + a GD step per epoch."""
    import numba

    data = generate(4, 31, 1500, seed=3)
    m = AttnM(4, 3, 31, attention_scale="N", loss="cumulative")
    th = random_theta(m, 0.3, seed=1)
    prep = m.prepare(data.tokens, data.labels)
    perm = np.random.default_rng(0).permutation(1500)
    Pp = m.prepare(data.tokens[perm], data.labels[perm])
    Pp.moments = False  # the per-sample kernel in place (all samples: else the data's moments)
    out = {}
    before = numba.get_num_threads()
    try:
        for nt in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(nt)
            for name, pr, idx in (("gathered", prep, perm), ("in place", Pp, None)):
                g = np.empty(m.n_params)
                out[nt, name] = (m.loss_and_grad(th, pr, g, idx), g)
            t = th.copy()
            losses = np.empty(3)
            assert m.gd_steps(prep)(t, 1e-2, losses, np.inf) == 3
            out[nt, "fused"] = (losses[-1], t)
    finally:
        numba.set_num_threads(before)
    (L0, g0), *rest = (v for k, v in out.items() if k[1] != "fused")
    for L1, g1 in rest:
        assert L1 == L0
        np.testing.assert_array_equal(g1, g0)
    t2, g = th.copy(), np.empty(m.n_params)
    for _ in range(3):
        L = m.loss_and_grad(t2, prep, g)
        t2 -= 1e-2 * g
    for k, (Lf, tf) in out.items():
        if k[1] == "fused":
            assert Lf == L
            np.testing.assert_array_equal(tf, t2)


def test_cumulative_prefix_rows_above_the_limit(monkeypatch):
    """Above PREFIX_BYTES_MAX a set keeps only its tokens (no prefix rows, no fused steps), and
    the memory estimate counts the rows only below the limit."""
    from fastdyn.models.icl import config as cfg

    data = generate(3, 5, 40, seed=2)
    m = AttnM(3, 2, 5, loss="cumulative")
    assert m.prepare(data.tokens, data.labels).SpT.shape == (10, 200)
    monkeypatch.setattr(cfg, "PREFIX_BYTES_MAX", cfg.prefix_moment_bytes(40, 5, 3) - 1)
    prep = m.prepare(data.tokens, data.labels)
    assert prep.SpT is None and m.gd_steps(prep) is None
    assert np.isfinite(m.loss_value(random_theta(m), prep))


@pytest.mark.parametrize(
    "name, loss, scale",
    [("attn-m", "last", "N"), ("attn-m", "cumulative", "1"), ("attn-s", "last", "1")],
)
def test_full_batch_moments_match_the_reference_and_the_per_sample_sums(name, loss, scale):
    from fastdyn.models.icl.attn_s import AttnS

    data = generate(3, 7, 1500, seed=5)  # NQ = 10·3 = 30 folded weights, 4·NQ ≤ 1500 rows
    m = AttnM(3, 2, 7, attention_scale=scale, loss=loss) if name == "attn-m" else (
        AttnS(3, 2, 7, R=2, attention_scale=scale, loss=loss)
    )  # fmt: skip
    th = random_theta(m, 0.3, seed=3)
    prep, per = (m.prepare(data.tokens, data.labels) for _ in range(2))
    per.moments = False  # the per-sample kernel: a second formulation of the same sums
    g, g_per = np.empty(m.n_params), np.empty(m.n_params)
    L = m.loss_and_grad(th, prep, g)
    L_per = m.loss_and_grad(th, per, g_per)
    assert prep.data_moments is not None and per.data_moments is None
    # Σδ² from the moments is y2 − 2m·b/ρ + m·Gm/ρ², terms of size y2 = Σ y²: its round-off is a
    # few ulp of y2/n (kernels.py, "the data's moments"); measured 1–3e-16 relative to y2/n here
    n = prep.yq.shape[0]
    assert abs(L - L_per) <= 32 * np.finfo(float).eps * prep.data_moments[2] / n
    # the gradient's terms are of size |b|/n: measured ≤ 2e-15 of max|g| here
    assert np.max(np.abs(g - g_per)) <= 1e-13 * np.max(np.abs(g_per))
    Lr = attn_loss(m.to_arrays(th), data.tokens, data.labels, scale=scale, loss=loss)
    assert abs(L - Lr) / Lr < FWD_RTOL
    fd = finite_difference(lambda t: m.loss_value(t, prep), th)
    assert np.max(np.abs(g - fd)) / np.max(np.abs(fd)) < FD_RTOL


def test_data_moments_are_bit_identical_for_one_and_two_threads(tmp_path):
    from tests._threads import assert_bit_identical, outputs_per_thread_count

    script = """
    from fastdyn.models.icl.attn_m import AttnM
    from fastdyn.models.icl.attn_m.kernels import full_moments
    from fastdyn.models.icl.problem import generate

    data = generate(4, 31, 20000, seed=2)  # 20 blocks: two passes of the blocks held at once
    prep = AttnM(4, 3, 31).prepare(data.tokens, data.labels)
    G, b, y2 = full_moments(prep)
    OUT.update(G=G, b=b, y2=np.array([y2]))
    """
    assert_bit_identical(outputs_per_thread_count(script, tmp_path))


def test_near_an_exact_fit_the_loss_comes_from_the_rows():
    # labels made by the model itself at θ*: L(θ*) = 0 up to the labels' round-off. From the
    # moments, L = (y2 − 2m·b + m·Gm)/n would stop at ~1e-16·y2/n, or below 0 (measured: 3 of
    # 20 points near θ* negative); below MOMENT_FLOOR·y2 the step is taken from the rows.
    from fastdyn.models.icl.attn_m.kernels import contract_M

    D, N, P = 3, 7, 2000
    m = AttnM(D, 2, N)
    data = generate(D, N, P, seed=3)
    th_star = m.init("paper", 0.5, 4)
    tokens, labels = data.tokens.copy(), data.labels.copy()
    rows = m.prepare(tokens, labels)
    NP = (D + 1) * (D + 2) // 2
    M = np.empty((NP, D))
    contract_M(*m._heads(th_star), M)
    phi = rows.SpT[:, None, :] * rows.xqT[None, :, :]  # (NP, D, P)
    labels[:, -1] = rows.inv_rho * np.einsum("pc,pcm->m", M, phi)
    y2 = float(np.mean(labels[:, -1] ** 2))
    for s in range(8):
        th = th_star + 1e-9 * np.random.default_rng(s).standard_normal(m.n_params) * (s > 0)
        prep = m.prepare(tokens, labels)
        per = m.prepare(tokens, labels)
        per.moments = False
        g, g_per = np.empty(m.n_params), np.empty(m.n_params)
        L, L_per = m.loss_and_grad(th, prep, g), m.loss_and_grad(th, per, g_per)
        assert prep.data_moments is not None and L >= 0.0
        assert L == L_per and np.array_equal(g, g_per)  # below the floor: the rows' own numbers
        assert L < 1e-6 * y2
