"""msfr-h on the engine's one ODE contract (:class:`fastdyn.models.OdeMaths`): its setup hands over
maths only, so the engine's dopri5, its split run, sweeps and its CUDA twins (numba's simulator
here) serve it as they serve the example plug-ins.

References: scipy's DOP853 of the d-dim flow at rtol 1e-12 (tests/reference/msfr_h_reference.py)
and the CPU run itself for the CUDA twins, the split run and the sweep (which must equal it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.config import load_config
from fastdyn.drive.split import plan, run_split
from fastdyn.models import OdeMaths
from fastdyn.models.registry import get_model
from tests.reference import msfr_h_reference as ref
from tests.reliability.conftest import assert_same_series

#: 2500 tasks in 3 chunks of 1024 (the split run's unit), d = 3, a rank-2 H plus a perturbation
#: (so the closed form is only the leading order), random init, a few output times
WIDE = ["model=msfr-h", "task.n_tasks=2500", "task.psi0=4", "h.dim=3", "h.spectrum=[1, 1, 0]",
        'h.eigenvectors="random"', "h.perturbation=0.05", 'init.scheme="random"', "init.scale=0.01",
        "time.t_max=5", "time.n_times=10", "output.chunk_tasks=1024", "output.track=[1, 700, 2500]",
        "output.checkpoint_every=0", "output.times_per_segment=4", "solver.h=0.01"]  # fmt: skip
INTEGRATORS = {"rk4": [], "dopri5": ['solver.integrator="dopri5"', "solver.rtol=1e-8"]}


def _cli(*args: str) -> None:
    res = CliRunner().invoke(main, ["-q", *args])
    assert res.exit_code == 0, res.output


def _sets(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def test_setup_hands_over_maths_only():
    """The setup needs nothing from the driver (no ``tools``) and returns the one contract: the
    state (v, w) ∈ R^{2d} per task, the parameter block (#/N, Λ, P(s), H, μ, P0, Q0) and the RK4
    step resolved from 'auto'."""
    cfg = load_config(None, WIDE)
    m = get_model("msfr-h").setup(cfg, None)
    assert isinstance(m, OdeMaths) and m.n_state == 6 and m.n_tasks == 2500
    p, y0 = m.params(0, 1024), m.init(0, 1024)
    assert p.shape == (3 + 9 + 3, 1024) and y0.shape == (6, 1024)
    assert m.solver.h == 0.01 and m.solver.integrator == "rk4" and m.theory is not None
    auto = get_model("msfr-h").setup(load_config(None, [*WIDE, 'solver.h="auto"']), None)
    assert isinstance(auto.solver.h, float) and 0 < auto.solver.h < 1


@pytest.fixture(scope="module", params=sorted(INTEGRATORS))
def wide(request, tmp_path_factory):
    """(integrator, the single-process reference run of WIDE)."""
    p = tmp_path_factory.mktemp("wide") / f"{request.param}.h5"
    _cli("simulate", *_sets([*WIDE, *INTEGRATORS[request.param]]), "-o", str(p))
    return request.param, p


def test_split_run_is_bit_identical(wide, tmp_path):
    integ, reference = wide
    cfg = load_config(None, [*WIDE, *INTEGRATORS[integ]])
    assert plan(cfg, 3) == [(0, 1024), (1024, 1024), (2048, 452)]
    out = tmp_path / "split.h5"
    assert run_split(cfg, out, 3) == "complete"
    assert_same_series(fastdyn.load(reference), fastdyn.load(out))
    for k in ("solver_steps", "solver_rejected", "solver_failed"):
        assert fastdyn.load(out).attrs.get(k) == fastdyn.load(reference).attrs.get(k), k


def test_sweep_points_are_the_single_runs(wide, tmp_path):
    """A two-point sweep (ψ0 = 4, 8): each point equals the plain run of its config bit for bit
    (the point ψ0 = 4 is the reference run)."""
    integ, reference = wide
    sets = json.dumps([s for s in [*WIDE, *INTEGRATORS[integ]] if not s.startswith("model=")])
    (tmp_path / "sweep.toml").write_text(
        f'[sweep]\noutput = "out"\nsets = {sets}\n[base]\nmodel = "msfr-h"\n'
        "[grid]\ntask.psi0 = [4.0, 8.0]\n"
    )
    res = CliRunner().invoke(main, ["sweep", str(tmp_path / "sweep.toml"), "-o", str(tmp_path / "out")])  # fmt: skip
    assert res.exit_code == 0, res.output
    runs = sorted(fastdyn.load_many(tmp_path / "out"), key=lambda r: r.config["task"]["psi0"])
    assert [r.config["task"]["psi0"] for r in runs] == [4.0, 8.0]
    assert_same_series(fastdyn.load(reference), runs[0])
    other = tmp_path / "psi8.h5"
    _cli("simulate", *_sets([*WIDE, *INTEGRATORS[integ], "task.psi0=8"]), "-o", str(other))
    assert_same_series(fastdyn.load(other), runs[1])


def test_dopri5_matches_scipy_on_a_general_h(tmp_path):
    """A general (not idempotent-like) PSD H per task from h.file, where the closed form is only
    the leading order: the engine's dopri5 at rtol 1e-10 against scipy's DOP853 at rtol 1e-12.
    Measured max |Δf|: 9.3e-11, 7.2e-11, 2.9e-11 (tasks 1–3; f → Λ = 1); held to 1e-8, 100× the
    measured error (dopri5's global error at rtol 1e-10 is not bounded by rtol itself)."""
    rng = np.random.default_rng(5)
    n, d = 3, 3
    a = rng.standard_normal((n, d, d))
    m = np.einsum("nij,nkj->nik", a, a) / d  # per-task PSD matrices (units of κ_s)
    path = tmp_path / "h.npz"
    np.savez(path, H=m)
    sets = ["model=msfr-h", f"task.n_tasks={n}", "task.psi0=4", "output.track=[1, 2, 3]",
            f'h.file="{path}"', 'solver.integrator="dopri5"', "solver.rtol=1e-10",
            "time.t_max=30", "time.n_times=12"]  # fmt: skip
    out = tmp_path / "d5.h5"
    _cli("simulate", *_sets(sets), "-o", str(out))
    run = fastdyn.load(out)
    assert run.attrs["theory_exact"] == 0 and run.attrs["solver_failed"] == 0
    s = np.arange(1, n + 1)
    p = s**-2.0 / np.sum(s**-2.0)
    kappa = 4 * (1 + 1.0)  # ψ (1 + Λ²), Λ = 1
    errs = []
    for i in range(n):
        h = kappa * m[i]
        x1 = np.linalg.eigh(h)[1][:, -1]
        x1 = x1 * np.sign(x1[np.argmax(np.abs(x1))])  # balanced init: largest entry positive
        want = ref.f_curve(h, 1.0, p[i], 1e-3 * x1, 1e-3 * x1, run.time)
        errs.append(float(np.max(np.abs(run["tasks/f"][:, i] - want))))
    assert max(errs) <= 1e-8, errs
    assert np.max(np.abs(run["tasks/f"][-1] - 1.0)) < 0.5  # the tasks rise: f is not trivially 0


#: the CUDA simulator case: 130 tasks (two blocks of 128 threads), d = 3, a few steps per task
SIM = ["model=msfr-h", "task.n_tasks=130", "task.psi0=4", "h.dim=3", "h.spectrum=[1, 0.5, 0]",
       'h.eigenvectors="random"', 'init.scheme="random"', "init.scale=0.1", "time.t_max=2",
       "time.n_times=4", "output.track=[1, 7, 129]", "output.checkpoint_every=0"]  # fmt: skip
SIM_INTEGRATORS = {"rk4": ["solver.h=0.1"], "dopri5": ['solver.integrator="dopri5"', "solver.rtol=1e-6"]}  # fmt: skip

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from click.testing import CliRunner
    from fastdyn.cli import main

    for args in json.loads(sys.argv[1]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
    from fastdyn.drive import integrate_soa_cuda  # the twins ran: one kernel per integrator
    print(json.dumps(sorted(k[0] for k in integrate_soa_cuda._KERNELS)))
    """
)


def test_cuda_twins_under_the_simulator_equal_the_cpu(tmp_path):
    """``device = "cuda"`` runs the engine's CUDA twins on msfr-h's own functions (compiled as
    device functions from their source) in a subprocess with NUMBA_ENABLE_CUDASIM=1: every
    output within 1e-10 relative of the CPU run, and dopri5 takes the same steps. Measured: equal
    bit for bit (the simulator runs the same float64 operations in the same order; on a GPU
    fused multiply-adds would move them by a few ulp per step)."""

    def args(integ: str, dev: str) -> list[str]:
        sets = [*SIM, *SIM_INTEGRATORS[integ], f"device={dev}"]
        return ["-q", "simulate", *_sets(sets), "-o", str(tmp_path / f"{integ}-{dev}.h5")]

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBA_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps([args(i, "cuda") for i in SIM_INTEGRATORS])],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["dopri5", "rk4"], r.stdout
    for integ in SIM_INTEGRATORS:
        _cli(*args(integ, "cpu")[1:])
        a, b = (fastdyn.load(tmp_path / f"{integ}-{dev}.h5") for dev in ("cpu", "cuda"))
        assert a.config["device"] == "cpu" and b.config["device"] == "cuda"
        assert np.all(np.isfinite(b["tasks/f"])) and np.max(np.abs(b["tasks/f"][-1])) > 0.05
        for k in ("loss/test", "loss/train", "tasks/f"):
            x, y = a[k], b[k]
            assert np.all(np.abs(x - y) <= 1e-10 * np.maximum(np.abs(x), np.abs(y))), (integ, k)
    steps = [fastdyn.load(tmp_path / f"dopri5-{dev}.h5").attrs.get("solver_steps") for dev in ("cpu", "cuda")]  # fmt: skip
    assert steps[0] == steps[1] > 0, steps
