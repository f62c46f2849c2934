"""Figures compose: every plot function takes ``ax=`` (a pair for the two-panel kinds), draws into
it, returns it and leaves the figure open; without ``ax`` it writes ``out`` as before."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fastdyn.analysis import compare, plot  # noqa: E402
from fastdyn.h5 import load  # noqa: E402
from tests.analysis.test_compare import EX, grid_runs, plateau_power  # noqa: E402
from tests.analysis.test_load import make_run  # noqa: E402


@pytest.fixture
def runs(tmp_path):
    t = np.geomspace(1e-2, 1e8, 200)
    loss = make_run(tmp_path / "l.h5", t, {"loss/test": plateau_power(t, EX.time), "theory/loss/test": 1.1 * plateau_power(t, EX.time)})  # fmt: skip
    tt = np.geomspace(1e-1, 1e6, 40)
    ts = np.array([10.0, 100.0])
    f = tt[:, None] ** 2 / (tt[:, None] ** 2 + ts**2)
    tasks = make_run(tmp_path / "t.h5", tt, {"tasks/f": f}, static={"tasks/index": np.array([1, 3]), "tasks/emergence": ts})  # fmt: skip
    return load(loss), load(tasks)


@pytest.fixture(autouse=True)
def _close_all():
    yield
    plt.close("all")


def test_three_kinds_compose_into_one_open_figure(runs, tmp_path):
    loss, tasks = runs
    other = plt.figure()  # a figure of the caller's own: left open too
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(12, 3))
    assert plot.plot_loss([loss], ax=a) is a
    assert plot.plot_scaling([compare.fit_run(loss, bootstrap=0)], ax=b) is b
    assert plot.plot_tasks([tasks], ax=c) is c
    assert plt.fignum_exists(fig.number) and plt.fignum_exists(other.number)
    assert fig.axes == [a, b, c]  # no residual panel was added beside the caller's axes
    assert [ln.get_linestyle() for ln in a.get_lines()] == ["-", "--"]  # simulation, theory
    assert a.get_xscale() == a.get_yscale() == "log"
    assert len(b.get_lines()) == 3 and "p = 0.5882" in b.get_lines()[2].get_label()
    np.testing.assert_allclose(c.get_lines()[0].get_ydata()[-1], 1.0, atol=1e-6)
    fig.savefig(tmp_path / "all.png")
    assert (tmp_path / "all.png").read_bytes()[:4] == b"\x89PNG"


def test_a_pair_gets_the_residuals_and_out_is_written_too(runs, tmp_path):
    loss, _ = runs
    fig, pair = plt.subplots(2, 1, sharex=True)
    got = plot.plot_loss([loss], tmp_path / "l.png", ax=pair)
    assert got is pair and plt.fignum_exists(fig.number)
    (res,) = pair[1].get_lines()
    np.testing.assert_allclose(res.get_ydata(), 1 - 1 / 1.1, rtol=1e-12)  # |L / (1.1 L) − 1|
    assert (tmp_path / "l.png").stat().st_size > 5000


def test_two_panel_kinds_take_a_pair(tmp_path):
    Ds = np.geomspace(10, 1e5, 13).round().astype(int)
    rep = compare.compute_frontier(grid_runs(tmp_path, Ds), n_C=32)
    fig, (a, b) = plt.subplots(1, 2)
    assert plot.plot_frontier(rep, ax=(a, b)) == (a, b)
    assert len(a.get_lines()) == len(Ds) + 3 and len(b.get_lines()) == 3
    assert plt.fignum_exists(fig.number)
    t = np.geomspace(1e-2, 1e3, 20)
    cfg = {"model": "attn-s", "data": {"D": 2, "N": 31, "spectrum": "linear"}}
    w = load(make_run(tmp_path / "w.h5", t, {"params/value_weights": np.tanh(t)[:, None], "params/Gamma_eig": np.tanh(t[:, None] / [1, 2]), "loss/train": 1 / (1 + t)}, model="attn-s", config=cfg))  # fmt: skip
    fig2, pair = plt.subplots(1, 2)
    assert plot.plot_weights([w], ax=pair) is pair
    assert len(pair[0].get_lines()) == 1 and len(pair[1].get_lines()) >= 2
    with pytest.raises(ValueError, match=r"plot_weights: ax must be 2 matplotlib Axes"):
        plot.plot_weights([w], ax=pair[0])


def test_neither_out_nor_ax_is_refused(runs):
    with pytest.raises(ValueError, match=r"give out= \(a file to write\) or ax="):
        plot.plot_loss([runs[0]])


def test_without_ax_the_file_is_written_and_the_figure_closed(runs, tmp_path):
    fig = plot.plot_tasks([runs[1]], tmp_path / "t.png")
    assert not plt.fignum_exists(fig.number) and (tmp_path / "t.png").stat().st_size > 5000
