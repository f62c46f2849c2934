"""MSFR task tables: closed-form entries, exact multinomial counts, chunk independence, tails."""

import math

import numpy as np
import pytest

from fastdyn.config import load_config
from fastdyn.models.msfr.problem import MsfrProblem
from fastdyn.reduce import BLOCK


def _problem(*sets):
    cfg = load_config(None, list(sets))
    return MsfrProblem(cfg.task, cfg.init, cfg.seed), cfg


def test_table_matches_the_formulas():
    p, cfg = _problem(
        "task.n_tasks=5000",
        "task.alpha=1.5",
        "task.gamma=0.25",
        "task.beta=0.3",
        "task.psi0=1000",
        "task.psi_min=3",
    )
    s = np.arange(1, 5001.0)
    z = np.sum(s**-1.5)
    ch = p.chunk(0, 5000)
    np.testing.assert_allclose(p.z, z, rtol=1e-13)  # summation-order round-off only
    np.testing.assert_allclose(ch.wtest, s**-1.5 / z, rtol=1e-13)
    np.testing.assert_allclose(ch.lam, s**-0.25, rtol=1e-15)
    np.testing.assert_array_equal(ch.psi, np.maximum(3, np.floor(1000 * s**-0.3 + 0.5)))
    np.testing.assert_array_equal(ch.rate, ch.wtest)  # n_samples = inf
    # balanced init: v = w = σ0 û, so f(0) = σ0² ûᵀ H û exactly
    np.testing.assert_array_equal(ch.v0x, ch.w0x)
    np.testing.assert_allclose(np.hypot(ch.v0x, ch.v0y), 1e-3, rtol=1e-15)
    np.testing.assert_allclose(ch.v0y / ch.v0x, ch.lam, rtol=1e-15)


def test_counts_are_an_exact_multinomial_independent_of_chunking():
    n_tasks, n = 10 * BLOCK + 17, 10**6
    p, _ = _problem(f"task.n_tasks={n_tasks}", f"task.n_samples={n}", "seed=11")
    whole = p.counts(0, n_tasks)
    assert whole.sum() == n and whole.min() >= 0
    parts = np.concatenate(
        [p.counts(f, min(3 * BLOCK, n_tasks - f)) for f in range(0, n_tasks, 3 * BLOCK)]
    )
    np.testing.assert_array_equal(whole, parts)
    # mean and variance of the head counts against Binomial(N, P(s)): a 6-sigma band over 20 seeds
    s = np.arange(1, 6.0)
    P = s**-2.0 / p.z
    draws = np.array(
        [
            _problem(f"task.n_tasks={n_tasks}", f"task.n_samples={n}", f"seed={k}")[0].counts(
                0, BLOCK
            )[:5]
            for k in range(20)
        ]
    )
    sd = np.sqrt(n * P * (1 - P) / 20)
    assert np.all(np.abs(draws.mean(0) - n * P) < 6 * sd)


def test_random_init_is_keyed_by_task_not_chunk():
    p, _ = _problem("task.n_tasks=4096", "init.scheme=random", "init.scale=0.5", "seed=4")
    a = p.chunk(0, 4096)
    b = p.chunk(2048, 2048)
    np.testing.assert_array_equal(a.v0x[2048:], b.v0x)
    np.testing.assert_array_equal(a.w0y[2048:], b.w0y)
    assert abs(np.std(a.v0x) - 0.5) < 0.05 and abs(np.mean(a.w0x)) < 0.05  # 4096 N(0, σ²) draws


def test_tail_losses_are_the_unrepresented_tasks():
    p, _ = _problem("task.n_tasks=20000", "task.model_size=3000", "task.gamma=0.5")
    s = np.arange(3001, 20001.0)
    P = s**-2.0 / p.z
    test, train = p.tail_losses(chunk_tasks=4096)
    np.testing.assert_allclose(test, 0.5 * np.sum(P * s**-1.0), rtol=1e-12)
    np.testing.assert_allclose(train, test, rtol=0)  # n_samples = inf: #_s/N = P(s)
    q, _ = _problem("task.n_tasks=20000", "task.model_size=3000", "task.n_samples=50000", "seed=2")
    c = q.counts(0, 20000)[3000:]
    np.testing.assert_allclose(q.tail_losses()[1], 0.5 * np.sum(c / 50000.0), rtol=1e-12)


@pytest.mark.parametrize("x", [2.0, 1.0, 0.5, -3.0, 25.0, 1.3])
def test_power_sums_match_the_exact_sum(x):
    from fastdyn.models.msfr.problem import EM_FROM, power_sums

    lo = np.array([EM_FROM + 1, 5_000_001, 10**9 + 1, 10**9 + 7])
    hi = lo + np.array([1023, 1023, 1023, 3])
    exact = [
        math.fsum(np.arange(a, b + 1, dtype=np.float64) ** -x) for a, b in zip(lo, hi, strict=True)
    ]
    np.testing.assert_allclose(power_sums(lo, hi, x), exact, rtol=2e-15)


@pytest.mark.parametrize(
    "extra", [[], ["task.n_samples=1e6"], ["task.gamma=0.4", "task.alpha=1.2"]]
)
def test_far_tail_in_closed_form_equals_the_task_by_task_sum(monkeypatch, extra):
    """Tasks beyond EM_FROM are summed per block in closed form: the same tail losses and
    normalisation as adding every task (issue 22: 10^10 tasks, model_size 1000 took > 300 s)."""
    from fastdyn.config import load_config
    from fastdyn.models.msfr import problem as msfr

    cfg = load_config(None, ["task.n_tasks=3000000", "task.model_size=1000", *extra])
    fast = msfr.MsfrProblem(cfg.task, cfg.init, cfg.seed)
    monkeypatch.setattr(msfr, "EM_FROM", 10**12)  # every task term by term, as before
    slow = msfr.MsfrProblem(cfg.task, cfg.init, cfg.seed)
    assert fast.z == pytest.approx(slow.z, rel=1e-14)
    np.testing.assert_allclose(fast.tail_losses(), slow.tail_losses(), rtol=1e-14)
