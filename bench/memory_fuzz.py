"""Random configs of every model, run for real with their peak RSS measured against the memory
estimate that validation uses: python bench/memory_fuzz.py [--n 500] [--seconds 8] [--jobs 2].

Each config is drawn with its size fields log-uniform over ranges whose estimates span about
0.3–3 GiB (MSFR tasks, times and integrators; the ICL models' P, N, D, H, n_test and context
lengths; msfr-attn tasks and samples). ``--check`` decides acceptance; an accepted config runs
in a subprocess that records its VmHWM (peak resident set) at exit, stopped by SIGTERM after
``--seconds`` (the run ends at its next chunk; the big arrays are allocated in its set-up, which
comes first). Printed: accepted / refused, and the largest peak ÷ estimate per model and over
all (the reliability target is ≤ 1.5), with the worst configs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: runs the CLI and writes its VmHWM (bytes) at exit, SIGTERM included (the run handles it)
_PEAK = """
import sys
from fastdyn.cli import main
try:
    main(sys.argv[2:])
finally:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    open(sys.argv[1], "w").write(str(int(hwm) * 1024))
"""


def _log(rng: random.Random, lo: float, hi: float) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def draw(rng: random.Random) -> list[str]:
    """One random config as ``--set`` assignments."""
    model = rng.choice(["msfr", "msfr", "attn-m", "attn-s", "mlp-cubic", "msfr-attn"])
    if model == "msfr":
        integ = rng.choice(["rk4", "dopri5", "none", "gd"])
        n = _log(rng, 1e5, 4e6 if integ != "none" else 4e7)
        sets = [f"task.n_tasks={n}", f"solver.integrator={integ}",
                f"time.n_times={_log(rng, 16, 3000)}", "time.t_max=100",
                f"output.times_per_segment={rng.choice([4, 16, 64])}"]  # fmt: skip
        if integ == "gd":
            sets.append("solver.lr=0.05")
        return sets
    if model == "msfr-attn":
        return [f"model={model}", f"task.n_tasks={_log(rng, 100, 5000)}",
                f"task.n_samples={_log(rng, 1e3, 4e5)}", "schedule.epochs=3", "schedule.n_saves=2",
                "theory.compare=false"]  # fmt: skip
    D = _log(rng, 2, 12)
    sets = [f"model={model}", f"data.P={_log(rng, 1e3, 3e5)}", f"data.N={_log(rng, 4, 64)}",
            f"data.D={D}", f"data.n_test={_log(rng, 10, 2e4)}", "schedule.epochs=20",
            "schedule.save_every=5"]  # fmt: skip
    if model == "attn-s":
        r = rng.randint(1, D)
        sets += [f"attention.R={r}", f"attention.H={max(1, -(-D // r)) + rng.randint(0, 4)}"]
    else:
        sets.append(f"attention.H={rng.randint(1, 12)}")
    if rng.random() < 0.3:
        lengths = sorted({_log(rng, 4, 200) for _ in range(rng.randint(1, 6))})
        sets.append(f"test.context_lengths={lengths}")
    return sets


def estimate(sets: list[str]) -> tuple[float | None, str]:
    """(the estimate validation uses, model), or (None, reason) when the config is refused."""
    from fastdyn.config import load_config
    from fastdyn.models.icl import config as icl
    from fastdyn.models.msfr import config as msfr
    from fastdyn.models.msfr_attn import config as msfr_attn

    try:
        cfg = load_config(None, sets)
    except ValueError as e:
        return None, str(e).splitlines()[0][:120]
    if cfg.model == "msfr":
        return msfr._bytes_needed(cfg), cfg.model
    if cfg.model == "msfr-attn":
        return sum(msfr_attn.bytes_needed(cfg)), cfg.model
    s = cfg.settings
    data = s.data
    terms = icl.bytes_needed(s.model, data, s.optim, s.test, s.schedule)
    return icl._PROCESS + sum(b for b, _ in terms), cfg.model


def run(sets: list[str], seconds: float, folder: Path) -> tuple[int, float]:
    """(exit code, peak RSS in bytes) of the config run for at most ``seconds`` (then SIGTERM)."""
    hwm = folder / "hwm"
    args = [sys.executable, "-c", _PEAK, str(hwm), "-q", "simulate"]
    args += [a for s in sets for a in ("--set", s)] + ["-o", str(folder / "r.h5"), "--overwrite"]
    proc = subprocess.Popen(args, cwd=ROOT, env=dict(os.environ, NUMBA_NUM_THREADS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    peak = float(hwm.read_text()) if hwm.exists() else math.nan
    return proc.returncode, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--json", help="write every row to this file")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    configs = [draw(rng) for _ in range(a.n)]
    accepted, refused = [], []
    for sets in configs:
        est, model = estimate(sets)
        (refused if est is None else accepted).append((sets, est, model))
    print(
        f"{a.n} configs: {len(accepted)} accepted, {len(refused)} refused at validation", flush=True
    )
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor(a.jobs) as pool:

        def one(i_item):
            i, (sets, est, model) = i_item
            folder = Path(d) / str(i)
            folder.mkdir()
            rc, peak = run(sets, a.seconds, folder)
            return {"model": model, "sets": sets, "estimate": est, "peak": peak, "rc": rc,
                    "ratio": peak / est}  # fmt: skip

        for k, row in enumerate(pool.map(one, enumerate(accepted)), 1):
            rows.append(row)
            if k % 50 == 0:
                print(f"  {k}/{len(accepted)} run ({time.time() - t0:.0f} s)", flush=True)
    bad_rc = [r for r in rows if r["rc"] not in (0, 143)]
    print(f"exits other than 0 or 143 (SIGTERM stop): {len(bad_rc)}")
    for r in bad_rc[:5]:
        print("  ", r["rc"], r["sets"])
    for model in sorted({r["model"] for r in rows}):
        rs = [r["ratio"] for r in rows if r["model"] == model and math.isfinite(r["ratio"])]
        print(
            f"{model:10s} runs {len(rs):4d}  peak/estimate max {max(rs):.2f}  median {sorted(rs)[len(rs) // 2]:.2f}"
        )
    worst = sorted((r for r in rows if math.isfinite(r["ratio"])), key=lambda r: -r["ratio"])[:5]
    print("largest peak/estimate (target ≤ 1.5):")
    for r in worst:
        print(
            f"  {r['ratio']:.2f}  peak {r['peak'] / 2**20:.0f} MiB  estimate {r['estimate'] / 2**20:.0f} MiB  {r['model']}  {' '.join(r['sets'])}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
