"""GPU vs CPU kernels on the hot paths: python bench/gpu.py [--closed N] [--rk4 N] [--dopri5 N] [--icl-epochs E] [--icl-p P] [--cpu-threads T].

1. MSFR closed-form L(t) (level leading, 64 log times) for ``--closed`` tasks (default 1e8), in
   chunks of 2^22 tasks, as the driver calls it. Two copies of one chunk's task table alternate,
   so every call copies its inputs to the device (as in a run, where every chunk is new) while the
   CPU's table generation (0.5 s per chunk, the same for both devices) is left out;
   and again with the same arrays in every call (on the GPU: copied once; the kernels alone);
2. MSFR RK4 for ``--rk4`` tasks (default 1e7) over 16 output times in 4 segments, the state kept
   on the device between them as in a run (to the device and back once included);
3. MSFR dopri5 for ``--dopri5`` tasks (default 1e7), the same tasks and times, rtol 1e-7;
4. ICL Fig. 4 training (ATTN_S rank 1, D = 8, N = 31, H = 9, P = 80000 sequences, full per-sample
   kernels) for ``--icl-epochs`` full-batch GD epochs (default 200; the figure runs 20001).
Each path runs on the CPU kernels (``--cpu-threads``, default 2: the brief's 2-core machine) and
on their CUDA twins in the same process, after one untimed call of each (compilation, and the
device copies of the ICL data). Printed: wall seconds, the ratio, the largest relative
difference of the results, and the GPU memory in use after the path (the context's own
≈ 0.5 GiB included). Without a usable GPU it prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _sync() -> None:
    from numba import cuda

    try:
        cuda.synchronize()
    except Exception:  # noqa: BLE001 — the simulator
        pass


def _timed(fn, warm=None):
    (warm or fn)()  # compile / warm up
    _sync()
    t = time.perf_counter()
    out = fn()
    _sync()
    return time.perf_counter() - t, out


def closed_form(n: int, nt: int = 64):
    import fastdyn
    from fastdyn.models.msfr import theory
    from fastdyn.models.msfr.problem import MsfrProblem

    chunk = min(-(-n // 1024) * 1024, 1 << 22)
    cfg = fastdyn.load_config(
        None, [f"task.n_tasks={chunk}", "solver.integrator=none", "theory.level=leading"]
    )
    prob = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    times = np.geomspace(1e-1, 1e12, nt)
    ch = prob.chunk(0, chunk)
    names = ("lam", "psi", "rate", "wtest", "v0x", "v0y", "w0x", "w0y")
    tables = [[np.array(getattr(ch, k)) for k in names] for _ in range(2)]
    reps = max(1, n // chunk)

    def run(dev, reps=reps):
        lt = np.zeros(times.size)
        for r in range(reps):
            a, _ = theory.loss_curves(times, *tables[r % 2], "leading", chunk=chunk, device=dev)
            lt += a
        return lt

    return {
        dev: _timed(lambda dev=dev: run(dev), lambda dev=dev: run(dev, 2))
        for dev in ("cpu", "cuda")
    }


def closed_form_resident(n: int, nt: int = 64):
    """As :func:`closed_form`, but every call gets the same arrays: on the GPU they are copied
    once, so this times the kernels and the partials' way back alone."""
    import fastdyn
    from fastdyn.models.msfr import theory
    from fastdyn.models.msfr.problem import MsfrProblem
    from fastdyn.reduce import n_blocks

    chunk = min(-(-n // 1024) * 1024, 1 << 22)
    cfg = fastdyn.load_config(
        None, [f"task.n_tasks={chunk}", "solver.integrator=none", "theory.level=leading"]
    )
    ch = MsfrProblem(cfg.task, cfg.init, cfg.seed).chunk(0, chunk)
    times = np.geomspace(1e-1, 1e12, nt)
    names = ("lam", "psi", "rate", "wtest", "v0x", "v0y", "w0x", "w0y")
    cols = [np.ascontiguousarray(getattr(ch, k)) for k in names]
    tp, rp = np.empty((n_blocks(chunk), nt)), np.empty((n_blocks(chunk), nt))

    reps_all = max(1, n // chunk)

    def run(dev, reps=reps_all):
        lt = np.zeros(times.size)
        for _ in range(reps):
            theory.loss_partials(times, *cols, "leading", tp, rp, device=dev)
            lt += tp.sum(axis=0)
        return lt

    return {
        dev: _timed(lambda dev=dev: run(dev), lambda dev=dev: run(dev, 1))
        for dev in ("cpu", "cuda")
    }


def _power_law_tasks(n: int):
    rng = np.random.default_rng(0)
    s = np.arange(1, n + 1, dtype=float)
    lam, psi, rate, wt = np.ones(n), np.full(n, 100.0), s**-2.0 / 1.64, s**-2.0 / 1.64
    v0 = [np.full(n, 1e-3) + 1e-6 * rng.standard_normal(n) for _ in range(4)]
    return lam, psi, rate, wt, v0


def _integrator(name: str, n: int, **kw):
    from fastdyn.models.msfr import integrate

    lam, psi, rate, wt, v0 = _power_law_tasks(n)
    times = np.geomspace(1e-1, 1e3, 16)

    def run(dev, m=n):
        """Four segments of four output times with the state kept on the device between them,
        as the driver runs them (integrate.keep_state_on); the state back on the host at the end."""
        st = integrate.TaskState.fresh(*[a[:m].copy() for a in v0])
        args = (lam[:m], psi[:m], rate[:m], wt[:m], st)
        out = []
        with integrate.keep_state_on(dev):
            for s in range(4):
                tt = times[4 * s : 4 * s + 4]
                t0 = 0.0 if s == 0 else times[4 * s - 1]
                seg = integrate.advance(name, *args, tt, t0=t0, device=dev, **kw)
                out.append(seg.test_partials.sum(axis=0))
        return np.concatenate([*out, st.y.sum(axis=1)])

    return {
        dev: _timed(lambda dev=dev: run(dev), lambda dev=dev: run(dev, 4096))
        for dev in ("cpu", "cuda")
    }


def rk4(n: int):
    return _integrator("rk4", n, steps_per_timescale=20.0)


def dopri5(n: int):
    return _integrator("dopri5", n, rtol=1e-7, atol=1e-12)


def icl_fig4(epochs: int, P: int = 80000):
    """Full-batch GD epochs of the Fig. 4 model on its P = 80000 training set (per-sample kernels)."""
    import fastdyn
    from fastdyn.models.icl import settings as st

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
    ap.add_argument("--times", type=int, default=64, help="output times of the closed form")
    ap.add_argument("--rk4", type=float, default=1e7)
    ap.add_argument("--dopri5", type=float, default=1e7)
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
        (
            f"MSFR closed form, {a.closed:.0e} tasks x {a.times} times",
            lambda: closed_form(int(a.closed), a.times),
        ),
        (
            f"MSFR closed form, {a.closed:.0e} tasks, inputs on the GPU",
            lambda: closed_form_resident(int(a.closed), a.times),
        ),
        (f"MSFR RK4, {a.rk4:.0e} tasks x 16 times", lambda: rk4(int(a.rk4))),
        (f"MSFR dopri5, {a.dopri5:.0e} tasks x 16 times", lambda: dopri5(int(a.dopri5))),
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
