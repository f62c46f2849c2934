"""The golden runs and their hashing, shared by ``test_golden.py`` and ``record.py``.

Every shipped config (``data/configs/*.toml``) is run through ``fastdyn simulate`` with small
``--set`` overrides (the gallery's ``--quick`` sizes where they are small enough, smaller where
not), plus a few variants that reach other code paths of the same drivers (other models,
integrators, optimisers, population data). Every sweep (``data/sweeps/*.toml``; ``_*.toml`` are
bases) is run through ``fastdyn sweep`` on a *reduced copy*: the same ``[grid]``/``[[zip]]``/
seeds/``[split]`` tables, with extra ``sweep.sets`` appended that shrink each point (the sweep CLI
has no ``--set``). Every run that checkpoints does so on a schedule counted in its own steps
(:data:`CKPT`), so ``/checkpoint`` is deterministic and compared too; with the default (every 60 s
of wall time) whether a checkpoint exists would depend on the machine's speed.

Every HDF5 dataset of every output file is hashed (sha256 of dtype, shape and raw bytes), except
``/points/wall_s`` of a sweep index; so are the root attributes except those that legitimately
vary between runs (:data:`SKIP_ATTRS`). The runs go through ``fastdyn.cli.main`` in-process (one
numba warm-up for all), so whichever ``fastdyn`` is imported is the one measured: ``record.py``
run with ``PYTHONPATH=<worktree of an old commit>`` records that commit's hashes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
HASHES = HERE / "hashes.json"

#: root attributes that vary from run to run (or from release to release) by design;
#: ``identity_crc32`` is the checksum of ``versions`` among others, and ``versions`` names the
#: kernel release (a machine of the same CPU and libraries booted on another kernel changed it);
#: tests/reliability/test_identity.py checks it against the attributes it covers instead
SKIP_ATTRS = frozenset(
    {"timings", "versions", "command_line", "generated_by", "created", "identity_crc32"}
)
#: datasets that vary from run to run by design (a sweep index's per-point wall time)
SKIP_DATASETS = frozenset({"points/wall_s"})

#: deterministic checkpoints (counted in the run's own steps, never in seconds): MSFR after every
#: segment of output times, ICL at the first save 50 optimiser steps after the last checkpoint;
#: msfr-attn runs have no checkpoint
CKPT = {
    "msfr": "output.checkpoint_every=0",
    "icl": 'output.checkpoint_every="50 steps"',
    "msfr-attn": None,
    "msfr-h": "output.checkpoint_every=0",
}


def _log_steps(epochs: int, n: int) -> str:
    """scripts/_gallery.py's log_steps: about ``n`` log-spaced save steps 0, 1, …, epochs."""
    s = np.unique(np.round(np.geomspace(1, epochs, n)).astype(int))
    return "[" + ", ".join(str(x) for x in [0, *s.tolist()]) + "]"


# ICL: scripts/icl_*.py at --quick
_ICL_FIG1 = ("data.P=200", "schedule.epochs=6001", "data.n_test=50", "schedule.save_every=100")
_ICL_POP = ("data.population=true", "attention.reduced=true", "data.n_test=0")
_ICL_POP4 = ("data.population=true", "attention.reduced=true")

