"""Benchmark of fastdyn.analysis fits: python bench/analysis.py [--repeat R].

Prints wall times (best of R) for: a 10^5-point power-law fit (point estimate, and with a
1000-resample bootstrap), a 1000-resample bootstrap of a 10^3-point series (vectorised l2,
batched-IRLS Huber) against a naive Python loop calling np.polyfit, a broken power law and a
compute-optimal frontier.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastdyn.analysis import detect_regimes, fit_power_law, frontier


def best_of(fn, repeat: int) -> float:
    fn()  # warm-up (imports, caches)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def naive_bootstrap(x: np.ndarray, y: np.ndarray, n_boot: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    lx, ly = np.log(x), np.log(y)
    p = np.empty(n_boot)
    for k in range(n_boot):
        i = rng.integers(0, x.size, x.size)
        p[k] = -np.polyfit(lx[i], ly[i], 1)[0]
    return tuple(np.quantile(p, [0.025, 0.975]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    r = ap.parse_args().repeat
    rng = np.random.default_rng(0)

    x5 = np.logspace(0, 6, 100_000)
    y5 = 2 * x5**-0.5 * np.exp(0.05 * rng.standard_normal(x5.size))
    x3 = np.logspace(0, 3, 1000)
    y3 = 2 * x3**-0.5 * np.exp(0.05 * rng.standard_normal(x3.size))
    xb = np.logspace(0, 4, 1000)
    yb = np.where(xb < 100, xb**-0.3, 100**0.6 * xb**-0.9) * np.exp(
        0.01 * rng.standard_normal(1000)
    )
    D = np.logspace(0, 6, 40)
    t = np.logspace(0, 8, 200)
    L = D[:, None] ** -0.5 + t[None, :] ** -0.3

    rows = [
        ("fit 1e5 points, l2, bootstrap=0", lambda: fit_power_law(x5, y5, bootstrap=0)),
        ("fit 1e5 points, l2, bootstrap=1000", lambda: fit_power_law(x5, y5, bootstrap=1000)),
        ("fit 1e5 points, huber, bootstrap=0", lambda: fit_power_law(x5, y5, loss="huber", bootstrap=0)),
        ("bootstrap 1000 x 1e3 points, l2 (vectorised)", lambda: fit_power_law(x3, y3, bootstrap=1000)),
        ("bootstrap 1000 x 1e3 points, huber (batched IRLS)", lambda: fit_power_law(x3, y3, loss="huber", bootstrap=1000)),
        ("bootstrap 1000 x 1e3 points, naive polyfit loop", lambda: naive_bootstrap(x3, y3, 1000)),
        ("detect_regimes 1e3 points, bootstrap=200", lambda: detect_regimes(xb, yb, bootstrap=200)),
        ("frontier 40 runs x 200 times + 2 fits", lambda: frontier(t, D, L)),
    ]  # fmt: skip
    print(f"fastdyn.analysis benchmark (best of {r}, seconds)")
    for name, fn in rows:
        print(f"  {name:<52s} {best_of(fn, r):8.4f}")
    f = fit_power_law(x3, y3, bootstrap=1000)
    print(f"  check: vectorised CI {f.ci[0]:.5f}..{f.ci[1]:.5f}; naive CI "
          "{:.5f}..{:.5f} (same seed, so the same resamples)".format(*naive_bootstrap(x3, y3, 1000)))  # fmt: skip


if __name__ == "__main__":
    main()
