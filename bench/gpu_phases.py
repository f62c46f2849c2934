"""Where a GPU call's time goes: python bench/gpu_phases.py [--n N].

Times each phase of the CUDA twins (host preparation, copies, each kernel launch, the way back)
with a device synchronisation around every phase, for one MSFR RK4 segment and one dopri5
segment of ``--n`` tasks (default 1e7, four output times, the state kept on the device as in a
run: second segment timed) and one closed-form chunk of 2^22 tasks × 64 times. The synchronising
adds a few µs per phase; the totals are close to bench/gpu.py's. Needs a GPU.
"""

from __future__ import annotations

import argparse
import collections
import runpy
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _instrument(mod, names, acc):
    """Wrap ``mod``'s functions ``names`` (and its kernel launches) to add their synchronised
    wall time to ``acc``."""
    from numba import cuda

    def timed(label, fn):
        def run(*a, **k):
            cuda.synchronize()
            t = time.perf_counter()
            out = fn(*a, **k)
            cuda.synchronize()
            acc[label] += time.perf_counter() - t
            return out

        return run

    for name in names:
        setattr(mod, name, timed(name, getattr(mod, name)))
    kernels = mod._kernels

    class Timed(dict):
        def __getitem__(self, key):
            k = dict.__getitem__(self, key)

            class Launch:
                def __getitem__(self, cfg):
                    return timed(f"kernel {key}", k[cfg])

            return Launch()

    if not kernels:
        kernels.update(mod._build())
    mod._kernels = Timed(kernels)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=float, default=1e7)
    a = ap.parse_args(argv)
    n = int(a.n)
    from fastdyn.models.msfr import integrate, integrate_cuda, theory, theory_cuda

    bench = runpy.run_path(str(HERE / "gpu.py"))
    lam, psi, rate, wt, v0 = bench["_power_law_tasks"](n)
    times = np.geomspace(1e-1, 1e3, 16)
    acc: dict[str, float] = collections.defaultdict(float)
    _instrument(integrate_cuda, ["_state_in", "_param", "_tpos", "_state_out"], acc)
    _instrument(theory_cuda, [], acc)
    paths = (("rk4", {"steps_per_timescale": 20.0}), ("dopri5", {"rtol": 1e-7, "atol": 1e-12}))
    for name, kw in paths:
        st = integrate.TaskState.fresh(*[x.copy() for x in v0])
        with integrate.keep_state_on("cuda"):
            integrate.advance(name, lam, psi, rate, wt, st, times[:4], device="cuda", **kw)
            acc.clear()
            t = time.perf_counter()
            integrate.advance(
                name, lam, psi, rate, wt, st, times[4:8], t0=times[3], device="cuda", **kw
            )
            total = time.perf_counter() - t
        _report(f"{name}, {n:.0e} tasks, one segment of 4 output times", total, acc)
    m = min(1 << 22, n // 1024 * 1024)
    ch = [np.ascontiguousarray(x[:m]) for x in (lam, psi, rate, wt, *v0)]
    ct = np.geomspace(1e-1, 1e12, 64)
    from fastdyn.reduce import n_blocks

    tp, rp = np.empty((n_blocks(m), 64)), np.empty((n_blocks(m), 64))
    for label, arrs in (("inputs copied", [x.copy() for x in ch]), ("inputs on the GPU", ch)):
        theory.loss_partials(ct, *ch, "leading", tp, rp, device="cuda")
        acc.clear()
        t = time.perf_counter()
        theory.loss_partials(ct, *arrs, "leading", tp, rp, device="cuda")
        total = time.perf_counter() - t
        _report(f"closed form, 2^22 tasks x 64 times, {label}", total, acc)
    return 0


def _report(title: str, total: float, acc: dict) -> None:
    print(f"{title}: {total * 1e3:.1f} ms")
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<24s} {v * 1e3:9.2f} ms")
    print(f"  {'host and copies (rest)':<24s} {(total - sum(acc.values())) * 1e3:9.2f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