#: (name, config file in data/configs, --set overrides); the name is the key in hashes.json.
#: MSFR: the gallery's --quick sizes (scripts/msfr_*.py); msfr-attn: the gallery's or
#: scripts/msfr_attn_scaling.py's reduced sizes; ICL: scripts/icl_*.py at --quick (icl_fig4's
#: 200001-epoch small-init runs left out), plus finite-data runs of the population-only configs
SIMULATE: list[tuple[str, str, tuple[str, ...]]] = [
    # -- MSFR (ODE + closed form)
    (
        "quickstart",  # (not in the gallery)
        "quickstart.toml",
        ("task.n_tasks=5000", "time.n_times=48", "time.t_max=1e8", "output.track=[1, 10, 100]"),
    ),
    (
        "msfr_time",  # gallery --quick
        "msfr_time.toml",
        ("task.n_tasks=20000", "time.n_times=64", "time.t_max=1e8", "output.track=[1, 10, 100]"),
    ),
    (
        "msfr_time:beta05",  # the gallery's second case, on fewer tasks
        "msfr_time.toml",
        (
            "task.n_tasks=5000",
            "time.n_times=48",
            "time.t_max=1e8",
            "output.track=[1, 10, 100]",
            "task.beta=0.5",
            "task.psi0=10000",
        ),
    ),
    (
        "msfr_tasks",  # gallery --quick
        "msfr_tasks.toml",
        ("task.n_tasks=1000", "time.n_times=240", "time.t_max=1e7", "output.track=[1, 10, 100]"),
    ),
    (
        "msfr_resources:D100",  # gallery --quick (D scan)
        "msfr_resources.toml",
        ("task.n_tasks=10000", "time.n_times=64", "task.model_size=100"),
    ),
    (
        "msfr_resources:N1000",  # gallery --quick (data scan): multinomial counts
        "msfr_resources.toml",
        ("task.n_tasks=10000", "time.n_times=64", "task.n_samples=1000", "seed=1"),
    ),
    (
        "msfr_resources:rk4_random",  # variant: fixed-step RK4, random init, leading theory
        "msfr_resources.toml",
        (
            "task.n_tasks=5000",
            "time.n_times=32",
            "time.t_max=1e6",
            "task.n_samples=100000",
            'init.scheme="random"',
            'solver.integrator="rk4"',
            "solver.steps_per_timescale=8",
            'theory.level="leading"',
            "output.chunk_tasks=1024",
        ),
    ),
    # -- msfr-attn (trained attention on sampled MSFR sequences)
    (
        "msfr_attention",  # gallery --quick
        "msfr_attention.toml",
        ("task.n_tasks=200", "schedule.epochs=500"),
    ),
    (
        "msfr_attention:separate_adamw",  # variant: W_K^T W_Q of rank 1, AdamW
        "msfr_attention.toml",
        (
            "task.n_tasks=200",
            "task.n_samples=5000",
            "schedule.epochs=200",
            'attention.kq="separate"',
            "attention.rank=1",
            'optim.name="adamw"',
            "optim.lr=0.003",
            "optim.weight_decay=1e-5",
        ),
    ),
    (
        "msfr_attention:softmax",  # variant: softmax attention
        "msfr_attention.toml",
        (
            "task.n_tasks=200",
            "task.n_samples=5000",
            "schedule.epochs=200",
            "attention.softmax=true",
        ),
    ),
    ("msfr_attn_quick", "msfr_attn_quick.toml", ("task.n_tasks=200", "schedule.epochs=500")),
    (
        "msfr_noise",  # scripts/msfr_noise.py, shorter: dense features, noise 0.01
        "msfr_noise.toml",
        ("schedule.epochs=100", "schedule.n_saves=6", "task.n_samples=200", "data.n_test=200"),
    ),
    (
        "msfr_families:exponential",  # scripts/msfr_families.py's first family, on fewer tasks
        "msfr_families.toml",
        (
            "task.n_tasks=2000",
            "time.n_times=32",
            'task.strength_law="exponential"',
            "task.strength_decay=100",
        ),
    ),
    (
        "msfr_families:broken_p_rk4",  # frequency law broken power, rk4, finite N
        "msfr_families.toml",
        (
            "task.n_tasks=2000",
            "time.n_times=24",
            'task.frequency_law="broken-power"',
            "task.frequency_break=30",
            "task.alpha2=3.0",
            'solver.integrator="rk4"',
            "task.n_samples=100000",
        ),
    ),
    (
        "msfr_source_capacity",  # scripts/msfr_source_capacity.py's base, shorter: tau = 2, D = 8 < N_s
        "msfr_source_capacity.toml",
        ("data.tau=2.0", "task.model_size=8", "schedule.epochs=100", "schedule.n_saves=6"),
    ),
    (
        "msfr_h",
        "msfr_h.toml",
        ("time.n_times=16", "task.n_tasks=4", "time.t_max=50", "output.track=[1, 4]"),
    ),  # scripts/msfr_h.py's base (rank-2 projector)
    (
        "msfr_attn_scaling_d",  # scripts/msfr_attn_scaling.py's reduced size, D = 16
        "msfr_attn_scaling_d.toml",
        ("task.n_tasks=200", "task.n_samples=10000", "task.model_size=16", "schedule.epochs=300"),
    ),
    (
        "msfr_attn_scaling_n",  # scripts/msfr_attn_scaling.py's reduced size, N = 500, seed 1
        "msfr_attn_scaling_n.toml",
        ("task.n_tasks=2000", "task.n_samples=500", "seed=1", "schedule.epochs=300"),
    ),
    # -- in-context linear regression (attn-m, attn-s, mlp-cubic): the gallery's --quick runs
    ("icl_fig1", "icl_fig1.toml", (*_ICL_FIG1, "attention.ic_only=true")),  # as the gallery's
    ("icl_fig1:mlp-cubic", "icl_fig1.toml", (*_ICL_FIG1, 'model="mlp-cubic"')),
    (
        "icl_fig1:white_population",
        "icl_fig1.toml",
        (*_ICL_FIG1, 'data.spectrum="white"', *_ICL_POP),
    ),
    (
        "icl_fig3:population",
        "icl_fig3.toml",
        (*_ICL_POP, "schedule.epochs=60001", f"schedule.save_steps={_log_steps(60001, 200)}"),
    ),
    (
        "icl_fig3",  # finite data (the gallery's full-size P = 5000 run, reduced)
        "icl_fig3.toml",
        ("data.P=200", "data.n_test=50", "schedule.epochs=1001", "schedule.save_every=50"),
    ),
    (
        "icl_fig4:R1",
        "icl_fig4.toml",
        (*_ICL_POP4, "schedule.epochs=20001", f"schedule.save_steps={_log_steps(20001, 3000)}"),
    ),
    (
        "icl_fig4:R4",
        "icl_fig4.toml",
        (
            *_ICL_POP4,
            "attention.R=4",
            "schedule.epochs=20001",
            f"schedule.save_steps={_log_steps(20001, 3000)}",
        ),
    ),
    (
        "icl_fig4",  # finite data
        "icl_fig4.toml",
        ("data.P=200", "data.n_test=50", "schedule.epochs=501", "schedule.save_every=25"),
    ),
    (
        "icl_variants:softmax_attn_m",
        "icl_variants.toml",
        (
            "attention.softmax=true",
            "optim.lr=2e-2",
            "data.P=30",
            "schedule.epochs=2001",
            "data.n_test=20",
            "schedule.save_every=10",
        ),
    ),
    (
        "icl_variants:softmax_attn_s",
        "icl_fig3.toml",
        (
            "attention.softmax=true",
            "optim.lr=2e-2",
            "data.P=30",
            "data.n_test=20",
            "schedule.epochs=2001",
            "schedule.save_every=10",
        ),
    ),
    (
        "icl_variants:init_scale",
        "icl_variants.toml",
        (
            *_ICL_POP,
            'data.spectrum="white"',
            "init.scale=0.1",
            "schedule.epochs=2001",
            "schedule.save_every=10",
        ),
    ),
    (
        "icl_variants:cumulative",
        "icl_variants.toml",
        (
            "data.P=30",
            "schedule.epochs=51",
            "data.n_test=20",
            "optim.lr=5e-3",
            'attention.loss="cumulative"',
        ),
    ),
    (
        "icl_variants:last_token",
        "icl_variants.toml",
        ("data.P=30", "schedule.epochs=51", "data.n_test=20", "optim.lr=5e-3"),
    ),
    (
        "icl_variants:icl_fraction0",
        "icl_variants.toml",
        ("data.icl_fraction=0.0", "data.P=30", "schedule.epochs=51", "data.n_test=20"),
    ),
    (
        "icl_variants:D8_N16",
        "icl_variants.toml",
        (
            *_ICL_POP,
            "data.D=8",
            "data.N=16",
            'data.spectrum="white"',
            "init.scale=1e-3",
            "optim.lr=1e-2",
            "schedule.epochs=1001",
            "schedule.save_every=10",
        ),
    ),
    (
        "icl_variants:adam_minibatch",  # not in the gallery: Adam on minibatches (seeded order)
        "icl_variants.toml",
        (
            'optim.name="adam"',
            "optim.batch_size=10",
            "data.P=30",
            "data.n_test=20",
            "schedule.epochs=101",
        ),
    ),
]

