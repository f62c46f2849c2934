"""``fastdyn warmup --cache-dir D``: compile every kernel into numba's cache directory D.

A job array, or a shared read-only install, then starts warm: every later run with
``NUMBA_CACHE_DIR=D`` loads its kernels from D instead of compiling them (docs/hpc.md).

What is compiled is whatever a run of each shipped preset (``fastdyn/presets/*.toml``) reaches,
shrunk to a few steps (each model's ``warmup.sizes``), plus variants that reach the other
integrators, closed forms, optimisers, attention variants and data paths of the same models (each
model's ``warmup.variants``), plus
``fastdyn fit`` on one output (the bootstrap kernels). The plan is built from the preset folder,
so a new preset is warmed without a change here. The runs go through the ``simulate`` command
itself (the same code a user's run goes through), into a temporary folder, in a child process
started with ``NUMBA_CACHE_DIR=D`` (numba reads it when it is imported).

The kernels declared with their argument types for each run (its model's ``warmup.precompile``:
e.g. a closed form reached first, a trained model's fused steps; for an ODE model on the generic solver,
the integrator built from its maths, which the driver declares itself) are compiled from those
declarations in a second process (:mod:`fastdyn._precompile`) beside the run that reaches them,
while that run compiles the rest (with ``warmup.compile_here``'s first), as a first ``fastdyn
simulate`` does (:mod:`fastdyn.drive.compile_beside`); ``--list`` prints both kinds. The small
runs remain for every other kernel (set-ups, first steps, the paths nothing declares).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import click

from .. import plugins
from ._common import UserError, flag_option, guarded, threads_option, verbosity


def _preset_model(name: str) -> str:
    from ..config import presets

    with open(presets.resolve(name), "rb") as f:
        data = tomllib.load(f)
    return str(data["model"]) if "model" in data else plugins.default()


def plan(models: tuple[str, ...] = ()) -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, preset, --set overrides) of every warm-up run, restricted to ``models`` if given:
    every shipped preset, a model no preset names (an installed plug-in) at its own defaults,
    then each model's ``warmup.variants``, each shrunk by its model's ``warmup.sizes`` (a preset
    of a model that declares none raises; a plug-in without them is warmed at its defaults)."""
    from ..config import presets
    from ..models.registry import get_model, model_names

    out = []
    for name in presets.names():
        out.append((name, name, (), _preset_model(name)))
    with_preset = {model for *_, model in out}
    for model in model_names():
        if model not in with_preset:  # a plug-in: its own defaults
            out.append((f"{model} defaults", "", (f'model="{model}"',), model))
        out += [
            (label, name, sets, model) for label, name, sets in get_model(model).warmup.variants
        ]
    runs = []
    for label, name, sets, model in out:
        if models and model not in models:
            continue
        tiny = get_model(model).warmup.sizes
        if not tiny and name:
            raise KeyError(f"model {model!r} declares no warmup sizes (preset {name})")
        if "data.n_test=0" in sets or any(s.startswith("data.P") for s in sets):
            tiny = tuple(s for s in tiny if not s.startswith("data.P"))
        runs.append((label, name, (*tiny, *sets)))
    return runs


def declared(name: str, sets: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (kernel, signature) pairs declared for a planned run (``name``, ``sets``: a preset and
    its overrides): those its model declares for that config (``warmup.precompile``, then
    ``warmup.compile_here``), else, for an ODE model, the generic solver's kernel that the driver
    derives from the model's maths (its ``setup`` is called for them:
    :func:`fastdyn.drive.ode_maths.precompile`)."""
    from .._precompile import name_of
    from ..config import load_config, presets
    from ..core.device import Device
    from ..models.registry import get_model

    cfg = load_config(presets.resolve(name) if name else None, list(sets))
    entry = get_model(cfg.model)
    hooks = (entry.warmup.precompile, entry.warmup.compile_here)
    pairs = [(k if isinstance(k, str) else name_of(k), s) for h in hooks if h for k, s in h(cfg)]
    if not pairs and entry.kind == "ode":
        from ..drive.ode_maths import precompile

        pairs = list(precompile(entry.setup(cfg, Device.CPU)))
    return pairs


def precompiles(runs: list[tuple[str, str, tuple[str, ...]]]) -> list[tuple[str, str]]:
    """Every (kernel, signature) pair the planned ``runs`` declare, each once, in plan order."""
    out: list[tuple[str, str]] = []
    for _, name, sets in runs:
        out += [p for p in declared(name, sets) if p not in out]
    return out


def _writable_dir(d: Path) -> str | None:
    """Why ``d`` cannot hold the cache, or None if it can (created if missing)."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=d).close()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


