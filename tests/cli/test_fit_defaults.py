"""``fastdyn fit FILE`` with defaults means something for every model and exits 0 on every shipped
config: plateaus and drops for models that declare reference levels, a power law where the
automatic window finds one, else "no power-law range" with the agreement with the closed form."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.models.registry import get_model
from tests.analysis.test_load import make_run

ROOT = Path(__file__).resolve().parents[2]
#: plateau levels of the synthetic saddle-to-saddle curve; the last is also its L*
LEVELS = np.array([1.0, 0.6, 0.35, 0.2])
#: drop centres t_k (a logistic in ln t of width W around each)
CENTRES = np.array([10.0, 30.0, 90.0])
W = 0.02


def _fit(*args: str):
    return CliRunner().invoke(main, ["fit", *args])


def _saddles(t: np.ndarray) -> np.ndarray:
    """ℓ_0 minus a logistic drop of ℓ_k − ℓ_{k+1} centred at t_k (in ln t, width W)."""
    L = np.full_like(t, LEVELS[0])
    for k, c in enumerate(CENTRES):
        L -= (LEVELS[k] - LEVELS[k + 1]) / (1.0 + np.exp(-(np.log(t) - np.log(c)) / W))
    return L


def test_levels_report_finds_each_plateau_and_drop(tmp_path):
    t = np.geomspace(1.0, 1000.0, 3001)  # grid ratio 1.0023
    path = make_run(
        tmp_path / "s.h5", t, {"loss/train": _saddles(t)}, model="attn-s",
        config={"model": "attn-s", "data": {"D": 3, "N": 31}},
        static={"theory/plateaus": LEVELS, "theory/L_star": np.array([0.1])},
    )  # fmt: skip
    res = _fit(str(path), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["kind"] == "levels" and d["y"] == "loss/train"
    names = [lv["name"] for lv in d["levels"]]
    assert names == ["plateaus[0]", "plateaus[1]", "plateaus[2]", "plateaus[3]", "L_star"]
    ratio = t[1] / t[0]
    for k, lv in enumerate(d["levels"][:4]):
        # between drops the curve sits on its level: the logistics' tails there are ≤ e^{-ln√3/W} ≈ 1e-12
        assert lv["closest"] < 1e-9 and abs(lv["plateau"] / LEVELS[k] - 1) < 1e-9, lv
        # the plateau on it lies between the drops' centres (its slope ≤ 0.05 there)
        lo, hi = lv["span"]
        assert (k == 0 or CENTRES[k - 1] < lo) and (k == 3 or hi < CENTRES[k]), (k, lv["span"])
    assert d["levels"][4]["span"] is None  # L* = 0.1 is never reached
    assert any("L_star" in w for w in d["warnings"])
    # drop k: at the midpoint crossing L = √(ℓ_k ℓ_{k+1}): the logistic's fraction
    # q = (ℓ_k − √(ℓ_k ℓ_{k+1}))/(ℓ_k − ℓ_{k+1}), reached at ln t = ln t_k + W ln(q/(1 − q))
    drops = [(x["from"], x["to"], x["t"]) for x in d["drops"]]
    assert [(a, b) for a, b, _ in drops] == [
        (f"plateaus[{k}]", f"plateaus[{k + 1}]") for k in range(3)
    ]
    for k, ((_a, _b, td), c) in enumerate(zip(drops, CENTRES, strict=True)):
        hi_, lo_ = LEVELS[k], LEVELS[k + 1]
        q = (hi_ - np.sqrt(hi_ * lo_)) / (hi_ - lo_)
        want = c * np.exp(W * np.log(q / (1 - q)))
        assert want / ratio <= td <= want * ratio, (td, want)
    # the text names the levels and drops; an explicit window still fits a power law
    res = _fit(str(path))
    assert res.exit_code == 0 and "plateaus and drops" in res.stdout and "drops " in res.stdout
    res = _fit(str(path), "--window", "2:900", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["kind"] == "power law", res.output


def test_no_power_law_range_reports_the_agreement_with_theory(tmp_path):
    """A loss with steps (few tasks) has no power-law range: exit 0 with the reason and
    max/median |L/θ − 1| over the points above the round-off floor."""
    t = np.geomspace(0.01, 200.0, 120)
    theory = 1.0 / (1.0 + np.exp(4 * (np.log(t) - 1.0))) + 1e-3 / (1 + np.exp(4 * (np.log(t) - 4)))
    theory[-10:] = 1e-30  # the closed form goes on down ...
    eps = 1e-4 * np.sin(np.arange(t.size)) ** 2
    eps[50] = 3e-3  # the largest deviation, at t[50]
    sim = theory * (1 + eps)
    sim[-10:] = 1e-20  # ... while the run flattens at its round-off
    path = make_run(tmp_path / "h.h5", t, {"loss/test": sim, "theory/loss/test": theory},
                    model="msfr-h", config={"model": "msfr-h"})  # fmt: skip
    res = _fit(str(path), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["kind"] == "no power law" and "--window LO:HI" in d["reason"]
    a = d["agreement"]
    assert a["n_points"] == t.size - 10  # the 10 points below 1e-13 of the maximum left out
    assert a["max_rel"] == pytest.approx(3e-3, rel=1e-12) and a["t_max"] == pytest.approx(t[50])
    assert a["median_rel"] == pytest.approx(np.median(eps[:-10]), rel=1e-9)
    res = _fit(str(path))
    assert (
        res.exit_code == 0 and "no power-law range" in res.stdout and "max 3.00e-03" in res.stdout
    )


def _reduced(config: Path) -> list[str]:
    model = tomllib.loads(config.read_text()).get("model", "msfr")
    return [a for s in get_model(model).warmup.sizes for a in ("--set", s)]


@pytest.mark.parametrize(
    "config", sorted((ROOT / "data" / "configs").glob("*.toml")), ids=lambda p: p.stem
)
def test_fit_with_defaults_exits_0_on_every_shipped_config(config, tmp_path):
    """Every shipped config, at its model's warm-up sizes (a few steps): ``fit`` with defaults
    exits 0 and says which analysis it made."""
    out = tmp_path / "run.h5"
    res = CliRunner().invoke(
        main, ["-q", "simulate", str(config), *_reduced(config), "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    res = _fit(str(out), "--bootstrap", "0", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["kind"] in ("levels", "power law", "no power law")
