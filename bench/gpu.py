"""GPU vs CPU kernels on the three hot paths: python bench/gpu.py [--closed N] [--rk4 N] [--icl-epochs E] [--icl-p P].

1. MSFR closed-form L(t) (level leading, 64 log times) for ``--closed`` tasks (default 1e8, in
   chunks of 2^22), 2. MSFR RK4 for ``--rk4`` tasks (default 1e7) over 16 output times,
3. ICL Fig. 4 training (ATTN_S rank 1, D = 8, N = 31, H = 9, P = 80000 sequences, full per-sample
   kernels) for ``--icl-epochs`` epochs (default 200; the figure runs 20001).
Each path runs on the CPU kernels (all cores) and on their CUDA twins in the same process; the
script prints wall seconds, the ratio, and the max relative difference of the results. Without a
usable GPU it prints one line and exits 2. The GPU timings include host↔device copies.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn):
    fn()  # compile / warm up
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def closed_form(n: int):
    import fastdyn
    from fastdyn.models.msfr import theory
    from fastdyn.problems.msfr import MsfrProblem

    cfg = fastdyn.load_config(
        None, [f"task.n_tasks={n}", "solver.integrator=none", "theory.level=leading"]
    )
    prob = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    times = np.geomspace(1e-1, 1e12, 64)
    chunk = min(-(-n // 1024) * 1024, 1 << 22)
    # one chunk's task table, evaluated n / chunk times: the kernels' work is the same as for
    # n distinct tasks, and the (CPU) table generation, 0.5 s per chunk, is left out
    ch = prob.chunk(0, chunk)

    def run(dev):
        lt = np.zeros(times.size)
        for _ in range(max(1, n // chunk)):
            a, _ = theory.loss_curves(
                times,
                ch.lam,
                ch.psi,
                ch.rate,
                ch.wtest,
                ch.v0x,
                ch.v0y,
                ch.w0x,
                ch.w0y,
                "leading",
                chunk=chunk,
                device=dev,
            )
            lt += a
        return lt

    out = {}
    for dev in ("cpu", "cuda"):
        out[dev] = _timed(lambda dev=dev: run(dev))
    return out


def rk4(n: int):
    from fastdyn.drive import integrate

    rng = np.random.default_rng(0)
    s = np.arange(1, n + 1, dtype=float)
    lam, psi, rate, wt = np.ones(n), np.full(n, 100.0), s**-2.0 / 1.64, s**-2.0 / 1.64
    v0 = [np.full(n, 1e-3) + 1e-6 * rng.standard_normal(n) for _ in range(4)]
    times = np.geomspace(1e-1, 1e3, 16)

    def run(dev):
        st = integrate.TaskState.fresh(*[a.copy() for a in v0])
        seg = integrate.advance(
            "rk4", lam, psi, rate, wt, st, times, steps_per_timescale=20.0, device=dev
        )
        return seg.test_partials.sum(axis=0)

    out = {}
    for dev in ("cpu", "cuda"):
        out[dev] = _timed(lambda dev=dev: run(dev))
    return out


def icl_fig4(epochs: int, P: int = 80000):
    """Full-batch GD epochs of the Fig. 4 model on its P = 80000 training set (per-sample kernels)."""
    import fastdyn
    from fastdyn.models import icl_settings as st

    cfg = fastdyn.load_config(ROOT / "data/configs/icl_fig4.toml", ["data.n_test=0", f"data.P={P}"])
    data = st.load_data(cfg.settings)
    out = {}
    for dev in ("cpu", "cuda"):
        model = st.build_model(cfg.settings, data.D, data.N)
        model.device = dev
        prep = model.prepare(data.tokens, data.labels)
        theta = np.random.default_rng(0).normal(0.0, 5e-3, model.n_params)
        g = np.empty(model.n_params)
        model.loss_and_grad(theta, prep, g)  # warm up: compilation, device copies of the data
        t = time.perf_counter()
        for _ in range(epochs):
            L = model.loss_and_grad(theta, prep, g)
            theta = theta - cfg.settings.optim.lr * g
        out[dev] = (time.perf_counter() - t, np.array([L]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--closed", type=float, default=1e8)
    ap.add_argument("--rk4", type=float, default=1e7)
    ap.add_argument("--icl-epochs", type=int, default=200)
    ap.add_argument(
        "--icl-p", type=int, default=80000, help="training sequences (80000 as in Fig. 4)"
    )
    ap.add_argument("--cpu-threads", type=int, default=2, help="numba threads of the CPU kernels")
    a = ap.parse_args(argv)
    import numba
    from numba import cuda

    numba.set_num_threads(min(a.cpu_threads, numba.config.NUMBA_NUM_THREADS))

    if not cuda.is_available():
        print(
            "bench/gpu.py: no usable CUDA GPU here (numba.cuda.is_available() is False); run it on a GPU node",
            file=sys.stderr,
        )
        return 2
    try:
        name = cuda.get_current_device().name
        print(f"GPU: {name.decode() if isinstance(name, bytes) else name}")
    except AttributeError:  # the CUDA simulator (NUMBA_ENABLE_CUDASIM=1): a dry run of the script
        print("GPU: numba CUDA simulator (timings meaningless)")
    rows = [
        (f"MSFR closed form, {a.closed:.0e} tasks x 64 times", lambda: closed_form(int(a.closed))),
        (f"MSFR RK4, {a.rk4:.0e} tasks x 16 times", lambda: rk4(int(a.rk4))),
        (
            f"ICL Fig. 4 full model (P = {a.icl_p}), {a.icl_epochs} GD epochs",
            lambda: icl_fig4(a.icl_epochs, a.icl_p),
        ),
    ]
    print(f"CPU kernels: {numba.get_num_threads()} threads")
    print(
        f"{'hot path':<55s} {'cpu s':>9s} {'gpu s':>9s} {'ratio':>7s} {'max rel diff':>13s} {'GPU MiB':>8s}"
    )
    for name, fn in rows:
        out = fn()
        (tc, yc), (tg, yg) = out["cpu"], out["cuda"]
        yc, yg = np.asarray(yc, float), np.asarray(yg, float)
        m = np.maximum(np.abs(yc), np.abs(yg)) > 0
        rel = (
            float(np.max(np.abs(yc - yg)[m] / np.maximum(np.abs(yc), np.abs(yg))[m]))
            if m.any()
            else 0.0
        )
        try:
            free, total = cuda.current_context().get_memory_info()
            mib = f"{(total - free) / 2**20:8.0f}"  # in use now, the context's own included
        except Exception:  # noqa: BLE001 — the simulator has no memory figures
            mib = f"{'-':>8s}"
        print(f"{name:<55s} {tc:9.3f} {tg:9.3f} {tc / tg:7.1f} {rel:13.2e} {mib}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
