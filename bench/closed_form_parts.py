"""Where the MSFR closed form's time goes, part by part, on one core.

The peers' task table (``bench/peers_msfr.py``: P(s) ∝ s^-2, Λ = s^-0.25, ψ = 1000 s^-0.3,
balanced init 1e-3, level ``leading``) at T log-spaced times from 0.1 to 1e12, every block of
``fastdyn.reduce.BLOCK`` tasks in turn on one thread, cumulative parts:

- ``read``   the task table's check (``block_is_valid``: the seven per-task arrays read once);
- ``setup``  + the balanced-logistic set-up (``_fast_setup``: a logarithm, two square roots, five
  divisions per task at the leading level, vectorised across the block);
- ``all``    the whole block (``_block_loss``: + walks, series lanes, exp ranges, fold), the
  kernel fastdyn runs.

Beside them the work the table asks for (from the set-up's thresholds, as the kernel draws its
index ranges): task·times in the exp ranges (one ``exp_nonpos`` each), in the series and past
the drop; and the rates of this core: ``exp_nonpos`` over a long array (the exp ranges' loop),
the triad bandwidth, and JAX's brute force (one exp and 8 flops per task·time) for the ratio.

Run: ``PYTHONPATH=. .venv/bin/python bench/closed_form_parts.py [--tasks 1e6] [--times 16,256]``
(``/work/peervenv``'s python adds the JAX row).
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np
from numba import njit
from peers_msfr import closed_table  # bench/ is on the path when run as a script

from fastdyn.models.msfr import theory as th
from fastdyn.models.msfr._args import block_is_valid
from fastdyn.models.msfr._closed_form import LEADING, exp_nonpos
from fastdyn.reduce import BLOCK


@njit(cache=True)
def _read(lam, psi, rate, wt, vx, vy, wx, wy):
    n = lam.shape[0]
    bad = np.zeros((7, 3), dtype=np.int64)
    ok = 0
    for lo in range(0, n, BLOCK):
        ok += block_is_valid(lam, psi, rate, vx, vy, wx, wy, lo, min(n, lo + BLOCK), bad)
    return ok


@njit(cache=True)
def _setup(lam, psi, rate, wt, vx, vy, wx, wy):
    n = lam.shape[0]
    bad = np.zeros((7, 3), dtype=np.int64)
    tb = np.empty(th._NROW * BLOCK)
    nf = 0
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
        block_is_valid(lam, psi, rate, vx, vy, wx, wy, lo, hi, bad)
        nf += th._fast_setup(LEADING, lam, psi, rate, wt, vx, vy, wx, wy, lo, hi, tb)
    return nf


@njit(cache=True)
def _thresholds(lam, psi, rate, wt, vx, vy, wx, wy, out):
    """out[0..2, i]: task i's series end, half-rise and drop thresholds in t."""
    n = lam.shape[0]
    tb = np.empty(th._NROW * BLOCK)
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
        th._fast_setup(LEADING, lam, psi, rate, wt, vx, vy, wx, wy, lo, hi, tb)
        for j in range(hi - lo):
            out[0, lo + j] = tb[th._R_T1 + j]
            out[1, lo + j] = tb[th._R_TH + j]
            out[2, lo + j] = tb[th._R_T2 + j]


@njit(cache=True)
def _all(times, lam, psi, rate, wt, vx, vy, wx, wy, acc_t, acc_r):
    n = lam.shape[0]
    bad = np.zeros((7, 3), dtype=np.int64)
    qpow = th._ratio_powers(times, th._DEG)
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
        block_is_valid(lam, psi, rate, vx, vy, wx, wy, lo, hi, bad)
        th._block_loss(
            LEADING, times, qpow, lam, psi, rate, wt, vx, vy, wx, wy, 1e-12, lo, hi, acc_t, acc_r
        )


@njit(cache=True)
def _exps(x, reps):
    s = 0.0
    for _ in range(reps):
        for i in range(x.shape[0]):
            x[i] = exp_nonpos(x[i])
        s += x[0]
    return s


