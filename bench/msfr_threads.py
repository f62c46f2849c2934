"""Benchmark: 1 vs 2 numba threads for the MSFR integrators on a power-law task table and for the
closed form through the CLI.

    python bench/msfr_threads.py [n_tasks=1e5] [t_max=1e4] [repeats=3] [closed_form_tasks=1e7] [n_times=128]

Integrators: the quickstart table (P(s) ∝ s^-2, Λ = 1, ψ = 100, balanced init 1e-3) with n_tasks
tasks, n_times log-spaced output times up to t_max, one :func:`fastdyn.models.msfr.integrate.advance` call
over all tasks and times (rk4 at 200 steps per timescale, dopri5 at rtol 1e-8, settling on), timed
in-process with ``numba.set_num_threads(1)`` and ``(2)`` alternating (the process is started with
NUMBA_NUM_THREADS ≥ 2); also checks that both give bit-identical partials and states. Closed form:
``fastdyn simulate data/configs/quickstart.toml --set task.n_tasks=N --set solver.integrator=none
--set theory.level=leading --set output.track=[1]`` in fresh processes with NUMBA_NUM_THREADS = 1
and 2 alternating (process wall time and the file's ``timings.total``). Medians over the repeats;
the 1-minute load average is printed before each measurement (the machine may be shared).
closed_form_tasks = 0 skips the CLI part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numba
import numpy as np

from fastdyn.config.load import load_config
from fastdyn.core import saveat
from fastdyn.models.msfr import integrate as I
from fastdyn.models.msfr.problem import MsfrProblem

ROOT = Path(__file__).resolve().parent.parent


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _table(n: int, t_max: str, n_times: int):
    cfg = load_config(
        ROOT / "data/configs/quickstart.toml",
        [f"task.n_tasks={n}", f"time.t_max={t_max}", f"time.n_times={n_times}", "output.track=[1]"],
    )
    ch = MsfrProblem(cfg.task, cfg.init, cfg.seed).chunk(0, n)
    times, _ = saveat.output_grid(cfg.time, "rk4", cfg.solver.lr)
    return cfg, ch, times


def _run(integ, cfg, ch, times):
    st = I.TaskState.fresh(ch.v0x, ch.v0y, ch.w0x, ch.w0y)
    kw = dict(settle_tol=cfg.solver.settle_tol)
    if integ == "rk4":
        kw["steps_per_timescale"] = cfg.solver.steps_per_timescale
    else:
        kw.update(rtol=cfg.solver.rtol, atol=cfg.solver.atol)
    t = time.perf_counter()
    seg = I.advance(integ, ch.lam, ch.psi, ch.rate, ch.wtest, st, times, **kw)
    return time.perf_counter() - t, seg, st


def integrators(n: int, t_max: str, reps: int, n_times: int) -> None:
    if numba.config.NUMBA_NUM_THREADS < 2:
        print("integrators: skipped (start with NUMBA_NUM_THREADS >= 2)")
        return
    cfg, ch, times = _table(n, t_max, n_times)
    for integ in ("rk4", "dopri5"):
        _run(integ, cfg, *(_sub(ch, 2048),), times)  # compile
        tm = {1: [], 2: []}
        out = {}
        print(f"{integ}: {_load()}")
        for r in range(reps):
            for nth in (1, 2) if r % 2 == 0 else (2, 1):
                numba.set_num_threads(nth)
                dt, seg, st = _run(integ, cfg, ch, times)
                tm[nth].append(dt)
                out[nth] = (seg.test_partials, seg.train_partials, st.y, st.steps)
        same = all(a.tobytes() == b.tobytes() for a, b in zip(out[1], out[2], strict=True))
        s = out[1][3].astype(float)
        blocks = np.add.reduceat(s, np.arange(0, s.size, 1024))
        m1, m2 = np.median(tm[1]), np.median(tm[2])
        print(
            f"  {n} tasks, t_max {t_max}, {n_times} times: {s.sum():.3g} steps, first block {blocks[0] / s.sum():.0%}"
            f" of them; 1 thread {m1:.3f} s, 2 threads {m2:.3f} s -> {m1 / m2:.2f}x "
            f"(runs 1: {_fmt(tm[1])}; 2: {_fmt(tm[2])}); bit-identical: {same}; {_load()}"
        )
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def _sub(ch, k):
    return ch.select(np.arange(min(k, ch.n)))


def _fmt(x):
    return " ".join(f"{v:.3f}" for v in x)


def closed_form(n: int, reps: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    env0 = dict(os.environ)
    path = os.pathsep.join(p for p in (str(ROOT), env0.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable, "-m", "fastdyn", "simulate", str(ROOT / "data/configs/quickstart.toml"),
        "--set", f"task.n_tasks={n}", "--set", "solver.integrator=none",
        "--set", "theory.level=leading", "--set", "output.track=[1]", "--overwrite", "--quiet",
    ]  # fmt: skip
    wall = {1: [], 2: []}
    inrun = {1: [], 2: []}
    print(f"closed form, {n} tasks through the CLI: {_load()}")
    for r in range(reps + 1):
        for nth in (1, 2) if r % 2 == 0 else (2, 1):
            out = tmp / f"cf{nth}.h5"
            env = dict(env0, NUMBA_NUM_THREADS=str(nth), PYTHONPATH=path)
            t = time.perf_counter()
            subprocess.run([*cmd, "-o", str(out)], env=env, check=True, cwd=ROOT)
            dt = time.perf_counter() - t
            if r == 0:
                continue  # warm-up (caches)
            with h5py.File(out) as f:
                inrun[nth].append(float(json.loads(f.attrs["timings"])["total"]))
            wall[nth].append(dt)
    with h5py.File(tmp / "cf1.h5") as a, h5py.File(tmp / "cf2.h5") as b:
        same = all(
            a[k][()].tobytes() == b[k][()].tobytes()
            for k in ("theory/loss/test", "theory/loss/train")
        )
    w1, w2 = np.median(wall[1]), np.median(wall[2])
    i1, i2 = np.median(inrun[1]), np.median(inrun[2])
    print(
        f"  process wall: 1 thread {w1:.2f} s, 2 threads {w2:.2f} s -> {w1 / w2:.2f}x "
        f"(1: {_fmt(wall[1])}; 2: {_fmt(wall[2])})\n"
        f"  in-run total: 1 thread {i1:.2f} s, 2 threads {i2:.2f} s -> {i1 / i2:.2f}x; "
        f"losses bit-identical: {same}; {_load()}"
    )


def main(argv):
    n = int(float(argv[1])) if len(argv) > 1 else 10**5
    t_max = argv[2] if len(argv) > 2 else "1e4"
    reps = max(1, int(float(argv[3]))) if len(argv) > 3 else 3
    n_cf = int(float(argv[4])) if len(argv) > 4 else 10**7
    n_times = int(float(argv[5])) if len(argv) > 5 else 128
    integrators(n, t_max, reps, n_times)
    if n_cf > 0:
        closed_form(n_cf, reps)


if __name__ == "__main__":
    main(sys.argv)
