"""`init.match = "attn-m"` (issue 19): mlp-cubic starts from the function of attn-m's initial draw,
so the two can be compared from the CLI. Where the equivalence holds (attn-m with its in-weight
blocks held at zero, `ic_only`) the curves agree to round-off; for the full ATTN_M at finite P the
in-weight blocks get gradient and the curves differ (the spec's "any initialisation and optimiser"
holds only for ic_only / reduced)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main

SETS = ["data.P=200", "data.N=15", "attention.H=4", "init.scale=0.1", "optim.lr=0.02", "schedule.epochs=1500", "schedule.save_every=250", "data.n_test=0"]  # fmt: skip


def _run(tmp_path, tag, *extra):
    args = ["-q", "simulate"]
    for s in (*SETS, *extra):
        args += ["--set", s]
    out = tmp_path / f"{tag}.h5"
    res = CliRunner().invoke(main, [*args, "-o", str(out)])
    assert res.exit_code == 0, res.output
    return fastdyn.load(out)["loss/train"]


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    p = tmp_path_factory.mktemp("match")
    return {
        "ic": _run(p, "ic", "model=attn-m", "attention.ic_only=true"),
        "full": _run(p, "full", "model=attn-m"),
        "match": _run(p, "match", "model=mlp-cubic", 'init.match="attn-m"'),
        "plain": _run(p, "plain", "model=mlp-cubic"),
    }


def test_matched_mlp_equals_ic_only_attn_m(curves):
    # the same function class and gradient flow through two kernels: round-off over 1500 steps
    np.testing.assert_allclose(curves["match"], curves["ic"], rtol=1e-10)


def test_full_attn_m_differs_at_finite_p(curves):
    """Same start (attn-m's reference draw has zero in-weight blocks), then the in-weight blocks
    learn from the finite train set: measured 4.5% lower train loss at step 1500 (P = 200); deterministic (fixed seed), held to [2%, 10%]."""
    assert curves["full"][0] == pytest.approx(curves["match"][0], rel=1e-13)
    gap = 1 - curves["full"][-1] / curves["match"][-1]
    assert 0.02 < gap < 0.10, gap


def test_unmatched_mlp_starts_elsewhere(curves):
    assert abs(curves["plain"][0] / curves["match"][0] - 1) > 1e-5


@pytest.mark.parametrize(
    "extra,field",
    [
        (("model=attn-m", 'init.match="attn-m"'), "init.match"),
        (("model=mlp-cubic", 'init.match="attn-s"'), "init.match"),
    ],
)
def test_match_errors_are_one_line(tmp_path, extra, field):
    args = ["-q", "simulate"]
    for s in (*SETS, *extra):
        args += ["--set", s]
    res = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "x.h5")])
    assert res.exit_code == 2 and field in res.output and res.output.strip().count("\n") == 0
