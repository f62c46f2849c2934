"""The finite-train-set minimum ``/theory/train_minimum`` (fastdyn.models.icl.train_minimum):
against a naive numpy reference (tests/reference/icl_train_minimum_reference.py: the full,
unsymmetrised tensor and the normal equations with a pseudo-inverse, no fastdyn kernel), and
against long gradient-descent runs, whose train loss converges to it from above."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from tests.reference.icl_train_minimum_reference import train_minimum

#: Fig. 1's config on P = 200 sequences, N = 31, D = 4 (60 features full, 16 in-context only)
SMALL = ("data.P=200", "data.n_test=10", "schedule.save_every=100", "data.save=true")
#: the reference solves the normal equations (condition number squared): agreement measured to
#: ≤ 4.5e-16 relative on these sets; 1e-9 leaves room for other BLAS and CPUs
REF_RTOL = 1e-9


def _run(path, *sets) -> h5py.File:
    args = ["-q", "simulate", "data/configs/icl_fig1.toml"]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, [*args, "-o", str(path)])
    assert res.exit_code == 0, res.output
    return h5py.File(path, "r")


@pytest.mark.parametrize(
    "sets, in_context_only",
    [
        (("schedule.epochs=1",), False),
        (("schedule.epochs=1", "attention.ic_only=true"), True),
        (("schedule.epochs=1", 'model="attn-s"', "attention.H=5"), False),
        (("schedule.epochs=1", 'model="mlp-cubic"'), True),
        (("schedule.epochs=1", "data.icl_fraction=0.5"), False),
    ],
)
def test_matches_the_naive_reference(tmp_path, sets, in_context_only):
    f = _run(tmp_path / "r.h5", *SMALL, *sets)
    ref = train_minimum(f["data/tokens"][()], f["data/labels"][()], in_context_only)
    got = float(f["theory/train_minimum"][()])
    assert got == pytest.approx(ref, rel=REF_RTOL)
    bound = "" if "attention.H=5" not in sets else "; a lower bound: these heads do not reach it"
    assert f["theory/train_minimum"].attrs["long_name"] == f"train-set minimum (P = 200{bound})"
    assert got < float(f["theory/L_star"][()])  # the train set's own fit: below the population's


def test_long_gd_converges_to_it_from_above(tmp_path):
    """In-context class (ic_only, 16 features): 20001 steps at lr 3e-3 reach it to 2.2e-16
    relative (measured); full ATTN_M (60 features, the in-weight directions slow): 100001 steps
    leave 9.2e-4 (measured, still falling). Tolerances: 1e-12 and 2e-3. Every saved train loss
    is at or above it (a lower bound: 1e-12 relative for round-off)."""
    for sets, tol in (
        (("attention.ic_only=true", "schedule.epochs=20001", "optim.lr=3e-3"), 1e-12),
        (("schedule.epochs=100001", "optim.lr=3e-3", "schedule.save_every=1000"), 2e-3),
    ):
        f = _run(tmp_path / f"gd{tol:g}.h5", *SMALL, *sets)
        lp, L = float(f["theory/train_minimum"][()]), f["loss/train"][()]
        assert np.all(L >= lp * (1 - 1e-12)), sets
        assert L[-1] / lp - 1 <= tol, (sets, L[-1] / lp - 1)
        f.close()


def test_not_written_where_undefined(tmp_path):
    """Softmax, the cumulative loss and population runs have no train-set minimum."""
    for sets in (
        ("attention.softmax=true", "data.P=20", "data.n_test=5", "schedule.epochs=1"),
        ('attention.loss="cumulative"', "data.P=20", "data.n_test=5", "schedule.epochs=1"),
        ("data.population=true", "attention.reduced=true", "data.n_test=0", "schedule.epochs=1"),
    ):
        with _run(tmp_path / f"u{len(sets[0])}.h5", *sets) as f:
            assert "train_minimum" not in f["theory"], sets


@pytest.mark.parametrize("sets", [(), ('model="attn-s"', "attention.H=5")])
def test_sets_that_train_from_moments_solve_them(tmp_path, monkeypatch, sets):
    """P = 400 rows of 60 features train from the set's moments (4·NQ ≤ P), and the minimum then
    comes from them (normal equations, residual over the rows): it matches the reference to the
    same REF_RTOL (measured 2.2e-16 on Fig. 4's set, 80 000 × 360)."""
    from fastdyn.models.icl import train_minimum as tm

    calls = []
    real = tm.from_moments
    monkeypatch.setattr(tm, "from_moments", lambda *a: calls.append(real(*a)) or calls[-1])
    sets = ("data.P=400", "data.n_test=10", "data.save=true", "schedule.epochs=1", *sets)
    with _run(tmp_path / "m.h5", *sets) as f:
        ref = train_minimum(f["data/tokens"][()], f["data/labels"][()], False)
        got = float(f["theory/train_minimum"][()])
    assert len(calls) == 1 and calls[0] == got  # solved from the moments, not by lstsq
    assert got == pytest.approx(ref, rel=REF_RTOL)


def test_from_moments_against_lstsq_and_its_conditioning_limit():
    """Random packed rows: the same minimum as lstsq on the explicit features (measured 1e-15
    relative; 1e-12 for other BLAS); a G whose condition number exceeds MOMENT_COND_MAX is
    declined (None), so the caller takes lstsq."""
    from fastdyn.models.icl.train_minimum import MOMENT_COND_MAX, from_moments

    rng = np.random.default_rng(3)
    NP, D, P = 6, 2, 500
    SpT, xqT = rng.standard_normal((NP, P)), rng.standard_normal((D, P))
    F = (SpT[:, None, :] * xqT[None, :, :]).reshape(NP * D, P).T  # φ_q, q = p·D + c
    y = F @ rng.standard_normal(NP * D) + 0.1 * rng.standard_normal(P)
    coef, *_ = np.linalg.lstsq(F, y, rcond=None)
    want = float(np.sum((y - F @ coef) ** 2) / P)
    got = from_moments(F.T @ F, F.T @ y, SpT, xqT, y)
    assert got == pytest.approx(want, rel=1e-12)
    G = np.diag([1.0, 0.5 / MOMENT_COND_MAX])
    assert from_moments(G, np.ones(2), np.ones((1, 3)), np.ones((2, 3)), np.ones(3)) is None