#: (name, sweep file in data/sweeps, sweep.sets appended to the sweep's own); run with the local
#: scheduler (points one after another in this process), every point and the index hashed
SWEEPS: list[tuple[str, str, tuple[str, ...]]] = [
    ("compute_scan", "compute_scan.toml", ("task.n_tasks=100000", "time.n_times=16")),  # 10 points
    ("d_scan", "d_scan.toml", ("task.n_tasks=100000", "time.n_times=16")),  # 7 points
    ("n_scan", "n_scan.toml", ("task.n_tasks=100000", "time.n_times=16")),  # 9 N x 3 seeds
    ("law_map", "law_map.toml", ("task.n_tasks=20000", "time.n_times=16")),  # 15 dopri5 points
    (
        "split_example",  # one dopri5 run in 16 parts of whole 1024-task chunks
        "split_example.toml",
        ("task.n_tasks=20000", "output.chunk_tasks=1024", "time.n_times=16"),
    ),
]


# ------------------------------------------------------------------------------------------------
def repo_root() -> Path:
    """The checkout whose ``fastdyn`` is imported (its data/configs and data/sweeps are run)."""
    import fastdyn

    return Path(fastdyn.__file__).resolve().parents[1]


#: environment fields that may change the hashes (compared by the test when a hash differs)
ENV_KEYS = ("cpu", "llvm_cpu", "simd", "python", "numpy", "numba", "llvmlite", "h5py", "hdf5")
_SIMD = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512vl", "avx512_bf16", "asimd", "sve")


