"""The shipped ICL Fig. 1 config, whole process and per epoch.

Times ``fastdyn simulate fastdyn/presets/icl_fig1.toml`` (6001 epochs) as a user runs it, as
separate processes, in three variants alternated over ``--repeat`` rounds:

- ``shipped``  the config as shipped (its own data draw and init);
- ``files``    the same data and initial weights loaded from ``.npz`` files (``data.from_file``,
  ``init.from_file``), the way the authors' script's data and init are brought in;
- ``1 thread`` the shipped config with ``NUMBA_NUM_THREADS=1``.

For each: wall and CPU time of the process and the run's own ``timings.total``. Then, in this
process, on exactly the shipped config's model, data and init (built through the model's
registered ``setup``, as the driver does): the per-epoch time of the trained-run driver
(:func:`fastdyn.drive.train.train` with saves at 0 and E only: the fused GD blocks the run takes
between saves), and of a Python call per epoch (``loss_and_grad`` on the full batch + the GD
update); the run's in-run time per epoch beside them. Threads: NUMBA_NUM_THREADS.

Run: ``.venv/bin/python bench/icl_shipped.py [--repeat 3] [--epochs 6001]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

PRESET = Path(__file__).resolve().parent.parent / "fastdyn" / "presets" / "icl_fig1.toml"


def run_process(out: Path, sets: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall and CPU seconds of one ``fastdyn simulate`` process, and its in-run total."""
    cmd = [sys.executable, "-m", "fastdyn", "simulate", str(PRESET), "-o", str(out)]
    cmd += ["--overwrite", "--quiet"] + [a for s in sets for a in ("--set", s)]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    with h5py.File(out, "r") as f:
        total = json.loads(f.attrs["timings"])["total"]
    return {"wall": wall, "cpu": cpu, "in_run": total}


def export_files(h5: Path, d: Path) -> list[str]:
    """The shipped run's training data and initial weights as .npz files, and the --set lines
    that load them."""
    from fastdyn.config import load_config
    from fastdyn.models.registry import get_model

    cfg = load_config(PRESET)
    job = get_model(cfg.model).setup(cfg)
    tok, lab = job.prep.tokens, job.prep.labels  # tokens carry the label column last
    np.savez(d / "data.npz", x=tok[:, :, : cfg.data.D], y=lab)
    np.savez(d / "init.npz", **job.model.to_arrays(job.theta))
    del h5
    return [f"data.from_file='{d / 'data.npz'}'", f"init.from_file='{d / 'init.npz'}'"]


def per_epoch_in_process(epochs: int) -> float:
    """Seconds per epoch of loss_and_grad + GD update on the shipped config's model and data."""
    from fastdyn.config import load_config
    from fastdyn.drive.optim import make_optimizer
    from fastdyn.models.registry import get_model

    cfg = load_config(PRESET)
    job = get_model(cfg.model).setup(cfg)
    theta = job.theta.copy()
    grad = np.zeros(job.model.n_params)
    opt = make_optimizer("gd", job.model.n_params, cfg.optim.lr)
    job.model.loss_and_grad(theta, job.prep, grad, None)
    t0 = time.perf_counter()
    for _ in range(epochs):
        job.model.loss_and_grad(theta, job.prep, grad, None)
        opt.step(theta, grad)
    return (time.perf_counter() - t0) / epochs


def per_epoch_driver(epochs: int) -> float:
    """Seconds per epoch of the trained-run driver's loop over ``epochs`` GD epochs, saves at 0
    and ``epochs`` only (nothing measured at them), on the shipped config's model and data."""
    from fastdyn.config import load_config
    from fastdyn.drive.optim import make_optimizer
    from fastdyn.drive.train import train
    from fastdyn.models.registry import get_model

    cfg = load_config(PRESET)
    job = get_model(cfg.model).setup(cfg)
    theta = job.theta.copy()
    opt = make_optimizer("gd", job.model.n_params, cfg.optim.lr)
    nothing = lambda th: ({}, {})  # noqa: E731
    train(job.model, job.prep, theta.copy(), opt, 10, [0, 10], observe=nothing)  # warm
    t0 = time.perf_counter()
    train(job.model, job.prep, theta, opt, epochs, [0, epochs], observe=nothing)
    return (time.perf_counter() - t0) / epochs


def kernel_in_run(d: Path) -> tuple[float, int]:
    """Seconds per call and number of calls of the model's ``loss_and_grad`` inside one in-process
    ``fastdyn simulate`` of the shipped config (cProfile's cumulative time: training steps plus
    the full-set loss evaluations at saves)."""
    import cProfile
    import pstats

    import fastdyn

    cfg = fastdyn.load_config(PRESET)
    prof = cProfile.Profile()
    prof.runcall(fastdyn.simulate, cfg, d / "prof.h5")
    st = pstats.Stats(prof)
    for (file, _line, name), (_cc, nc, _tt, ct, _callers) in st.stats.items():
        if name == "loss_and_grad" and file.endswith(("attn_m/__init__.py", "attn_s/__init__.py")):
            return ct / nc, nc
    raise RuntimeError("loss_and_grad not found in the profile")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=6001, help="epochs of the in-process timing")
    a = ap.parse_args()
    env = dict(os.environ)
    env1 = dict(env, NUMBA_NUM_THREADS="1")
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="icl-shipped-") as d:
        d = Path(d)
        run_process(d / "warm.h5", [], env)  # fills the numba cache
        files = export_files(d / "warm.h5", d)
        variants = {"shipped": ([], env), "files": (files, env), "1 thread": ([], env1)}
        got: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
        for _ in range(a.repeat):
            for name, (sets, e) in variants.items():
                got[name].append(run_process(d / "run.h5", sets, e))
        epochs = 6001
        print(
            f"{'variant':10s} {'wall s':>8s} {'CPU s':>8s} {'in-run s':>9s} {'in-run ms/epoch':>16s}"
        )
        for name, runs in got.items():
            med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
            print(
                f"{name:10s} {med['wall']:8.2f} {med['cpu']:8.2f} {med['in_run']:9.2f}"
                f" {1e3 * med['in_run'] / epochs:16.3f}"
            )
        per_call, calls = kernel_in_run(d)
    drive = float(np.median([per_epoch_driver(a.epochs) for _ in range(a.repeat)]))
    print(f"per epoch of the driver's loop (no saves, shipped model/data): {1e3 * drive:.3f} ms")
    step = float(np.median([per_epoch_in_process(a.epochs) for _ in range(a.repeat)]))
    print(
        f"per epoch in process (loss_and_grad + GD step, shipped model/data): {1e3 * step:.3f} ms"
    )
    print(
        f"loss_and_grad inside the shipped run (cProfile, {calls} calls): {1e3 * per_call:.3f} ms"
        f" per call; ratio to the line above {per_call / step:.2f}"
    )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
