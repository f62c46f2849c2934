"""The generic integrators' CUDA twins (``drive/integrate_soa_cuda.py``), built from the same task
source as the CPU kernels and from the plug-in's own ``@njit`` functions: each example plug-in
(``examples/logistic``, a scalar state, and ``examples/deep_linear``, two weight matrices of 12
numbers per task; neither has CUDA code) runs with ``device = "cuda"`` under numba's CUDA
simulator, in a subprocess with ``NUMBA_ENABLE_CUDASIM=1``, and every output equals the CPU run's
bit for bit (the simulator executes the same float64 operations in the same order; on a GPU the
compiler may fuse multiply-adds, a few ulp per step, which this test cannot see).

The CPU runs are made here, in the test process, whose generic CPU kernels for the plug-in are
shared with the other plug-in tests (compiled once per process); the CPU kernels' output does not
depend on the process or its thread count (tests/drive/test_integrate_soa_dopri5.py,
tests/engine/test_toy_model.py)."""

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

_COMMON = ["--set", "task.n_tasks=1030", "--set", "time.n_times=4", "--set", "time.t_max=5",
           "--set", "output.track=[1,7,1029]"]  # fmt: skip
#: per plug-in: 1030 tasks, two blocks of threads (deep-linear: 5 s rk4, 3 s dopri5 under the simulator here)
BASE = {
    "logistic": ["--set", "model=logistic", *_COMMON],
    "deep-linear": ["--set", "model=deep-linear", "--set", "task.d=3", "--set", "task.h=2",
                    "--set", "task.o=3", *_COMMON],
}  # fmt: skip
INTEGRATORS = {"rk4": ["--set", "solver.h=0.5"], "dopri5": ["--set", "solver.rtol=1e-6"]}


def _args(model: str, integ: str, dev: str, path) -> list[str]:
    return ["-q", "simulate", *BASE[model], *INTEGRATORS[integ], "--set",
            f"solver.integrator={integ}", "--set", f"device={dev}", "-o", str(path)]  # fmt: skip


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


@pytest.mark.parametrize("model", sorted(BASE))
def test_plugin_runs_on_the_cuda_twins_under_the_simulator_bit_identical_to_the_cpu(
    model, tmp_path
):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBA_NUM_THREADS="1")
    cuda_runs = [
        _args(model, integ, "cuda", tmp_path / f"{integ}-cuda.h5") for integ in INTEGRATORS
    ]
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(cuda_runs)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["dopri5", "rk4"], r.stdout
    for integ in INTEGRATORS:
        res = CliRunner().invoke(main, _args(model, integ, "cpu", tmp_path / f"{integ}-cpu.h5"))
        assert res.exit_code == 0, res.output
        a, b = (fastdyn.load(tmp_path / f"{integ}-{dev}.h5") for dev in ("cpu", "cuda"))
        assert a.config["device"] == "cpu" and b.config["device"] == "cuda"
        assert np.all(np.isfinite(b["tasks/f"])), integ
        for k in ("loss/test", "loss/train", "tasks/f"):
            assert np.array_equal(a[k], b[k]), (integ, k)  # measured: identical, every value
    steps = [fastdyn.load(tmp_path / f"dopri5-{dev}.h5").attrs.get("solver_steps") for dev in ("cpu", "cuda")]  # fmt: skip
    assert steps[0] == steps[1] > 0, steps


#: MSFR on the generic solver (its fast path off): rk4 at per-task steps with settling, gd, and
#: dopri5 with settling; 300 tasks and 4 output times to t = 0.5 (≤ 250 steps a task)
MSFR_GENERIC = ["--set", "task.n_tasks=300", "--set", "time.n_times=4", "--set", "time.t_max=0.5",
                "--set", "solver.fast_path=false", "--set", "solver.steps_per_timescale=8",
                "--set", "solver.lr=0.01", "--set", "output.track=[1,7,299]"]  # fmt: skip


QUICKSTART = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "data", "configs", "quickstart.toml",
)  # fmt: skip


def _msfr_args(integ: str, dev: str, path) -> list[str]:
    return ["-q", "simulate", QUICKSTART, *MSFR_GENERIC, "--set",
            f"solver.integrator={integ}", "--set", f"device={dev}", "-o", str(path)]  # fmt: skip


def test_generic_fixed_steps_run_msfr_on_the_cuda_twin_bit_identical_to_the_cpu(tmp_path):
    """The generic solver's options (per-task rk4 steps from MSFR's rate_scale, gd, the settling
    rule from its residual, also in dopri5) compiled for the device from the same source as the
    CPU kernels: every output and step count equals the CPU run's under the simulator."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBA_NUM_THREADS="1")
    integrators = ("rk4", "gd", "dopri5")
    runs = [_msfr_args(i, "cuda", tmp_path / f"{i}-cuda.h5") for i in integrators]
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(runs)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["dopri5", "fixed", "fixed"], r.stdout
    for integ in integrators:
        res = CliRunner().invoke(main, _msfr_args(integ, "cpu", tmp_path / f"{integ}-cpu.h5"))
        assert res.exit_code == 0, res.output
        a, b = (fastdyn.load(tmp_path / f"{integ}-{dev}.h5") for dev in ("cpu", "cuda"))
        assert a.attrs["solver_tasks"] == 300 and a.attrs["solver_steps"] > 0
        for k in ("loss/test", "loss/train", "tasks/f"):
            assert np.array_equal(a[k], b[k]), (integ, k)
        counts = {k: v for k, v in a.attrs.items() if k.startswith("solver_")}
        assert counts == {k: b.attrs[k] for k in counts}, integ
