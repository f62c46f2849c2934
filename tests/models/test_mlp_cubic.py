"""MLP on cubic features: gradients vs finite differences, and the ATTN_M ↔ MLP identity along
whole GD runs."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.drive.optim import make_optimizer
from fastdyn.drive.train import train
from fastdyn.models.icl.attn_m import AttnM
from fastdyn.models.icl.mlp_cubic import MLPCubic, from_attn_m
from fastdyn.models.icl.problem import generate
from tests.reference.icl_reference import (
    FD_RTOL,
    FWD_RTOL,
    check_gradient,
    finite_difference,
    random_theta,
    small_data,
)


@pytest.mark.parametrize("scale", ["N", "1"])
@pytest.mark.parametrize("loss", ["last", "cumulative"])
def test_gradient_and_forward(scale, loss):
    m = MLPCubic(3, 4, 5, attention_scale=scale, loss=loss)
    fd_err, fwd_err = check_gradient(m, small_data(), random_theta(m))
    assert fd_err < FD_RTOL
    assert fwd_err < FWD_RTOL


def test_reduced_gradient():
    data = small_data(P=9)
    m = MLPCubic(3, 4, 5, reduced=True)
    th = random_theta(m)
    p = m.prepare(data.tokens, data.labels)
    g = np.empty(m.n_params)
    L = m.loss_and_grad(th, p, g)
    fd = finite_difference(lambda t: m.loss_value(t, p), th)
    assert np.abs(g - fd).max() / np.abs(fd).max() < FD_RTOL
    L_full = MLPCubic(3, 4, 5).loss_value(th, MLPCubic(3, 4, 5).prepare(data.tokens, data.labels))
    assert abs(L - L_full) / L_full < 1e-11  # exact sufficient statistics up to cancellation


def test_no_softmax():
    with pytest.raises(ValueError, match="^model.softmax: not available for mlp-cubic"):
        MLPCubic(3, 4, 5, softmax=True)


@pytest.mark.parametrize("scale", ["N", "1"])
def test_attn_m_and_mlp_same_loss_curve(scale):
    # acceptance 2: ATTN_M (full per-sample kernel, 𝐯 = 𝐮 = 0 held) and MLP on z from
    # corresponding weights, 2000 GD steps. Relative 1e-10: the two kernels sum in different
    # orders (~1e-15 per step); growth of that round-off through the saddle escape stays < 1e-12.
    D, N, H = 3, 7, 4
    data = generate(D, N, 600, seed=2)
    att = AttnM(D, H, N, attention_scale=scale, ic_only=True)
    mlp = MLPCubic(D, H, N, attention_scale=scale)
    th_a = att.init("reference", 0.05, 4)
    th_m = from_attn_m(att, th_a)
    eta = 0.05 if scale == "N" else 0.05 / N
    n = 2000
    steps = np.arange(0, n + 1, 20)
    ra = train(
        att,
        att.prepare(data.tokens, data.labels),
        th_a,
        make_optimizer("gd", att.n_params, eta),
        n,
        steps,
    )
    rm = train(
        mlp,
        mlp.prepare(data.tokens, data.labels),
        th_m,
        make_optimizer("gd", mlp.n_params, eta),
        n,
        steps,
    )
    La, Lm = ra["loss/train"], rm["loss/train"]
    assert La[-1] < 0.5 * La[0]  # the curve includes the loss drop
    assert np.abs(La - Lm).max() / np.abs(Lm).max() < 1e-10
    np.testing.assert_allclose(
        ra["Gamma"], rm["Gamma"], rtol=0, atol=1e-9 * np.abs(rm["Gamma"]).max()
    )


@pytest.mark.parametrize("loss", ["last", "cumulative"])
def test_full_batch_statistics_match_the_reference_and_the_per_sample_sums(loss):
    from tests.reference.icl_reference import mlp_loss

    data = generate(3, 7, 400, seed=6)  # K = 9 features, 4·K ≤ 400 rows: the statistics pay
    m = MLPCubic(3, 4, 7, loss=loss)
    th = random_theta(m, 0.3, seed=4)
    prep = m.prepare(data.tokens, data.labels)
    g, g_per = np.empty(m.n_params), np.empty(m.n_params)
    L = m.loss_and_grad(th, prep, g)  # all samples: yy − 2γ·c + γᵀCγ
    L_per = m.loss_and_grad(th, prep, g_per, np.arange(400))  # the same samples, one by one
    assert prep.stats is not None
    # yy − 2γ·c + γᵀCγ sums terms of size yy: a few ulp of yy (measured ≤ 2e-16 of yy here)
    assert abs(L - L_per) <= 32 * np.finfo(float).eps * prep.stats.yy
    assert np.max(np.abs(g - g_per)) <= 1e-13 * np.max(np.abs(g_per))  # measured ≤ 4e-15
    Lr = mlp_loss(m.to_arrays(th), data.tokens, data.labels, loss=loss)
    assert abs(L - Lr) / Lr < FWD_RTOL
    fd = finite_difference(lambda t: m.loss_value(t, prep), th)
    assert np.max(np.abs(g - fd)) / np.max(np.abs(fd)) < FD_RTOL