@njit(cache=True)
def _triad(a, b, c, reps):
    for _ in range(reps):
        for i in range(a.shape[0]):
            a[i] = b[i] + 1.5 * c[i]


def best(f, *args, repeats: int) -> float:
    f(*args)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=float, default=1e6)
    ap.add_argument("--times", default="16,256")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    numba.set_num_threads(1)
    n = int(a.tasks)
    lam, psi, rate, wt, vx, vy = closed_table(n)
    tab = (lam, psi, rate, wt, vx, vy, vx.copy(), vy.copy())
    print(f"load {os.getloadavg()[0]:.2f}; {n:,} tasks, 1 thread, best of {a.repeats}")
    t_read = best(_read, *tab, repeats=a.repeats)
    t_setup = best(_setup, *tab, repeats=a.repeats)
    print(
        f"  read (table check)       {1e9 * t_read / n:7.2f} ns/task  ({56 * n / t_read / 1e9:.1f} GB/s of the table)"
    )
    print(f"  + set-up                 {1e9 * t_setup / n:7.2f} ns/task")
    thr = np.empty((3, n))
    _thresholds(*tab, thr)
    x = -np.linspace(0.0, 700.0, 1 << 15)
    reps = 200
    t_exp = best(_exps, x.copy(), reps, repeats=a.repeats) / (reps * x.size)
    m = 1 << 22
    b1, b2, b3 = np.zeros(m), np.ones(m), np.ones(m)
    t_tri = best(_triad, b1, b2, b3, 5, repeats=a.repeats) / 5
    print(
        f"  exp_nonpos in a long loop {1e9 * t_exp:6.3f} ns/exp; triad {24 * m / t_tri / 1e9:.1f} GB/s (1 thread)"
    )
    for nt in (int(s) for s in a.times.split(",")):
        times = np.geomspace(1e-1, 1e12, nt)
        acc_t, acc_r = np.zeros(nt), np.zeros(nt)
        t_all = best(_all, times, *tab, acc_t, acc_r, repeats=a.repeats)
        k1 = np.searchsorted(times, thr[0], "right")
        k2 = np.maximum(np.searchsorted(times, thr[2], "right"), k1)
        n_exp = int((k2 - k1).sum())
        n_ser = int(k1.sum())
        per = 1e9 * t_all / (n * nt)
        print(f"T = {nt}: all {1e9 * t_all / n:7.2f} ns/task = {per:.4f} ns/task·time; "
              f"walks+series+exps+fold {1e9 * (t_all - t_setup) / n:.2f} ns/task")  # fmt: skip
        print(f"  task·times: exp ranges {n_exp / (n * nt):.4f}, series {n_ser / (n * nt):.4f}, "
              f"dropped {1 - (n_exp + n_ser) / (n * nt):.4f}; exps alone {1e9 * t_exp * n_exp / n:.2f} ns/task")  # fmt: skip
        try:
            import jax

            jax.config.update("jax_enable_x64", True)
            from peers_msfr import jax_closed

            chunk = max(1, min(n, (1 << 20) // nt))
            while n % chunk:
                chunk -= 1
            f = jax_closed(jax, chunk)
            args = [jax.numpy.asarray(v) for v in (times, lam, psi, rate, wt)] + [1e-6]
            f(*args).block_until_ready()  # compile
            c0 = time.process_time()
            t_j = best(lambda f=f, args=args: f(*args).block_until_ready(), repeats=a.repeats)
            c_j = (time.process_time() - c0) / (a.repeats + 1)
            print(f"  JAX brute force {1e9 * t_j / (n * nt):.4f} ns/task·time wall (best), "
                  f"{1e9 * c_j / (n * nt):.4f} CPU (mean); JAX CPU / fastdyn 1 thread "
                  f"{c_j / t_all:.2f}x")  # fmt: skip
        except ImportError:
            pass


if __name__ == "__main__":
    main()
