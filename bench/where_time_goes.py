"""Where a shipped trained config's time goes: start-up, set-up, the training steps, the
measurements at saves, and the file.

Runs ``fastdyn simulate CONFIG`` in a fresh process (warm numba cache: the first of two runs is
discarded) under cProfile and splits its wall time by the functions on the stack:

- ``start-up``  the process before ``simulate`` (interpreter, imports, config and plug-in loading);
- ``set-up``    the model's ``setup`` (data, preparation, kernels loaded from the cache);
- ``steps``     the training loop without its saves and checkpoints (the kernels of the epochs and
  the Python around them; ``steps per epoch`` divides by the epochs);
- ``measure``   what a save computes (train/test losses, weights, diagnostics), without writing;
- ``write``     the HDF5 file: creating it, appending the rows, checkpoints and the close.

cProfile adds ≈ 1 µs per Python call, so the Python-heavy parts read a little high; the process
wall without the profiler is printed beside it.

Run: ``.venv/bin/python bench/where_time_goes.py [--threads 1] [CONFIG[:KEY=VALUE,...] ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = (
    "icl_fig1.toml",
    "icl_variants.toml",
    "icl_fig3.toml:schedule.epochs=1001",  # 10001 epochs at P = 80 000 take minutes; the split holds
    "icl_fig4.toml:schedule.epochs=1001",
    "msfr_attn_quick.toml",
    "msfr_attention.toml",
    "msfr_noise.toml",
    "msfr_attn_scaling_d.toml",
)

#: (file suffix, function) -> part; a part's time is its functions' cumulative time, minus that of
#: the parts nested inside it
PARTS = {
    "simulate": ("fastdyn/drive/run.py", "simulate"),
    "setup_icl": ("fastdyn/models/icl/setup.py", "setup"),
    "setup": ("fastdyn/drive/trained.py", "<setup>"),
    "train": ("fastdyn/drive/train.py", "train"),
    "save": ("fastdyn/drive/train.py", "save"),
    "on_save": ("fastdyn/drive/trained.py", "on_save"),
    "on_checkpoint": ("fastdyn/drive/trained.py", "on_checkpoint"),
    "writer_init": ("fastdyn/h5/writer.py", "__init__"),
    "open_writer": ("fastdyn/drive/lifecycle.py", "open_writer"),
    "close": ("fastdyn/h5/writer.py", "close"),
    "append": ("fastdyn/h5/writer.py", "append"),
    "checkpoint": ("fastdyn/h5/writer.py", "checkpoint"),
}


def _cum(stats: pstats.Stats, suffix: str, func: str) -> float:
    total = 0.0
    for (file, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        if name == func and file.endswith(suffix):
            total += ct
    return total


def _setup_time(stats: pstats.Stats) -> float:
    """The model's ``setup``: the callee of run_trained that lives in a models/ module."""
    best = 0.0
    for (file, _line, name), (_cc, _nc, _tt, ct, callers) in stats.stats.items():
        if name == "setup" and "/fastdyn/models/" in file:
            if any(c[2] == "run_trained" for c in callers):
                best = max(best, ct)
    return best


def profile(config: str, sets: list[str], threads: int) -> dict[str, float]:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "run.h5"
        prof = Path(d) / "run.prof"
        cmd = ["-m", "fastdyn", "-q", "simulate", str(ROOT / "data/configs" / config)]
        cmd += [a for s in sets for a in ("--set", s)] + ["-o", str(out), "--overwrite"]
        subprocess.run([sys.executable, *cmd], env=env, check=True)  # warm the cache
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *cmd], env=env, check=True)
        plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "cProfile", "-o", str(prof), *cmd], env=env, check=True
        )
        wall = time.perf_counter() - t0
        import h5py

        with h5py.File(out, "r") as f:
            epochs = int(f["step"][-1])
            saves = int(f["time"].shape[0])
        st = pstats.Stats(str(prof))
    c = {k: _cum(st, *v) for k, v in PARTS.items()}
    setup = _setup_time(st)
    write = c["open_writer"] + c["append"] + c["checkpoint"] + c["close"]
    steps = c["train"] - c["save"] - c["on_checkpoint"]
    measure = c["save"] - c["on_save"]
    # what the on_save/on_checkpoint callbacks do besides writing (rows, progress)
    other_run = c["simulate"] - setup - c["open_writer"] - c["train"] - c["close"]
    return {
        "plain wall": plain, "profiled wall": wall, "start-up": wall - c["simulate"], "set-up": setup,
        "steps": steps, "measure": measure, "write": write,
        "callbacks": c["on_save"] + c["on_checkpoint"] - c["append"] - c["checkpoint"],
        "rest of run": other_run, "epochs": epochs, "saves": saves,
        "steps per epoch (ms)": 1e3 * steps / max(epochs, 1),
        "write per save (ms)": 1e3 * c["append"] / max(saves, 1),
        "measure per save (ms)": 1e3 * measure / max(saves, 1),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", default=list(CONFIGS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print(f"# load {os.getloadavg()[0]:.2f}, NUMBA_NUM_THREADS={a.threads}", flush=True)
    rows = {}
    for spec in a.configs:
        name, _, sets = spec.partition(":")
        r = profile(name, [s for s in sets.split(",") if s], a.threads)
        rows[spec] = r
        parts = ("start-up", "set-up", "steps", "measure", "write", "callbacks", "rest of run")
        share = "  ".join(f"{p} {r[p]:.2f}" for p in parts)
        print(
            f"{spec}: wall {r['plain wall']:.2f} s (profiled {r['profiled wall']:.2f}): {share} | "
            f"{r['epochs']} epochs, {r['saves']} saves: steps {r['steps per epoch (ms)']:.3f} ms/epoch, "
            f"write {r['write per save (ms)']:.2f} ms/save, measure {r['measure per save (ms)']:.2f} ms/save",
            flush=True,
        )
    print(f"# load {os.getloadavg()[0]:.2f}")
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
