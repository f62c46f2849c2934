"""Named task families (task.frequency_law, task.strength_law): values are the formulas, a table
written from the formulas reproduces the family run bit for bit, the ODE follows the closed form,
1 and 2 threads agree bit for bit, bad parameters are one-line errors."""

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.config import load_config
from fastdyn.models.msfr.problem import MsfrProblem
from fastdyn.problems import rng
from tests._threads import assert_bit_identical, outputs_per_thread_count

N = 3000  # not a multiple of the 1024-task block
RUN = ["time.t_max=1e6", "time.n_times=24", "theory.level=exact", f"task.n_tasks={N}"]
EXP = ["task.strength_law=exponential", "task.strength_decay=400", "task.strength0=2"]
BROKEN_P = [
    "task.frequency_law=broken-power",
    "task.alpha=1.2",
    "task.alpha2=2.5",
    "task.frequency_break=30",
]
LOGN = ["task.strength_law=lognormal", "task.strength_sigma=0.7", "task.gamma=0.2", "seed=5"]


def naive(n, sets, seed=0):
    """P (unnormalised), Λ, ψ of tasks 1..n typed in from docs/task-tables.md (numpy; the
    lognormal draws from the kernel's rng.normal, one task at a time)."""
    kv = dict(a.split("=", 1) for a in sets)
    g = lambda k, d: float(kv.get("task." + k, d))  # noqa: E731
    s = np.arange(1, n + 1, dtype=np.float64)
    law = kv.get("task.frequency_law", "power")
    if law == "exponential":
        w = np.exp(-(s - 1) / g("frequency_decay", 100))
    elif law == "broken-power":
        a, a2, sb = g("alpha", 2), g("alpha2", 2), g("frequency_break", 100)
        w = np.where(s <= sb, s**-a, sb ** (a2 - a) * s**-a2)
    else:
        w = s ** -g("alpha", 2)
    law = kv.get("task.strength_law", "power")
    lam0 = g("strength0", 1)
    if law == "exponential":
        lam = lam0 * np.exp(-(s - 1) / g("strength_decay", 100))
    elif law == "broken-power":
        gm, g2, sb = g("gamma", 0), g("gamma2", 1), g("strength_break", 100)
        lam = lam0 * np.where(s <= sb, s**-gm, sb ** (g2 - gm) * s**-g2)
    elif law == "lognormal":
        z = np.array([rng.normal(seed, i, 9, 0) for i in range(n)])
        lam = lam0 * s ** -g("gamma", 0) * np.exp(g("strength_sigma", 1) * z)
    else:
        lam = lam0 * s ** -g("gamma", 0)
    psi = np.maximum(1, np.floor(100.0 * s**-0.0 + 0.5))
    return {"weight": w, "strength": lam, "psi": psi}


@pytest.mark.parametrize("sets", [EXP, BROKEN_P, LOGN, ["task.frequency_law=exponential", "task.frequency_decay=50", "task.strength_law=broken-power", "task.gamma=0.1", "task.gamma2=1.5", "task.strength_break=200"]])  # fmt: skip
def test_family_values_are_the_formulas_in_any_chunking(sets):
    cfg = load_config(None, [f"task.n_tasks={N}", *sets])
    p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    ref = naive(N, sets, cfg.seed)
    whole = p.chunk(0, N)
    np.testing.assert_allclose(whole.lam, ref["strength"], rtol=1e-14)
    np.testing.assert_allclose(whole.wtest, ref["weight"] / ref["weight"].sum(), rtol=1e-13)
    np.testing.assert_array_equal(whole.psi, ref["psi"])
    parts = [p.chunk(f, min(1024, N - f)) for f in range(0, N, 1024)]
    for k in ("lam", "wtest", "psi", "v0y"):
        assert (
            np.concatenate([getattr(c, k) for c in parts]).tobytes() == getattr(whole, k).tobytes()
        ), k


def test_lognormal_strengths_are_lognormal_about_the_median():
    cfg = load_config(
        None,
        [
            "task.n_tasks=20000",
            "task.strength_law=lognormal",
            "task.strength_sigma=0.5",
            "task.strength0=3",
        ],
    )
    lam = MsfrProblem(cfg.task, cfg.init, cfg.seed).chunk(0, 20000).lam
    z = np.log(lam / 3.0) / 0.5  # N(0, 1): mean 0 ± 0.007 (1 s.d.), s.d. 1 ± 0.005
    assert abs(z.mean()) < 0.04 and abs(z.std() - 1) < 0.03


def simulate(path, *sets):
    args = [a for s in (*RUN, *sets) for a in ("--set", s)]
    return CliRunner().invoke(main, ["simulate", *args, "-o", str(path), "--overwrite"])


def datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None
        )
    return out


