"""Plots: a non-empty PNG, log axes where they belong, the expected lines (via matplotlib objects)."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.analysis import compare, plot
from fastdyn.h5 import load
from tests.analysis.test_compare import EX, grid_runs, plateau_power
from tests.analysis.test_load import make_run


def _png(path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def _labels(ax) -> list[str]:
    return [ln.get_label() for ln in ax.get_lines()]


def test_plot_loss_is_unchanged(tmp_path):
    t = np.geomspace(1e-2, 1e4, 50)
    r = load(
        make_run(tmp_path / "m.h5", t, {"loss/test": t**-0.5, "theory/loss/test": 1.1 * t**-0.5})
    )
    fig = plot.plot_loss([r], tmp_path / "l.png")
    _png(tmp_path / "l.png")
    ax, bx = fig.axes  # the loss, and below it the residual against the theory in the file
    assert len(ax.get_lines()) == 2 and ax.get_lines()[1].get_linestyle() == "--"
    assert ax.get_xscale() == ax.get_yscale() == "log"
    (res,) = bx.get_lines()
    np.testing.assert_allclose(res.get_ydata(), 1 - 1 / 1.1, rtol=1e-12)  # |t^-½ / (1.1 t^-½) - 1|
    assert bx.get_yscale() == "log" and "L_th" in bx.get_ylabel()


def test_round_off_is_clipped_and_left_out_of_the_residuals(tmp_path):
    """A run that flattens at round-off (1e-20) while its closed form goes down to 1e-31: the loss
    axis stops at 1e-13 of the largest value and says why; the residual panel compares only the
    points where the theory is above that floor, and says so."""
    t = np.geomspace(1e-2, 1e4, 60)
    th = np.geomspace(1.0, 1e-31, 60)
    sim = np.maximum(th * (1 + 1e-6), 1e-20)
    r = load(make_run(tmp_path / "f.h5", t, {"loss/test": sim, "theory/loss/test": th}))
    fig = plot.plot_loss([r], tmp_path / "f.png", style="paper")
    ax, bx = fig.axes
    assert ax.get_ylim()[0] == pytest.approx(1e-13 * 1.000001, rel=1e-12)
    assert any("round-off" in tx.get_text() for tx in ax.texts)
    (res,) = bx.get_lines()
    keep = th >= 1e-13
    np.testing.assert_allclose(res.get_xdata(), t[keep], rtol=0)
    np.testing.assert_allclose(res.get_ydata(), 1e-6, rtol=1e-8)
    assert any("theory ≥ 1e-13" in tx.get_text() for tx in bx.texts)


def test_plot_scaling_time_fit(tmp_path):
    t = np.geomspace(1e-2, 1e8, 300)
    r = load(make_run(tmp_path / "m.h5", t, {"loss/test": plateau_power(t, EX.time)}))
    rep = compare.fit_run(r, bootstrap=100)
    fig = plot.plot_scaling([rep], tmp_path / "s.png")
    _png(tmp_path / "s.png")
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert len(lines) == 3  # data, fit, theory
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert lines[2].get_linestyle() == "--" and "theory: p = 0.5882" in lines[2].get_label()
    assert f"p = {EX.time:.4f} ±" in lines[1].get_label() and "95% CI" in lines[1].get_label()
    # the fitted line lies on the data over its window
    xs, ys = lines[1].get_data()
    np.testing.assert_allclose(ys, 10**EX.time * xs**-EX.time, rtol=1e-9)
    assert "gradient-flow time" in ax.get_xlabel() and "dimensionless" in ax.get_ylabel()
    legend = [tx.get_text() for tx in ax.get_legend().get_texts()]
    assert len(legend) == 3


def test_plot_scaling_scan_without_theory_has_two_lines(tmp_path):
    t = np.geomspace(1, 10, 4)
    runs = [
        load(make_run(tmp_path / f"{d}.h5", t, {"loss/test": np.full(4, d**-1.0)}, model="other",
                      config={"model": "other", "task": {"model_size": d, "n_tasks": 10**6}}))
        for d in (10, 100, 1000, 10000)
    ]  # fmt: skip
    rep = compare.scan(runs, "model_size", bootstrap=0)
    fig = plot.plot_scaling([rep], tmp_path / "d.png")
    (ax,) = fig.axes
    assert len(ax.get_lines()) == 2 and ax.get_lines()[0].get_marker() == "o"
    assert "model size D" in ax.get_xlabel()


def test_plot_frontier(tmp_path):
    Ds = np.geomspace(10, 1e5, 13).round().astype(int)
    rep = compare.compute_frontier(grid_runs(tmp_path, Ds), n_C=32)
    fig = plot.plot_frontier(rep, tmp_path / "f.png")
    _png(tmp_path / "f.png")
    ax, bx = fig.axes
    assert len(ax.get_lines()) == len(Ds) + 3  # one curve per D, L* points, fit, theory
    assert len(bx.get_lines()) == 3  # D* points, fit, theory
    for a in (ax, bx):
        assert a.get_xscale() == a.get_yscale() == "log" and "compute C" in a.get_xlabel()
        assert a.get_lines()[-1].get_linestyle() == "--"


def test_plot_tasks(tmp_path):
    t = np.concatenate([[0.0], np.geomspace(1e-1, 1e6, 80)])
    idx = np.array([1, 3, 10])
    ts = np.array([10.0, 100.0, 1000.0])
    lam = idx.astype(float) ** -0.25  # Λ_s = Λ0 s^-γ, γ = 0.25 in the stored config
    f = lam * t[:, None] ** 2 / (t[:, None] ** 2 + ts**2)  # half-rise at t_s
    path = make_run(tmp_path / "m.h5", t, {"tasks/f": f, "theory/tasks/f": f * 1.001},
                    static={"tasks/index": idx, "tasks/emergence": ts})  # fmt: skip
    fig = plot.plot_tasks([load(path)], tmp_path / "t.png")
    _png(tmp_path / "t.png")
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert len(lines) == 9  # per task: simulation, closed form, emergence vertical
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    ys = lines[0].get_ydata()
    assert ys[-1] == pytest.approx(1.0, abs=1e-6)  # normalised by Λ_s
    assert [ln.get_xdata()[0] for ln in lines if ln.get_linestyle() == ":"] == list(ts)
    # the legend names the closed form once (its dashed lines are black beside the simulation)
    legend = [tx.get_text() for tx in ax.get_legend().get_texts()]
    assert legend.count("closed form (dashed)") == 1 and len(legend) == 4, legend
    with pytest.raises(KeyError, match="no per-task series"):
        plot.plot_tasks(
            [load(make_run(tmp_path / "n.h5", t, {"loss/test": t + 1}))], tmp_path / "x.png"
        )


def test_plot_weights(tmp_path):
    t = np.geomspace(1e-2, 1e3, 40)
    H, D = 2, 4
    vw = np.tanh(t[:, None] * np.arange(1, H + 1))
    ge = np.tanh(t[:, None] / np.arange(1, D + 1))
    cfg = {"model": "attn-s", "data": {"D": D, "N": 31, "spectrum": "linear"}}
    path = make_run(tmp_path / "w.h5", t, {"params/value_weights": vw, "params/Gamma_eig": ge,
                                           "loss/train": 1 / (1 + t)}, model="attn-s", config=cfg)  # fmt: skip
    fig = plot.plot_weights([load(path)], tmp_path / "w.png")
    _png(tmp_path / "w.png")
    ax, bx = fig.axes
    assert len(ax.get_lines()) == H
    assert len(bx.get_lines()) == 2 * D  # D projections + D dashed global-minimum levels
    # dashed levels: 1 / (λ_d (1 + (1 + trΛ/λ_d)/N)) for λ = .4, .3, .2, .1 (spec icl.md §4)
    lam = np.array([0.4, 0.3, 0.2, 0.1])
    want = 1 / (lam * (1 + (1 + 1 / lam) / 31))
    got = [ln.get_ydata()[0] for ln in bx.get_lines() if ln.get_linestyle() == "--"]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert ax.get_xscale() == bx.get_xscale() == "log"
