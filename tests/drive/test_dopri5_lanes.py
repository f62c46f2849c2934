"""dopri5 runs DP_LANES tasks in lock-step lanes (drive/lanes_dopri5.py): a task's result must not
depend on its lane, its group, or the other tasks of the group (the lanes share no arithmetic)."""

from __future__ import annotations

import numpy as np

from fastdyn.drive import integrate as I
from fastdyn.drive.lanes_dopri5 import DP_LANES
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
