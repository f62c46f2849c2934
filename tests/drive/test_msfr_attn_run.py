"""msfr-attn end to end: the same discrete map as msfr-core gd, the closed form, the variants."""

import subprocess
import sys

import h5py
import numpy as np
import pytest

from fastdyn.config.load import from_dict
from fastdyn.config.schema import ConfigError
from fastdyn.drive.msfr_attn_run import run_msfr_attn


def _run(tmp_path, name="r.h5", **sections):
    data = {"model": "msfr-attn", "seed": 1}
    for sec, kv in sections.items():
        data[sec] = kv
    cfg = from_dict(data)
    out = tmp_path / name
    status = run_msfr_attn(cfg, out)
    assert status == "complete"
    with h5py.File(out, "r") as f:
        keys = (
            "time",
            "loss/test",
            "loss/train",
            "tasks/f",
            "tasks/index",
            "theory/loss/test",
            "ode/loss/test",
            "ode/tasks/f",
        )
        return {k: f[k][()] for k in keys if k in f} | {"attrs": dict(f.attrs)}


def test_same_map_as_msfr_core_gd_and_closed_form(tmp_path):
    """Acceptance 2: Rademacher, block, merged, GD: f_s equals msfr-core gd to 1e-10 and L_test
    the closed form within 1% (η small; N_s = 1e4)."""
    r = _run(
        tmp_path,
        task={"n_tasks": 10_000, "n_samples": 20_000, "psi0": 5},
        init={"scale": 0.02},
        optim={"name": "gd", "lr": 0.001},  # 2 a_1 Λ η ≈ 0.012
        schedule={"epochs": 3000, "n_saves": 20},
        output={"track": [1, 2, 3, 5, 10, 30, 100]},
    )
    assert np.max(np.abs(r["tasks/f"] - r["ode/tasks/f"])) <= 1e-10  # the same discrete map
    assert np.max(np.abs(r["loss/test"] - r["ode/loss/test"])) <= 1e-10
    rel = np.abs(r["loss/test"] / r["theory/loss/test"] - 1)
    print("closed-form max rel error", rel.max())
    assert rel.max() <= 0.01, rel.max()  # O(η) gd-vs-flow error (measured: see report)
    assert r["loss/test"][-1] < 0.5 * r["loss/test"][0]  # it did learn


def test_gaussian_gap_shrinks_with_psi(tmp_path):
    """Acceptance 3: max gap |L_gauss − L_rad| / L(0) of the Gaussian-x test curve to the Rademacher one at ψ = 5, 20, 80."""
    gaps = []
    for psi in (5, 20, 80):
        common = dict(
            init={"scale": 0.05},
            optim={"lr": 0.5 / psi},
            schedule={"epochs": 400, "n_saves": 12},
            theory={"compare": False},
        )
        rr = _run(
            tmp_path, f"r{psi}.h5", task={"n_tasks": 50, "n_samples": 4000, "psi0": psi}, **common
        )
        rg = _run(
            tmp_path,
            f"g{psi}.h5",
            task={"n_tasks": 50, "n_samples": 4000, "psi0": psi, "x_dist": "gaussian"},
            **common,
        )
        gaps.append(
            np.max(np.abs(rg["loss/test"] - rr["loss/test"])) / rr["loss/test"][0]
        )  # max |ΔL| / L(0)
    print("gaussian gaps", gaps)
    assert gaps[0] > gaps[1] > gaps[2]


@pytest.mark.slow  # ~2 min on the shared 2-core machine
def test_shared_embedding_trains_and_coupling(tmp_path):
    """Acceptance 4: shared embedding reaches f_s → Λ_s; the coupling (one shared label value
    weight) changes the per-task curves against block embedding."""
    kw = dict(
        task={"n_tasks": 20, "n_samples": 5000, "psi0": 10},
        init={"scale": 0.05},
        optim={"lr": 0.08},
        schedule={"epochs": 1500, "n_saves": 30},
        output={"track": [1, 2, 5, 10]},
    )
    rb = _run(tmp_path, "b.h5", **kw)
    rs = _run(tmp_path, "s.h5", attention={"embedding": "shared"}, **kw)
    assert np.max(np.abs(rs["tasks/f"][-1] - 1.0)) < 1e-3  # Λ = 1 for every task (γ = 0)
    coupling = np.max(np.abs(rs["tasks/f"] - rb["tasks/f"]), axis=0)
    print(
        "coupling max|f_shared - f_block| per tracked task",
        dict(zip(rs["tasks/index"].tolist(), coupling.tolist(), strict=True)),
    )
    assert coupling.max() > 1e-3


@pytest.mark.parametrize(
    "kq,softmax,optim",
    [("separate", False, "adamw"), ("merged", True, "adamw"), ("merged", True, "gd")],
)
def test_variants_complete(tmp_path, kq, softmax, optim):
    r = _run(tmp_path, task={"n_tasks": 30, "n_samples": 2000, "psi0": 8}, init={"scale": 0.05}, attention={"kq": kq, "rank": 2, "softmax": softmax},
             optim={"name": optim, "lr": 0.01, "weight_decay": 1e-4 if optim == "adamw" else 0.0}, schedule={"epochs": 300, "n_saves": 8})  # fmt: skip
    assert np.all(np.isfinite(r["loss/test"])) and r["loss/test"][-1] < r["loss/test"][0]


def test_dense_variant_runs(tmp_path):
    r = _run(
        tmp_path,
        task={"n_tasks": 8, "n_samples": 500, "psi0": 6},
        data={"feature_noise": 0.05, "n_test": 2000},
        optim={"lr": 0.05},
        schedule={"epochs": 200, "n_saves": 5},
    )
    assert r["attrs"]["test_loss_method"] == "heldout" and r["loss/test"][-1] < r["loss/test"][0]


@pytest.mark.parametrize(
    "sections,field",
    [({"task": {"n_samples": "inf"}}, "task.n_samples"), ({"attention": {"kq": "both"}}, "attention.kq"),
     ({"data": {"feature_noise": 0.1}, "task": {"n_tasks": 50, "model_size": 10, "n_samples": 100}}, "task.model_size"),
     ({"optim": {"lr": -1}}, "optim.lr")],
)  # fmt: skip
def test_config_errors_name_the_field(sections, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        from_dict({"model": "msfr-attn", **sections})


def test_cli_user_error_exits_2(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('model = "msfr-attn"\n[attention]\nembedding = "dense"\n')
    res = subprocess.run(
        [sys.executable, "-m", "fastdyn", "simulate", str(p), "-o", str(tmp_path / "o.h5")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "attention.embedding" in res.stderr
