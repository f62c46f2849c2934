"""The generic integrators' CUDA twins (``drive/integrate_soa_cuda.py``), built from the same task
source as the CPU kernels and from the plug-in's own ``@njit`` functions: the example plug-in
(``examples/logistic``, which has no CUDA code) runs with ``device = "cuda"`` under numba's CUDA
simulator, in a subprocess with ``NUMBA_ENABLE_CUDASIM=1``, and every output equals the CPU run's
bit for bit (the simulator executes the same float64 operations in the same order; on a GPU the
compiler may fuse multiply-adds, a few ulp per step, which this test cannot see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import json, sys, tempfile, os
    import numpy as np
    import fastdyn
    from click.testing import CliRunner
    from fastdyn.cli import main

    base = ["--set", "model=logistic", "--set", "task.n_tasks=1030", "--set", "time.n_times=4",
            "--set", "time.t_max=5", "--set", "output.track=[1,7,1029]"]
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for integ, extra in (("rk4", ["--set", "solver.h=0.5"]), ("dopri5", ["--set", "solver.rtol=1e-6"])):
            runs = {}
            for dev in ("cpu", "cuda"):
                p = os.path.join(d, f"{integ}-{dev}.h5")
                r = CliRunner().invoke(main, ["-q", "simulate", *base, *extra, "--set",
                    f"solver.integrator={integ}", "--set", f"device={dev}", "-o", p])
                assert r.exit_code == 0, r.output
                runs[dev] = fastdyn.load(p)
            a, b = runs["cpu"], runs["cuda"]
            out[integ] = {
                "same": all(np.array_equal(a[k], b[k]) for k in ("loss/test", "loss/train", "tasks/f")),
                "finite": bool(np.all(np.isfinite(b["tasks/f"]))),
                "steps": [a.attrs.get("solver_steps"), b.attrs.get("solver_steps")],
                "device": b.config["device"],
            }
    from fastdyn.drive import integrate_soa_cuda  # the twins ran: one kernel per integrator
    out["cuda_kernels"] = sorted(k[0] for k in integrate_soa_cuda._KERNELS)
    print(json.dumps(out, default=int))
    """
)


def test_plugin_runs_on_the_cuda_twins_under_the_simulator_bit_identical_to_the_cpu():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBA_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for integ in ("rk4", "dopri5"):
        assert got[integ]["device"] == "cuda" and got[integ]["finite"], got
        assert got[integ]["same"], got  # measured: identical, every value
    assert got["dopri5"]["steps"][0] == got["dopri5"]["steps"][1] > 0, got
    assert got["cuda_kernels"] == ["dopri5", "rk4"], got
