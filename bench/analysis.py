"""Benchmark of fastdyn.analysis fits: python bench/analysis.py [--repeat R].

Prints wall times (best of R) for: a 10^5-point power-law fit (point estimate, and with a
1000-resample bootstrap, against the previous numpy implementation), a 1000-resample bootstrap of
a 10^3-point series (compiled l2 kernel, batched-IRLS Huber) against a naive Python loop calling
np.polyfit, a broken power law and a compute-optimal frontier. CPU time is printed beside wall
time (the machine is shared; CPU time / wall > 1 means both cores were used).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from fastdyn.analysis import _boot, detect_regimes, fit_power_law, frontier
from fastdyn.analysis.plot import plot_loss
from fastdyn.h5.reader import Run


def best_of(fn, repeat: int) -> tuple[float, float]:
    """(best wall time, CPU time of that repeat) in seconds."""
    fn()  # warm-up (imports, compilation caches)
    ts = []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        ts.append((time.perf_counter() - t0, time.process_time() - c0))
    return min(ts)


def naive_bootstrap(x: np.ndarray, y: np.ndarray, n_boot: int, seed: int = 0) -> tuple:
    """Baseline: a Python loop of np.polyfit over the same resampling indices fastdyn draws."""
    idx = _boot.indices(seed, 0, n_boot, x.size)
    lx, ly = np.log(x), np.log(y)
    p = np.empty(n_boot)
    for k in range(n_boot):
        i = idx[k]
        p[k] = -np.polyfit(lx[i], ly[i], 1)[0]
    return tuple(np.quantile(p, [0.025, 0.975]))


def numpy_bootstrap(x: np.ndarray, y: np.ndarray, n_boot: int, seed: int = 0) -> np.ndarray:
    """The previous implementation: numpy Generator indices -> bincount counts -> one matmul."""
    rng = np.random.default_rng(seed)
    u, v = np.log(x), np.log(y)
    u, v = u - u.mean(), v - v.mean()
    Q = np.stack([np.ones_like(u), u, v, u * u, u * v], axis=1)
    out = np.empty(n_boot)
    step = max(1, 2_000_000 // x.size)
    for s in range(0, n_boot, step):
        b = min(step, n_boot - s)
        idx = rng.integers(0, x.size, size=(b, x.size))
        flat = (idx + x.size * np.arange(b)[:, None]).ravel()
        c = np.bincount(flat, minlength=b * x.size).reshape(b, x.size).astype(float)
        s0, su, sv, suu, suv = (c @ Q).T
        mu, mv = su / s0, sv / s0
        out[s : s + b] = -(suv - s0 * mu * mv) / (suu - s0 * mu * mu)
    return out


def plot_1e5(x: np.ndarray, y: np.ndarray, out: Path) -> None:
    """fastdyn.analysis.plot.plot_loss of a 10^5-point run (with its theory line) to a PNG."""
    import matplotlib.pyplot as plt

    run = Run(
        Path("bench-1e5.h5"),
        {"model": "msfr"},
        {},
        {"time": x, "loss/test": y, "theory/loss/test": 2 * x**-0.5},
    )
    fig = plot_loss([run], out)
    plt.close(fig)


def naive_plot_1e5(x: np.ndarray, y: np.ndarray, out: Path) -> None:
    """Baseline: the plain matplotlib loglog of the same two lines, saved the same way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    ax.loglog(x, y)
    ax.loglog(x, 2 * x**-0.5, "--")
    fig.savefig(out)
    plt.close(fig)


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

    tmp = Path(tempfile.mkdtemp())
    rows = [
        ("plot_loss 1e5 points + theory -> PNG", lambda: plot_1e5(x5, y5, tmp / "a.png")),
        ("  same, plain matplotlib loglog -> PNG", lambda: naive_plot_1e5(x5, y5, tmp / "b.png")),
        ("fit 1e5 points, l2, bootstrap=0", lambda: fit_power_law(x5, y5, bootstrap=0)),
        ("fit 1e5 points, l2, bootstrap=1000", lambda: fit_power_law(x5, y5, bootstrap=1000)),
        ("  same, previous numpy path (Generator + bincount + matmul)", lambda: numpy_bootstrap(x5, y5, 1000)),
        ("fit 1e5 points, huber, bootstrap=0", lambda: fit_power_law(x5, y5, loss="huber", bootstrap=0)),
        ("bootstrap 1000 x 1e3 points, l2 (compiled kernel)", lambda: fit_power_law(x3, y3, bootstrap=1000)),
        ("bootstrap 1000 x 1e3 points, huber (batched IRLS)", lambda: fit_power_law(x3, y3, loss="huber", bootstrap=1000)),
        ("bootstrap 1000 x 1e3 points, naive polyfit loop", lambda: naive_bootstrap(x3, y3, 1000)),
        ("detect_regimes 1e3 points, bootstrap=200", lambda: detect_regimes(xb, yb, bootstrap=200)),
        ("frontier 40 runs x 200 times + 2 fits", lambda: frontier(t, D, L)),
    ]  # fmt: skip
    print(f"fastdyn.analysis benchmark (best of {r}; wall and CPU seconds)")
    for name, fn in rows:
        wall, cpu = best_of(fn, r)
        print(f"  {name:<60s} {wall:8.4f}   cpu {cpu:8.4f}")
    f = fit_power_law(x3, y3, bootstrap=1000)
    print(f"  check: compiled CI {f.ci[0]:.5f}..{f.ci[1]:.5f}; naive CI "
          "{:.5f}..{:.5f} (same seed, so the same resamples)".format(*naive_bootstrap(x3, y3, 1000)))  # fmt: skip


if __name__ == "__main__":
    main()