@pytest.mark.parametrize(
    "sets, extra",
    [(EXP, ["solver.integrator=dopri5", "task.model_size=2500"]),
     (LOGN + BROKEN_P, ["solver.integrator=rk4", "task.n_samples=200000"])],
)  # fmt: skip
def test_a_table_of_the_family_reproduces_the_family_run_bit_for_bit(tmp_path, sets, extra):
    res = simulate(tmp_path / "a.h5", *sets, *extra)
    assert res.exit_code == 0, res.output
    seed = int(dict(a.split("=") for a in sets).get("seed", 0))
    table = str(tmp_path / "t.npz")
    tab = naive(N, sets, seed)
    # the family's own strengths: its lognormal z_s is numpy's Box–Muller, the reference's the
    # kernel's (libm); on AVX-512 machines numpy's SIMD log/cos differ from libm in the last bit
    # (2 of 3000 tasks here). test_family_values_are_the_formulas_in_any_chunking holds them to
    # 1e-14; this test is about the table path reproducing the family's values bit for bit.
    cfg = load_config(None, [f"task.n_tasks={N}", *sets])
    tab["strength"] = MsfrProblem(cfg.task, cfg.init, cfg.seed).chunk(0, N).lam
    np.savez(table, **tab)
    keep = [a for a in sets if a.startswith("seed=")]
    res = simulate(tmp_path / "b.h5", f"task.table='{table}'", *keep, *extra)
    assert res.exit_code == 0, res.output
    a, b = datasets(tmp_path / "a.h5"), datasets(tmp_path / "b.h5")
    assert sorted(a) == sorted(b) and {"loss/test", "theory/loss/test", "tasks/f"} <= set(a)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k
    # the ODE follows the exact closed form (dopri5 rtol 1e-8; rk4 at 200 steps per timescale)
    tol = 1e-6 if "solver.integrator=dopri5" in extra else 1e-5
    np.testing.assert_allclose(a["loss/test"], a["theory/loss/test"], rtol=tol)
    np.testing.assert_allclose(a["tasks/f"], a["theory/tasks/f"], atol=tol)
    assert np.ptp(a["loss/test"]) > 0.1 * a["loss/test"][0]  # the run learned something


_THREADS = """
from fastdyn.config import load_config
from fastdyn.models.msfr.problem import MsfrProblem
cfg = load_config(None, ["task.n_tasks=20000", "task.strength_law=lognormal", "task.frequency_law=exponential",
                         "task.frequency_decay=700", "task.n_samples=100000", "task.model_size=9000"])
p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
ch = p.chunk(0, 9000)
OUT["z"] = np.array([p.z])
OUT["tail"] = np.array(p.tail_losses(4096))
for k in ("lam", "wtest", "rate", "v0x"):
    OUT[k] = getattr(ch, k)
"""


def test_one_and_two_threads_are_bit_identical(tmp_path):
    """The normaliser (fixed-order block sums), the chunk tables, counts and tail losses."""
    assert_bit_identical(outputs_per_thread_count(_THREADS, tmp_path))


@pytest.mark.parametrize(
    "sets, expect",
    [
        (["task.strength_law=cubic"], "task.strength_law: must be one of 'power', 'exponential', 'broken-power', 'lognormal', got 'cubic'"),
        (["task.strength_law=exponential", "task.strength_decay=0"], "task.strength_decay: must be a finite number > 0"),
        (["task.strength_law=exponential", "task.gamma=0.5"], "task.gamma: not used with task.strength_law = 'exponential'"),
        (["task.strength_sigma=0.5"], "task.strength_sigma: not used with task.strength_law = 'power'"),
        (["task.frequency_law=exponential", "task.alpha=1.5"], "task.alpha: not used with task.frequency_law = 'exponential'"),
        (["task.alpha2=3"], "task.alpha2: not used with task.frequency_law = 'power'"),
        (["task.strength_law=exponential", "task.strength_decay=3"], "task.strength_decay: Λ_s = Λ0 e^-(s−1)/s0 gives Λ_s = 0 at s = 3000"),
        (["task.table='t.npz'", "task.strength_law=lognormal"], "task.strength_law: not used with task.table"),
        (["task.frequency_break=0.5"], "task.frequency_break: must be a finite number ≥ 1"),
    ],
)  # fmt: skip
def test_bad_family_parameters_are_one_line_errors(tmp_path, sets, expect):
    out = tmp_path / "o.h5"
    res = simulate(out, *sets)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and expect in lines[0], res.output
    assert lines[0].startswith("fastdyn: error: task.") and not out.exists()


def test_msfr_attn_trains_on_a_family(tmp_path):
    sets = ["model=msfr-attn", "task.n_tasks=300", "task.n_samples=3000", "task.model_size=60", "task.psi0=10",
            "task.strength_law=exponential", "task.strength_decay=30", "schedule.epochs=50", "schedule.n_saves=5",
            "optim.lr=0.02", "init.scale=0.05"]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    res = CliRunner().invoke(main, ["simulate", *args, "-o", str(tmp_path / "a.h5")])
    assert res.exit_code == 0, res.output
    with h5py.File(tmp_path / "a.h5") as f:
        lam = f["tasks/lambda"][()] if "tasks/lambda" in f else None
        loss = f["loss/test"][()]
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]
    if lam is not None:
        np.testing.assert_allclose(
            lam, 1.0 * np.exp(-(np.arange(1, lam.size + 1) - 1) / 30), rtol=1e-14
        )


def test_resolved_configs_round_trip_through_toml(tmp_path):
    """Sweeps, splits and resumes rebuild a run from its resolved config (every key written): a
    family's unused parameters and a table's replaced fields are written at their defaults."""
    import tomllib

    from fastdyn.config import from_dict, to_toml

    table = str(tmp_path / "t.npz")
    np.savez(table, **naive(100, []))
    for sets in (LOGN + BROKEN_P, [f"task.table='{table}'"], []):
        cfg = load_config(None, sets)
        assert from_dict(tomllib.loads(to_toml(cfg))) == cfg
