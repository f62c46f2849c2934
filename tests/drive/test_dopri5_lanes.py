"""dopri5 runs DP_LANES tasks in lock-step lanes (models/msfr/lanes_dopri5.py): a task's result must not
depend on its lane, its group, or the other tasks of the group (the lanes share no arithmetic)."""

from __future__ import annotations

import numpy as np

from fastdyn.models.msfr import integrate as I
from fastdyn.models.msfr.lanes_dopri5 import DP_LANES
from tests.drive.test_integrate import _tasks


def test_each_task_as_if_alone():
    """37 tasks (groups of DP_LANES and a partial one) with rates over 10 decades, balanced and
    random init, some never trained (frozen), output times at which some settle: every output,
    final state, step size and step count is bit-identical to integrating that task alone (a group
    of one, whose other lanes idle) and to the table run backwards (other lanes, other groups)."""
    n = 37
    assert n % DP_LANES
    lam, psi, _, v, w, _ = _tasks(n, seed=5)
    rate = 10.0 ** np.linspace(-6, 4, n)
    rate[[3, 20]] = 0.0
    times = np.concatenate(([0.0], np.geomspace(1e-3, 1e4, 15)))

    def run(idx):
        return I.integrate_dopri5(
            lam[idx], psi[idx], rate[idx], rate[idx], v[0, idx], v[1, idx], w[0, idx], w[1, idx],
            times, rtol=1e-8, track=np.arange(len(idx)),
        )  # fmt: skip

    whole = run(np.arange(n))
    rev = run(np.arange(n)[::-1])
    counts = whole.state.counts()
    assert counts["frozen"] == 2 and counts["settled"] > 0 and counts["running"] > 0, counts
    st = whole.state
    for i in range(n):
        one = run(np.array([i]))
        for a, b, r in (
            (whole.f_track[i], one.f_track[0], rev.f_track[n - 1 - i]),
            (st.y[:, i], one.state.y[:, 0], rev.state.y[:, n - 1 - i]),
            (st.h[i], one.state.h[0], rev.state.h[n - 1 - i]),
            (st.steps[i], one.state.steps[0], rev.state.steps[n - 1 - i]),
            (st.rejected[i], one.state.rejected[0], rev.state.rejected[n - 1 - i]),
            (st.status[i], one.state.status[0], rev.state.status[n - 1 - i]),
        ):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes() == np.asarray(r).tobytes(), i


def test_start_of_call_norm_and_slope_equal_a_steps():
    """A call starts from a saved state with k = rhs(y) and ‖y‖ from _dp_rhs_lanes; a continuing
    run has them from its last step. Both are contracted into FMAs and must agree bit for bit (or
    a run in segments would differ from one call): a step of size 0 leaves y as it is, and its
    k7 = rhs(y), f and ‖y_new‖ must equal what _dp_rhs_lanes gives."""
    from fastdyn.models.msfr import lanes_dopri5 as L

    rng = np.random.default_rng(3)
    n = L.DP_LANES
    W = np.zeros(L.DP_NW * n)
    for off, vals in (
        (L._OLAM, rng.uniform(0.01, 10, n)),
        (L._OPSI, rng.uniform(2, 1000, n)),
        (L._OQ, np.where(np.arange(n) % 2 == 0, 1.0, 0.0)),
        (L._ORATE, rng.uniform(1e-3, 10, n)),
        *((o, rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 0, n)) for o in (L._OY0, L._OY1, L._OY2, L._OY3)),
    ):  # fmt: skip
        W[off : off + n] = vals
    L._dp_rhs_lanes(W)
    start = {o: W[o : o + n].copy() for o in (L._OK0, L._OK1, L._OK2, L._OK3, L._OF, L._ORMSY)}
    y = W[L._OY0 : L._OY0 + 4 * n].copy()
    W[L._OHH : L._OHH + n] = 0.0
    L._dp_step_lanes(W, 1e-14, 1e-8)
    assert np.array_equal(W[L._OYN0 : L._OYN0 + 4 * n], y)  # the step moved nothing
    stepped = {L._OK0: L._OKN0, L._OK1: L._OKN1, L._OK2: L._OKN2, L._OK3: L._OKN3, L._OF: L._OFN, L._ORMSY: L._ORMSN}  # fmt: skip
    for o, on in stepped.items():
        assert W[on : on + n].tobytes() == start[o].tobytes(), o
