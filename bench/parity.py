"""Speed parity of two fastdyn checkouts on the same machine, in one run: every case below is run
by both, alternating (A B B A A B …), and the medians of the in-run ``timings.total`` (seconds,
the file's root attribute: the run without process start-up) and of the process wall time are
compared. Use it to check that a refactor of the engine costs nothing.

    NUMBA_NUM_THREADS=1 python bench/parity.py --base /path/to/base/.venv/bin/python --head .venv/bin/python [--repeats 5]

Each interpreter must have its own checkout installed (``pip install -e``), so each sees its own
models' entry points. The first run of each case in each checkout compiles (it is not timed). The
ratio is head ÷ base (> 1: the head is slower); ``cpu`` is the child's user + system CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import h5py

#: (label, fastdyn CLI arguments after ``simulate``): the ODE integrators and the closed form of
#: MSFR, msfr-h, the three trained ICL shapes, msfr-attn and the example plug-ins when installed
CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("msfr dopri5 2e5 tasks", ("quickstart", "--set", "task.n_tasks=200000", "--set", "output.track=[1,10,100]")),
    ("msfr rk4 2e5 tasks", ("quickstart", "--set", "task.n_tasks=200000", "--set", "output.track=[1,10,100]", "--set", "solver.integrator='rk4'")),
    ("msfr gd 2e4 tasks", ("quickstart", "--set", "task.n_tasks=20000", "--set", "output.track=[1,10,100]", "--set", "solver.integrator='gd'", "--set", "solver.lr=0.01", "--set", "time.t_max=100")),
    ("msfr closed form 2e6 tasks", ("quickstart", "--set", "task.n_tasks=2000000", "--set", "output.track=[1,10,100]", "--set", "solver.integrator='none'")),
    ("msfr rk4 generic 5e4 tasks", ("quickstart", "--set", "task.n_tasks=50000", "--set", "output.track=[1,10,100]", "--set", "solver.integrator='rk4'", "--set", "solver.fast_path=false")),
    ("msfr dopri5 generic 5e4 tasks", ("quickstart", "--set", "task.n_tasks=50000", "--set", "output.track=[1,10,100]", "--set", "solver.fast_path=false")),
    ("msfr-h dopri5", ("msfr_h",)),
    ("icl fig1, 2001 epochs", ("icl_fig1", "--set", "schedule.epochs=2001")),
    ("msfr-attn quick", ("msfr_attn_quick",)),
)  # fmt: skip


def _run(python: str, args: tuple[str, ...], out: str) -> tuple[float, float, float]:
    """(in-run total s, process wall s, child CPU s) of one ``fastdyn simulate`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [python, "-m", "fastdyn", "-q", "simulate", *args, "-o", out, "--overwrite"],
        check=True,
        env=os.environ | {"PYTHONWARNINGS": "ignore"},
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with h5py.File(out, "r") as f:
        total = json.loads(f.attrs["timings"])["total"]
    return float(total), wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="python of the base checkout's environment")
    p.add_argument("--head", required=True, help="python of the head checkout's environment")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", default="", help="run the cases whose label contains this text")
    a = p.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}; {a.repeats} alternating repeats per case")
    print(
        f"{'case':32s} {'base total':>11s} {'head total':>11s} {'ratio':>7s} {'wall ratio':>11s} {'cpu ratio':>10s}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for label, args in CASES:
            if a.only not in label:
                continue
            out = os.path.join(tmp, "run.h5")
            pythons = {"base": a.base, "head": a.head}
            for py in pythons.values():  # compile, untimed
                _run(py, args, out)
            got: dict[str, list[tuple[float, float, float]]] = {"base": [], "head": []}
            for r in range(a.repeats):
                order = ("base", "head") if r % 2 == 0 else ("head", "base")
                for who in order:
                    got[who].append(_run(pythons[who], args, out))
            med = {
                who: [statistics.median(x[i] for x in runs) for i in range(3)]
                for who, runs in got.items()
            }
            b, h = med["base"], med["head"]
            print(
                f"{label:32s} {b[0]:10.3f}s {h[0]:10.3f}s {h[0] / b[0]:7.3f} {h[1] / b[1]:11.3f} {h[2] / b[2]:10.3f}",
                flush=True,
            )
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
