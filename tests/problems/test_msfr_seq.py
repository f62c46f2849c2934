"""Sampled MSFR sequences: counts, layout, distributions, reproducibility, sparsity."""

import numpy as np

from fastdyn.models.msfr.config import InitSection, TaskSection
from fastdyn.models.msfr.problem import MsfrProblem
from fastdyn.models.msfr_attn import problem as msfr_seq


def _problem(seed=3, **kw):
    t = TaskSection(**({"n_tasks": 300, "n_samples": 5000.0, "psi0": 7.0, "beta": 0.3} | kw))
    return MsfrProblem(t, InitSection(), seed)


def test_counts_and_lengths_match_task_table():
    p = _problem()
    data = msfr_seq.training_set(p)
    counts = p.counts(0, p.n_tasks)
    assert np.array_equal(np.diff(data.task_start), counts)
    assert data.n == 5000 and np.all(np.diff(data.task) >= 0)
    ch = p.chunk(0, p.n_tasks)
    assert np.array_equal(np.diff(data.offset), ch.psi[data.task].astype(np.int64) + 1)
    assert set(np.unique(data.x).tolist()) == {-1.0, 1.0}
    assert data.noise.shape == (0, 0)  # nothing N_s-wide without a variant


def test_reproducible_and_seeded():
    a = msfr_seq.training_set(_problem(seed=3))
    b = msfr_seq.training_set(_problem(seed=3))
    c = msfr_seq.training_set(_problem(seed=4))
    assert np.array_equal(a.x, b.x)
    assert not np.array_equal(a.x[:1000], c.x[:1000])


def test_gaussian_moments():
    data = msfr_seq.training_set(
        _problem(n_samples=20000.0, psi0=50.0, beta=0.0), x_dist="gaussian"
    )
    x = data.x.astype(np.float64)
    n = x.size
    # 5 standard errors of the sample mean / second / fourth moments (var of x^2 is 2, of x^4 is 96)
    assert abs(x.mean()) < 5 / np.sqrt(n)
    assert abs((x**2).mean() - 1) < 5 * np.sqrt(2 / n)
    assert abs((x**4).mean() - 3) < 5 * np.sqrt(96 / n)


def test_dense_variants_store_scaled_noise():
    p = _problem(n_tasks=8, n_samples=400.0)
    d = msfr_seq.training_set(p, feature_noise=0.1)
    assert d.noise.shape == (d.x.size, 8) and np.allclose(d.scale[1:], 0.1)
    rows = np.repeat(d.task, np.diff(d.offset))
    assert np.all(d.noise[np.arange(d.x.size), rows] == 0)
    sc = msfr_seq.training_set(p, tau=2.0)
    assert np.allclose(sc.scale, np.arange(1, 9.0) ** -1.0)