@click.command("warmup")
@click.option(
    "--cache-dir",
    "cache_dir",
    type=click.Path(file_okay=False),
    help="numba's cache directory to fill (required unless --list); later runs use it with "
    "NUMBA_CACHE_DIR=DIR.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    metavar="NAME",
    help="Warm only the kernels of this model (repeatable) [default: every model].",
)
@threads_option
@flag_option("--list", "as_list", help="Print the runs it would do and exit.")
@click.pass_context
@guarded
def command(ctx, cache_dir, models, threads, as_list) -> None:
    """Compile every kernel into a cache directory, so later runs start warm (docs/hpc.md)."""
    from ..models.registry import model_names

    known = list(model_names())
    bad = [m for m in models if m not in known]
    if bad:
        raise UserError(f"--model: unknown model {bad[0]!r}; models: {', '.join(known)}")
    runs = plan(tuple(models))
    if as_list:
        for kernel, sig in precompiles(runs):
            click.echo(f"precompile: {kernel} {sig}")
        for label, name, sets in runs:
            click.echo(
                f"{label}: fastdyn simulate {name + ' ' if name else ''}"
                + " ".join(f"--set '{s}'" for s in sets)
            )
        return
    if cache_dir is None:
        raise UserError(
            "--cache-dir: required: the directory to fill (only --list runs without it)"
        )
    d = Path(cache_dir).expanduser().resolve()
    why = _writable_dir(d)
    if why is not None:
        raise UserError(f"--cache-dir: {d} is not a writable directory ({why})")
    from .._precompile import environment

    env = environment(dict(os.environ, NUMBA_CACHE_DIR=str(d)))  # this fastdyn, not the cwd's
    child = "import sys; from fastdyn.cli.warmup import _child; sys.exit(_child(sys.argv[1:]))"
    args = [sys.executable, "-P", "-c", child, str(d), str(verbosity(ctx))]
    args += [f"--threads={threads}"] if threads else []
    r = subprocess.run([*args, *models], env=env)
    if r.returncode:
        sys.exit(r.returncode)


def _child(argv: list[str]) -> int:
    """The warm-up runs, in a process started with NUMBA_CACHE_DIR set (progress on stderr)."""
    cache, level, rest = argv[0], int(argv[1]), argv[2:]
    threads = [a for a in rest if a.startswith("--threads=")]
    models = tuple(a for a in rest if not a.startswith("--threads="))
    assert os.environ.get("NUMBA_CACHE_DIR") == cache and "numba" not in sys.modules
    from ._group import main

    def say(msg: str) -> None:
        if level >= 0:
            click.echo(msg, err=True)

    runs = plan(models)
    t0 = time.perf_counter()
    failed = []
    with tempfile.TemporaryDirectory(prefix="fastdyn-warmup-") as tmp:
        for i, (label, name, sets) in enumerate(runs, 1):
            t1 = time.perf_counter()
            out = str(Path(tmp) / f"run{i}.h5")
            todo = [["simulate", *([name] if name else []), "-o", out, "--quiet", *threads]]
            todo[0] += [a for s in sets for a in ("--set", s)]
            if label == "quickstart":  # `fastdyn fit`'s bootstrap kernels: serial, then parallel
                for n_boot in ("20", "50000"):
                    todo.append(["fit", out, "--window", "all", "--bootstrap", n_boot, "--json"])
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    for cmd in todo:
                        main.main(cmd, prog_name="fastdyn", standalone_mode=False)
            except (Exception, SystemExit) as e:  # noqa: BLE001 — report, go on with the rest
                failed.append(label)
                why = (err.getvalue().strip().splitlines() or [str(e) or type(e).__name__])[-1]
                say(f"[{i}/{len(runs)}] {label}: FAILED: {why}")
                continue
            say(f"[{i}/{len(runs)}] {label}: {time.perf_counter() - t1:.1f} s")
    wall = time.perf_counter() - t0
    if failed:
        click.echo(f"fastdyn: failed: warmup: {len(failed)} of {len(runs)} runs failed ({', '.join(failed)})", err=True)  # fmt: skip
        return 1
    say(
        f"warmed {len(runs)} runs into {cache} in {wall:.0f} s; use it with NUMBA_CACHE_DIR={cache}"
    )
    return 0