def environment() -> dict[str, Any]:
    """The imported checkout's commit, the CPU model and the numerical libraries' versions."""
    import platform
    import subprocess

    import h5py as _h5py
    import llvmlite
    import llvmlite.binding
    import numba

    root = repo_root()

    def git(*args: str) -> str:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        except OSError:
            return ""
        return r.stdout.strip() if r.returncode == 0 else ""

    commit = git("rev-parse", "HEAD") or "unknown"
    if git("status", "--porcelain", "--", "fastdyn", "data"):
        commit += " (with uncommitted changes in fastdyn/ or data/)"
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())  # the first CPU's
    except OSError:
        pass
    cpu = info.get("model name") or platform.processor() or "unknown"
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return {
        "commit": commit,
        "cpu": f"{cpu} ({platform.machine()})",
        "llvm_cpu": llvmlite.binding.get_host_cpu_name(),
        "simd": " ".join(f for f in _SIMD if f in flags),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "h5py": _h5py.__version__,
        "hdf5": _h5py.version.hdf5_version,
    }


def load_golden(path: Path = HASHES) -> list[dict[str, Any]]:
    """The recorded environments of ``hashes.json``: ``[{"recorded": env, "hashes": {...}}]``
    (one per machine/library combination the hashes were recorded on; an old single-environment
    file reads as one)."""
    doc = json.loads(Path(path).read_text())
    if "environments" in doc:
        return doc["environments"]
    return [{"recorded": doc["recorded"], "hashes": doc["hashes"]}]


def same_environment(recorded: dict[str, Any], env: dict[str, Any]) -> bool:
    """Whether hashes recorded on ``recorded`` are comparable bit for bit on ``env``."""
    return all(recorded.get(k) == env.get(k) for k in ENV_KEYS)


