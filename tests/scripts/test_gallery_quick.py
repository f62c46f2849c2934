"""The gallery scripts (scripts/msfr_*.py, scripts/icl_*.py) at their --quick sizes, so they cannot rot.

Each script is run in-process (its ``main(argv)``; one numba JIT warm-up for all) with ``--quick``
into a temporary folder, and every key number it reports is checked against its theory at the
tolerance the script attaches to it for the quick size. The tolerances and their justification
(finite task count, fit window, finite P, time-grid resolution, population exactness) are written
beside each ``g.row(...)`` in the scripts; rows without a theory (``kind = "info"``: softmax,
cumulative loss, ICL/IWL numbers) are only required to be finite.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
NAMES = [
    "msfr_time",
    "msfr_resources",
    "msfr_tasks",
    "msfr_families",
    "msfr_attention",
    "msfr_noise",
    "msfr_h",
    "msfr_attn_laws",
    "msfr_source_capacity",
    "icl_fig1",
    "icl_fig3",
    "icl_fig4",
    "icl_fig13",
    "icl_fig14",
    "icl_fig9",
    "icl_fig12",
    "icl_variants",
]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gallery_{name}", SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", NAMES)
def test_quick(name: str, tmp_path: Path) -> None:
    vector = ["--vector", "pdf"] if name == "icl_fig1" else []  # PDF beside the PNG, on request
    summary = _load(name).main(["--quick", "--out", str(tmp_path), *vector])
    if vector:
        assert (tmp_path / "icl_fig1.pdf").read_bytes()[:5] == b"%PDF-"
    assert summary["quick"] is True
    assert len(json.loads((tmp_path / "summary.json").read_text())["rows"]) == len(summary["rows"])
    rows = summary["rows"]
    assert rows, f"{name}: no key numbers reported"
    bad = [r for r in rows if r["ok"] is False]
    assert not bad, f"{name}: outside tolerance: " + "; ".join(
        f"{r['name']}: {r['measured']:.6g} vs {r['theory']:.6g} (tol {r['tol']:g} {r['kind']})"
        for r in bad
    )
    assert all(math.isfinite(r["measured"]) for r in rows), f"{name}: a non-finite key number"
    for png in summary["pngs"]:
        assert Path(png).stat().st_size > 1000
