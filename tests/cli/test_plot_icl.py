"""ICL-aware analysis and publication figures: default series, plateau levels, time units,
labels and colours, ticks of a flat curve, ``--style paper``, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.analysis import plot
from fastdyn.cli import main
from tests.analysis.test_load import make_run

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"

#: spec icl.md §4: D = 4, λ = .4,.3,.2,.1, N = 31: L(M_m), m = 0..4 (L(M_4) = L*)
PLATEAUS = [1.0, 0.64058, 0.37737, 0.20980, 0.13600]
LR = 2e-2  # icl_fig3.toml


@pytest.fixture(scope="module")
def attn_s(tmp_path_factory):
    """A small ATTN_S run (Fig. 3 settings, population loss, 3000 steps; ~5 s)."""
    out = tmp_path_factory.mktemp("icl") / "attn_s.h5"
    sets = ["data.population=true", "attention.reduced=true", "schedule.epochs=3001",
            "schedule.save_every=30"]  # fmt: skip
    args = ["simulate", str(CONFIGS / "icl_fig3.toml"), "-o", str(out)]
    res = CliRunner().invoke(main, args + [a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.output
    return out


def run_cli(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def test_plot_and_fit_of_an_icl_file_need_no_y(attn_s, tmp_path):
    res = run_cli("plot", attn_s, "-o", tmp_path / "l.png")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "l.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # saddle to saddle: by default fit reports the plateaus L(M_m) the loss visits and the drops
    # between them, not a power law; with a window the fit of the default series succeeds
    res = run_cli("fit", attn_s, "--bootstrap", 0, "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["kind"] == "levels" and d["y"] == "loss/train", d
    got = {lv["name"]: lv for lv in d["levels"]}
    # the population loss dwells on L(M_0..2) (spec icl.md §4): its plateaus there are within
    # 5e-6, 3.3e-5 and 9e-7 of them (measured; how close the flow passes each saddle); L(M_3)
    # comes after the last step (t/τ = 120)
    for m in range(3):
        lv = got[f"plateaus[{m}]"]
        assert abs(lv["plateau"] / PLATEAUS[m] - 1) < 1e-4 and lv["span"] is not None, lv
    assert got["plateaus[3]"]["span"] is None
    spans = [got[f"plateaus[{m}]"]["span"] for m in range(3)]
    assert spans[0][1] < spans[1][0] <= spans[1][1] < spans[2][0], spans
    drops = [(x["from"], x["to"]) for x in d["drops"]]
    assert drops == [("plateaus[0]", "plateaus[1]"), ("plateaus[1]", "plateaus[2]")], d["drops"]
    assert all(spans[k][1] < x["t"] < spans[k + 1][0] for k, x in enumerate(d["drops"]))
    # beside each drop onto L(M_m), Eq. 21's half-rise time of the m-th direction the file
    # carries; the measured drop (the midpoint crossing, interpolated between saves 1.2 τ apart)
    # is 26.68 vs 26.47 and 40.62 vs 40.62 (measured): within half a save interval
    eq21 = fastdyn.load(attn_s)["theory/eq21/drop_time"]
    assert [x["theory_t"] for x in d["drops"]] == [float(eq21[0]), float(eq21[1])]
    assert all(abs(x["t"] - x["theory_t"]) <= 0.6 for x in d["drops"]), d["drops"]
    text = run_cli("fit", attn_s, "--bootstrap", 0).stdout
    assert "plateaus[0] → plateaus[1] at t = 26.675 (theory 26.466, +0.8 %)" in text, text
    assert "note " not in text  # seed 0: one head per direction, no caveat in the file
    res = run_cli("fit", attn_s, "--bootstrap", 0, "--window", "all")
    assert res.exit_code == 0, res.output
    assert "attn_s.h5: loss/train vs time" in res.stdout and "t/τ (paper time" in res.stdout


def test_icl_time_attributes_state_the_convention_the_data_follow(attn_s):
    import h5py

    r = fastdyn.load(attn_s)
    # τ dW/dt = -½ ∂L/∂W and W ← W - η ∂L/∂W: one step is Δt/τ = 2η (spec icl.md §3)
    np.testing.assert_allclose(r.time, 2 * LR * r["step"], rtol=1e-15)
    with h5py.File(attn_s, "r") as f:
        assert f["time"].attrs["units"] == "tau"
        assert "t/tau = 2*learning_rate*step" in f["time"].attrs["long_name"]


def test_attn_s_loss_plot_draws_the_plateau_lines(attn_s, tmp_path):
    r = fastdyn.load(attn_s)
    fig = plot.plot_loss([r], tmp_path / "p.png")
    (ax,) = fig.axes
    by_gid = {ln.get_gid(): ln for ln in ax.get_lines()}
    loss = by_gid["loss/train"]
    for m, level in enumerate(PLATEAUS[:-1]):  # L(M_4) = L* is drawn once, as L*
        ln = by_gid[f"theory/plateaus[{m}]"]
        np.testing.assert_allclose(ln.get_ydata(), [level, level], atol=5e-6)
        assert ln.get_linestyle() == ":" and ln.get_color() == loss.get_color()
    assert "theory/plateaus[4]" not in by_gid
    np.testing.assert_allclose(by_gid["theory/L_star"].get_ydata(), PLATEAUS[-1], atol=5e-6)
    # the population loss does sit on the first plateaus it visits
    y = np.asarray(loss.get_ydata())
    for level in PLATEAUS[1:3]:
        assert np.min(np.abs(y - level)) < 1e-3 * level
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "attn_s: plateaus L(M_m), m = 0..4" in legend
    assert "attn_s: L* (global minimum, population)" in legend
    assert ax.get_xlabel().startswith("t/τ (paper time")


def _two_msfr(tmp_path):
    t = np.geomspace(1e-2, 1e4, 60)
    return [
        fastdyn.load(make_run(tmp_path / f"{n}.h5", t,
                              {"loss/test": a * t**-0.5, "theory/loss/test": 1.1 * a * t**-0.5}))
        for n, a in (("a", 1.0), ("b", 3.0))
    ]  # fmt: skip


def test_labels_colours_and_paper_style(tmp_path):
    runs = _two_msfr(tmp_path)
    fig = plot.plot_loss(runs, tmp_path / "f.pdf", labels=["α = 2", "α = 3"], style="paper")
    ax, bx = fig.axes  # the residual panel below holds the time axis label
    assert tuple(fig.get_size_inches()) == pytest.approx((3.4, 2.6 * 1.3))  # one journal column
    assert (tmp_path / "f.pdf").read_bytes()[:5] == b"%PDF-"
    sim = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(sim) == {"α = 2", "α = 2: theory", "α = 3", "α = 3: theory"}
    assert sim["α = 2"].get_color() != sim["α = 3"].get_color()
    for name in ("α = 2", "α = 3"):  # each theory curve in its run's colour, dashed
        assert sim[f"{name}: theory"].get_color() == sim[name].get_color()
        assert sim[f"{name}: theory"].get_linestyle() == "--"
    assert ax.get_ylabel() == "test loss L_test (dimensionless)"
    assert bx.get_xlabel() == "t (gradient-flow time)"  # no /step: not a gd run, no η·step
    assert ax.get_title() == ""  # paper: no title unless given


def test_a_flat_loss_gets_a_few_plain_ticks(tmp_path):
    t = np.geomspace(1e-2, 1e4, 40)
    r = fastdyn.load(make_run(tmp_path / "flat.h5", t, {"loss/test": np.full(t.size, 1.0119)}))
    fig = plot.plot_loss([r], tmp_path / "flat.png")
    (ax,) = fig.axes
    lo, hi = ax.get_ylim()
    ticks = [tk for tk in ax.get_yticks() if lo <= tk <= hi]
    labels = [tk.get_text() for tk in ax.get_yticklabels() if tk.get_text()]
    assert lo < 1.0119 < hi and 2 <= len(ticks) <= 6
    assert labels and not any("×" in s or "10^" in s or "times" in s for s in labels)


def test_one_line_errors(attn_s, tmp_path):
    a, b = (r.path for r in _two_msfr(tmp_path))
    res = run_cli("plot", a, b, "-o", tmp_path / "x.png", "--label", "only one")
    assert res.exit_code == 2 and res.output.startswith(
        "fastdyn: error: --label: give one per file"
    )
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "x.png").exists()
    res = run_cli("plot", a, attn_s, "-o", tmp_path / "x.png", "--y", "loss/train")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    res = run_cli("plot", a, attn_s, "-o", tmp_path / "x.png")  # different time units
    assert res.exit_code == 2 and "different time units" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "x.png").exists()


def test_time_label_names_the_steps_only_for_runs_that_have_them(tmp_path):
    """An ODE run (dopri5, rk4) has no /step: its axis says gradient-flow time, not gd's η·step."""
    from fastdyn.analysis.labels import time_label

    t = np.geomspace(1e-2, 1e2, 8)
    ode = fastdyn.load(make_run(tmp_path / "ode.h5", t, {"loss/test": t**-0.5}))
    assert "step" not in ode and time_label([ode]) == "t (gradient-flow time)"
    r = CliRunner().invoke(
        main, ["-q", "simulate", "quickstart", "--set", 'solver.integrator="gd"', "--set",
               "solver.lr=0.01", "--set", "time.t_max=1", "--set", "task.n_tasks=2000",
               "--set", "time.n_times=5", "--set", "output.track=[1]", "-o", str(tmp_path / "gd.h5")],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    gd = fastdyn.load(tmp_path / "gd.h5")
    assert "step" in gd and time_label([gd]) == "t (gradient-flow time, η·step)"


def test_fit_of_an_icl_run_warns_that_its_losses_are_not_a_power_law(tmp_path):
    """The model declares what a power-law fit of its losses means (``ModelEntry.analysis.fit_note``); the
    MSFR models declare nothing and print no such line."""
    p = tmp_path / "icl.h5"
    r = CliRunner().invoke(
        main, ["-q", "simulate", "icl_fig1", "--set", "schedule.epochs=200", "-o", str(p)]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["fit", str(p), "--window", "all"])
    assert r.exit_code == 0, r.output
    assert "fastdyn: warning: attn-m losses go through plateaus and drops" in r.output
    m = tmp_path / "m.h5"
    r = CliRunner().invoke(
        main,
        [
            "-q",
            "simulate",
            "quickstart",
            "--set",
            "task.n_tasks=3000",
            "--set",
            "output.track=[1,10]",
            "-o",
            str(m),
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["fit", str(m)])
    assert r.exit_code == 0 and "plateaus and drops" not in r.output, r.output


def test_equal_levels_are_one_labelled_shared_line_and_the_legend_hides_no_data(tmp_path):
    """Two ATTN_M runs with the same L* (and their own train-set minima): L* is drawn once,
    labelled as shared by both; the legend lies outside the axes (no overlap of their boxes),
    in both styles."""
    t = np.geomspace(0.02, 12.0, 80)
    runs = []
    for n, tm in (("a", 0.125), ("b", 0.126)):
        path = make_run(
            tmp_path / f"{n}.h5", t, {"loss/train": tm + 0.8 / (1 + (t / 2.2) ** 8)},
            model="attn-m", config={"model": "attn-m", "data": {"D": 4, "N": 31}},
            static={"theory/L_star": np.array([0.136]), "theory/train_minimum": np.array([tm])},
        )  # fmt: skip
        runs.append(fastdyn.load(path))
    for style in ("default", "paper"):
        fig = plot.plot_loss(runs, tmp_path / f"{style}.png", style=style)
        ax = fig.axes[0]
        star = [ln for ln in ax.get_lines() if ln.get_gid() == "theory/L_star"]
        assert (
            len(star) == 1
            and star[0].get_label() == "a and b: L* (global minimum, population) (shared)"
        )
        own = [
            ln.get_label()
            for ln in ax.get_lines()
            if str(ln.get_gid()).startswith("theory/train_minimum")
        ]
        assert len(own) == 2 and all("shared" not in lb for lb in own), own
        leg = ax.get_legend() or fig.legends[0]
        fig.canvas.draw()
        assert not leg.get_window_extent().overlaps(ax.get_window_extent()), style