def portable(envs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The hashes that every recorded environment holds and agrees on (at least two): what does
    not depend on the CPU or the libraries (configs, attributes, integer data, and values no
    vector width or libm changes). A hash one environment dropped as stale is not portable:
    two environments of the same vector width agreeing on it would not show that a third kind
    of CPU computes the same bits."""
    out: dict[str, dict[str, str]] = {}
    if len(envs) < 2:
        return out
    for f in set.intersection(*(set(e["hashes"]) for e in envs)):
        for k, v in envs[0]["hashes"][f].items():
            if all(e["hashes"][f].get(k) == v for e in envs[1:]):
                out.setdefault(f, {})[k] = v
    return out


def golden_for(envs: list[dict[str, Any]], env: dict[str, Any]) -> tuple[dict, bool, str]:
    """``(hashes, exact, why)``: the hashes to compare with on ``env``; ``exact`` when they were
    recorded on the same environment (else only the :func:`portable` ones)."""
    for e in envs:
        if same_environment(e["recorded"], env):
            return e["hashes"], True, f"recorded on this environment at {e['recorded']['commit']}"
    names = "; ".join(f"{e['recorded']['cpu']}, {e['recorded']['llvm_cpu']}" for e in envs)
    return portable(envs), False, f"no hashes for this environment (recorded on: {names})"


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def _value_bytes(v: Any) -> list[bytes]:
    """dtype, shape and raw bytes of an attribute or dataset value (strings as utf-8)."""
    if isinstance(v, str):
        return [b"str", v.encode()]
    if isinstance(v, bytes):
        return [b"bytes", v]
    a = np.asarray(v)
    head = [a.dtype.str.encode(), repr(a.shape).encode()]
    if a.dtype.kind == "O":  # variable-length strings
        return head + [x.encode() if isinstance(x, str) else bytes(x) for x in a.ravel()]
    return head + [np.ascontiguousarray(a).tobytes()]


def _walk(g: h5py.Group, prefix: str, out: dict[str, str]) -> None:
    """Every link below ``g`` by its own name (a dataset hard-linked under two names, such as
    ``/time`` and ``/loss/time``, is hashed under both; soft and external links by their target)."""
    for name in sorted(g):
        path = f"{prefix}{name}"
        link = g.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            out[path] = _digest([b"external link", link.filename.encode(), link.path.encode()])
        elif isinstance(link, h5py.SoftLink):
            out[path] = _digest([b"soft link", link.path.encode()])
        else:
            obj = g[name]
            if isinstance(obj, h5py.Group):
                _walk(obj, path + "/", out)
            elif path not in SKIP_DATASETS:
                v = _value_bytes(obj[()])
                out[path] = _digest([obj.dtype.str.encode(), repr(obj.shape).encode(), *v[2:]])


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def hash_file(path: Path) -> dict[str, str]:
    """``{"@attr": digest, "dataset/path": digest}`` for one HDF5 file: the root attributes but
    :data:`SKIP_ATTRS`, every dataset but :data:`SKIP_DATASETS` (dtype, shape, raw bytes). The
    resolved config (``@config``, TOML text) is hashed per key, ``@config:task.n_tasks`` …, so
    that a config field added by a later version shows as new rather than as a changed text."""
    out: dict[str, str] = {}
    with h5py.File(path, "r") as f:
        for k in sorted(f.attrs):
            if k in SKIP_ATTRS:
                continue
            v = f.attrs[k]
            if k == "config" and isinstance(v, str):
                try:
                    flat = _flat(tomllib.loads(v))
                except tomllib.TOMLDecodeError:
                    flat = None
                if flat is not None:
                    for key in sorted(flat):
                        out[f"@config:{key}"] = _digest([json.dumps(flat[key]).encode()])
                    continue
            out[f"@{k}"] = _digest(_value_bytes(v))
        _walk(f, "", out)
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {v!r} as TOML")


def reduced_sweep_text(src: Path, extra_sets: tuple[str, ...]) -> str:
    """The sweep file ``src`` with ``extra_sets`` appended to its ``sweep.sets``."""
    data = tomllib.loads(src.read_text())
    data.setdefault("sweep", {})
    data["sweep"]["sets"] = [*data["sweep"].get("sets", []), *extra_sets]
    lines: list[str] = []
    for table, body in data.items():
        for tbl in body if isinstance(body, list) else [body]:
            lines.append(f"[[{table}]]" if isinstance(body, list) else f"[{table}]")
            lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in tbl.items()]
            lines.append("")
    return "\n".join(lines)


def _invoke(args: list[str]) -> None:
    from click.testing import CliRunner

    from fastdyn.cli import main

    res = CliRunner().invoke(main, ["-q", *args], catch_exceptions=False)
    if res.exit_code != 0:
        raise RuntimeError(f"fastdyn {' '.join(args)}: exit {res.exit_code}\n{res.output}")


def run_all(
    work: Path,
    *,
    threads: int | None = None,
    only: Iterable[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, dict[str, str]]:
    """Run the golden runs (``only``: those names) into ``work``; return ``{entry: {key:
    digest}}``, one entry per output file: the run's name, or ``sweep:<name>/index.h5``,
    ``sweep:<name>/points/p0000.h5`` … for a sweep. ``threads``: numba threads for the duration
    (restored afterwards; the outputs are bit-identical for any thread count)."""
    import numba

    before = numba.get_num_threads()
    if threads is not None:
        numba.set_num_threads(threads)
    try:
        return _run_all(work, None if only is None else set(only), log or (lambda s: None))
    finally:
        numba.set_num_threads(before)


def _run_all(
    work: Path, only: set[str] | None, say: Callable[[str], None]
) -> dict[str, dict[str, str]]:
    import time

    root = repo_root()
    configs, sweeps = root / "data" / "configs", root / "data" / "sweeps"
    out: dict[str, dict[str, str]] = {}
    for name, cfg, sets in SIMULATE:
        if only is not None and name not in only:
            continue
        model = tomllib.loads((configs / cfg).read_text()).get("model", "msfr")
        ck = CKPT.get(model, CKPT["icl"])
        h5 = work / (name.replace(":", "__") + ".h5")
        t = time.perf_counter()
        args = ["simulate", str(configs / cfg), "-o", str(h5), "--quiet"]
        for s in (*sets, *([ck] if ck else [])):
            args += ["--set", s]
        _invoke(args)
        out[name] = hash_file(h5)
        say(f"{name}: {time.perf_counter() - t:.2f} s")
    sdir = work / "sweeps"
    sdir.mkdir(exist_ok=True)
    for base in sweeps.glob("_*.toml"):  # bases, next to the reduced copies
        shutil.copyfile(base, sdir / base.name)
    for name, sweep, sets in SWEEPS:
        key = f"sweep:{name}"
        if only is not None and key not in only:
            continue
        t = time.perf_counter()
        copy = sdir / sweep
        copy.write_text(reduced_sweep_text(sweeps / sweep, (*sets, CKPT["msfr"])))
        res = work / f"sweep_{name}"
        _invoke(["sweep", str(copy), "-o", str(res)])
        for h5 in sorted(res.rglob("*.h5")):
            out[f"{key}/{h5.relative_to(res).as_posix()}"] = hash_file(h5)
        say(f"{key}: {time.perf_counter() - t:.2f} s")
    return out


def all_names() -> list[str]:
    """The run names, in run order (``sweep:<name>`` for the sweeps)."""
    return [n for n, _, _ in SIMULATE] + [f"sweep:{n}" for n, *_ in SWEEPS]


def select(hashes: dict[str, dict[str, str]], names: Iterable[str]) -> dict[str, dict[str, str]]:
    """The entries of ``hashes`` that belong to the runs ``names`` (a sweep's: every file)."""
    names = set(names)
    return {k: v for k, v in hashes.items() if k in names or k.split("/", 1)[0] in names}


#: golden keys a complete file no longer has: the resume state (``output.keep_checkpoint``)
DROPPED = "checkpoint/"


def diff(
    golden: dict[str, dict[str, str]], now: dict[str, dict[str, str]]
) -> tuple[list[str], list[str]]:
    """``(changed, added)``: lines ``entry: key differs|missing`` (and output files missing), and
    lines ``entry: key new`` (and new output files) for what ``golden`` does not have."""
    changed: list[str] = []
    added: list[str] = []
    for name in sorted(set(golden) | set(now)):
        g, n = golden.get(name), now.get(name)
        if g is None:
            added.append(f"{name}: new output file")
        elif n is None:
            changed.append(f"{name}: output file missing")
        else:
            for k in sorted(set(g) | set(n)):
                if k.startswith("@") and k[1:] in SKIP_ATTRS:
                    continue  # recorded before it was skipped: not compared
                if k not in n and k.startswith(DROPPED) and n.get("@status") == g.get("@status"):
                    continue  # resume state, removed from complete files by design (issue 17)
                if k not in n:
                    changed.append(f"{name}: {k} missing")
                elif k not in g:
                    added.append(f"{name}: {k} new")
                elif g[k] != n[k]:
                    changed.append(f"{name}: {k} differs")
    return changed, added
