"""Measured hardware limits of this machine on 1 and 2 threads (bench/RESULTS.md).

    python bench/peak.py [--n 4096] [--triad 2**25] [--exp 2**24] [--repeats 5]

- FLOP peak: float64 matmul C = A B (n × n, 2n³ flops) through numpy's BLAS, in a subprocess per
  thread count (OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = MKL_NUM_THREADS = k), best of ``repeats``.
- register FLOP peak: 16 independent 512-bit chains a·x + y per thread (128 float64 in
  registers, no memory traffic; 2 flops each), once contracted to FMA and once as a multiply and
  an add: what the core issues at most. A BLAS may not reach it (on the AMD EPYC, OpenBLAS's
  matmul runs at about half of it).
- memory bandwidth: STREAM-like triad a = b + s c (numba prange, 24 bytes per element counted,
  write-allocate not counted), best of ``repeats``.
- exp throughput: y_i = e^{x_i} over x ≤ 0, in-cache blocks of 1024 per thread swept
  ``exp / 2048`` times; numpy's SIMD ``np.exp`` on 8192 cache-resident values (always 1 thread) with ``math.exp`` (numba) and fastdyn's branch-free
  vectorised ``exp_nonpos``, per thread count.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

_BLK = 1024

_MATMUL = """
import time, numpy as np
n, reps = {n}, {reps}
a = np.random.default_rng(0).standard_normal((n, n)); b = a.T.copy()
a @ b
best = min(((lambda t: (a @ b, time.perf_counter() - t)[1])(time.perf_counter())) for _ in range(reps))
print(2 * n**3 / best * 1e-9)
"""


_TRIAD = """
import time, numpy as np
from numba import njit, prange
@njit(parallel=True)
def triad(x, y, z, s):
    for i in prange(x.shape[0]):
        x[i] = y[i] + s * z[i]
n, reps = {n}, {reps}
x, y, z = np.zeros(n), np.ones(n), np.full(n, 2.0)
triad(x, y, z, 3.0)
best = min(((lambda t: (triad(x, y, z, 3.0), time.perf_counter() - t)[1])(time.perf_counter())) for _ in range(reps))
print(24 * n / best * 1e-9)
"""


def _in_subprocess(code: str, k: int) -> float:
    env = dict(os.environ)
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[v] = str(k)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def matmul_gflops(n: int, reps: int, k: int) -> float:
    """Best float64 matmul GFLOP/s (n × n, 2n³ flops) on k BLAS threads, in a subprocess."""
    return _in_subprocess(_MATMUL.format(n=n, reps=reps), k)


def triad_gbs(n: int, reps: int, k: int) -> float:
    """Best STREAM-like triad GB/s (24 bytes per element) on k numba threads, in a subprocess."""
    return _in_subprocess(_TRIAD.format(n=n, reps=reps), k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--triad", type=float, default=2**25)
    ap.add_argument("--exp", type=float, default=2**26, help="exps per timed run")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()

    import math

    import numba
    import numpy as np
    from numba import njit, prange

    from fastdyn._jit import prefer_wide_vectors
    from fastdyn.models.msfr._closed_form import exp_nonpos

    @njit(parallel=True, fastmath=False)
    def triad(x, y, z, s):
        for i in prange(x.shape[0]):
            x[i] = y[i] + s * z[i]

    # exp: each thread sweeps its own cache-resident block (x, out: 2 × 8 KiB per thread)
    # ``reps`` times, so the figure is the compute limit, not memory bandwidth
    @njit(parallel=True)
    def sum_exp(x, out, reps):
        nb = x.shape[0] // _BLK
        for b in prange(nb):
            for _ in range(reps):
                for i in range(b * _BLK, (b + 1) * _BLK):
                    out[i] = math.exp(x[i])

    @njit(parallel=True)
    def sum_exp_nonpos(x, out, reps):
        nb = x.shape[0] // _BLK
        for b in prange(nb):
            for _ in range(reps):
                for i in range(b * _BLK, (b + 1) * _BLK):
                    out[i] = exp_nonpos(x[i])

    def chains(contract):
        @njit(parallel=True, fastmath={"contract"} if contract else False)
        def k(n, x, y, out):
            for t in prange(out.shape[0]):
                prefer_wide_vectors()
                acc = np.empty(128)
                for j in range(128):
                    acc[j] = 1.0 + j * 1e-3
                for _ in range(n):
                    for j in range(128):
                        acc[j] = acc[j] * x + y
                s = 0.0
                for j in range(128):
                    s += acc[j]
                out[t] = s

        return k

    fma_chains, muladd_chains = chains(True), chains(False)

    def best(f, *args):
        f(*args)
        t_best = np.inf
        for _ in range(a.repeats):
            t = time.perf_counter()
            f(*args)
            t_best = min(t_best, time.perf_counter() - t)
        return t_best

    print(
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores; "
        f"numpy {np.__version__}, numba {numba.__version__}"
    )
    nt = int(a.triad)
    x, y, z = np.zeros(nt), np.ones(nt), np.full(nt, 2.0)
    ne = 2 * _BLK  # one block per thread
    reps_e = int(a.exp) // ne
    oe = np.empty(ne)
    xe = -np.random.default_rng(1).uniform(0.0, 50.0, ne)
    for k in (1, 2):
        gf = matmul_gflops(a.n, a.repeats, k)
        numba.set_num_threads(k)
        bw = 24 * nt / best(triad, x, y, z, 3.0) * 1e-9
        ge = ne * reps_e / best(sum_exp, xe, oe, reps_e) * 1e-9
        gn = ne * reps_e / best(sum_exp_nonpos, xe, oe, reps_e) * 1e-9
        xn, on = -np.random.default_rng(2).uniform(0.0, 50.0, 8192), np.empty(8192)
        np.exp(xn, out=on)
        t = time.perf_counter()
        for _ in range(reps_e // 8):
            np.exp(xn, out=on)
        gnp = 8192 * (reps_e // 8) / (time.perf_counter() - t) * 1e-9
        n_ch, o_ch = 1_000_000, np.empty(k)
        g_fma = 256 * n_ch * k / best(fma_chains, n_ch, 0.999999, 1e-9, o_ch) * 1e-9
        g_ma = 256 * n_ch * k / best(muladd_chains, n_ch, 0.999999, 1e-9, o_ch) * 1e-9
        print(
            f"{k} thread(s): register peak {g_fma:7.2f} GFLOP/s FMA, {g_ma:7.2f} multiply + add; "
            f"float64 matmul {gf:7.2f} GFLOP/s (n={a.n}); triad {bw:6.2f} GB/s; "
            f"exp: math.exp {ge:.3f} Gexp/s, fastdyn exp_nonpos {gn:.3f} Gexp/s, "
            f"numpy np.exp (SIMD, 1 thread, 8192 in cache) {gnp:.3f} Gexp/s  "
            f"(load {os.getloadavg()[0]:.2f})"
        )


if __name__ == "__main__":
    main()
