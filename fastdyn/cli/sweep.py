"""``fastdyn sweep SWEEP``: run a parameter sweep (or a split run) locally, on Dask or as a SLURM array.

docs/sweeps.md is the reference. Exit codes: 0 every point complete, 1 some point failed (the index
says which and why), 2 a user error (one line naming the field).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ._common import UserError, count_option, flag_option, guarded, output_option, verbosity

#: the job resources a flag sets (over ``resources.<name>`` of the sweep file): type and help
_RESOURCES: dict[str, tuple[Any, str]] = {
    "jobs": (click.IntRange(min=1), "slurm/pbs: jobs to start (resources.jobs)."),
    "cores": (click.IntRange(min=1), "slurm/pbs/--print-array: CPUs per job (resources.cores)."),
    "memory": (None, "slurm/pbs/--print-array: memory per job, e.g. 16GB (resources.memory)."),
    "walltime": (
        None,
        "slurm/pbs/--print-array: wall time per job, e.g. 02:00:00 (resources.walltime).",
    ),
    "queue": (None, "slurm/pbs/--print-array: partition or queue (resources.queue)."),
    "account": (None, "slurm/pbs/--print-array: account to charge (resources.account)."),
}


def resource_options(command: Callable) -> Callable:
    """``--jobs``, ``--cores``, … (:data:`_RESOURCES`, in that order), passed as keyword
    arguments named after the resource."""
    for name, (kind, help) in reversed(_RESOURCES.items()):
        command = click.option(f"--{name}", type=kind, help=help)(command)
    return command


@click.command("sweep")
@click.argument("sweep_file", metavar="SWEEP")
@output_option(
    "Output directory [default: sweep.output, else results/<SWEEP name>]; created with its parents when missing.",
    directory=True,
)
@click.option(
    "--scheduler",
    default="local",
    show_default=True,
    metavar="local|processes|ADDRESS|slurm|pbs",
    help="local: points one after another in this process; processes: a Dask LocalCluster; tcp://… or a scheduler .json file: an existing Dask scheduler; slurm/pbs: dask-jobqueue.",
)
@count_option(
    "--workers",
    help="Worker processes (processes: default one per core; slurm/pbs: total workers).",
)
@flag_option(
    "--resume",
    help="Continue the sweep in the output directory: complete points are skipped, failed ones retried once.",
)
@click.option(
    "--shard",
    metavar="I/N",
    help="Run only shard I of N (points with id ≡ I mod N), idempotently; default from SLURM_ARRAY_TASK_ID/COUNT when set.",
)
@flag_option(
    "--print-array",
    help="Print the sbatch --array line that runs this sweep as a SLURM job array, and exit.",
)
@count_option(
    "--array-size",
    help="With --print-array: number of array tasks [default: one per point].",
)
@flag_option("--reindex", help="Rebuild the index from the point files present, and exit.")
@count_option(
    "--threads",
    help="numba threads per point [default: all cores (local), cores/workers (processes)].",
)
@count_option(
    "--split-tasks",
    "split_parts",
    help="Run the sweep's single config as one ODE run split into this many task-index parts (overrides [split] parts).",
)
@flag_option("--list", "list_points", help="Print the points (name and swept values) and exit.")
@resource_options
@click.pass_context
@guarded
def command(
    ctx: click.Context,
    sweep_file: str,
    output,
    scheduler,
    workers,
    resume,
    shard,
    print_array,
    array_size,
    reindex,
    threads,
    split_parts,
    list_points,
    **res_flags,
) -> None:
    """Run the points of SWEEP (a sweep TOML file), one HDF5 file each, plus an index file.

    With a [split] table or --split-tasks K: run SWEEP's single config (or SWEEP itself, when it
    is a plain config file) as one ODE run split by task index, bit-identical to simulate."""
    from ..sweep import cluster, runner, spec

    quiet = verbosity(ctx) < 0
    say = (lambda s: None) if quiet else (lambda s: click.echo(s, err=True))
    src = Path(sweep_file)
    if split_parts and src.is_file() and not spec.is_sweep_text(src.read_text(errors="replace")):
        sw = spec.from_config(src)  # a plain config: fastdyn sweep CONFIG --split-tasks K
    else:
        sw = spec.load(src)
    resources = dict(sw.resources)
    resources.update({k: v for k, v in res_flags.items() if v is not None})
    out_dir = runner.output_dir(sw, output)
    if list_points:
        for p in sw.points():
            click.echo(f"{p.name}  " + "  ".join(f"{k}={v}" for k, v in p.params.items()))
        return
    if print_array:
        n = array_size or len(sw.points())
        click.echo(
            cluster.array_line(
                str(Path(sweep_file).resolve()), str(out_dir.resolve()), n, resources
            )
        )
        return
    if reindex:
        res = runner.reindex(sw, out_dir)
        say(f"{res.index}: {_summary(res.counts())}")
        return
    parts = split_parts or sw.split.get("parts")
    if parts is not None or sw.split:
        _split(sw, out_dir, parts, scheduler, workers, resources, threads, say)
        return
    sh = None
    if shard is not None:
        sh = spec.parse_shard(shard)
    else:
        sh = spec.shard_from_env(dict(os.environ))
        if sh is not None:
            say(f"SLURM array task: shard {sh[0]}/{sh[1]}")
    try:
        with cluster.executor(scheduler, workers, resources, log=say) as (ex, t):
            res = runner.run_sweep(
                sw,
                out_dir,
                executor=ex,
                resume=resume,
                shard=sh,
                threads=threads or t,
                log=say if verbosity(ctx) > 0 else None,
            )
    except KeyboardInterrupt:
        say(_resume_hint(sweep_file, out_dir))
        sys.exit(130)
    if res.interrupted and scheduler != "local":  # its workers are gone now: their final word
        runner.settle(sw, res, out_dir)
    say(f"{res.index}: ran {len(res.ran)} points; {_summary(res.counts())}")
    for p in res.points:
        r = res.rows[p.id]
        if r.status.startswith("failed") and p.name in res.ran:
            say(f"  {p.name}: {r.status}")
    if res.interrupted:
        from ..drive.checkpoint import EXIT_CODES

        say(_resume_hint(sweep_file, out_dir))
        sys.exit(EXIT_CODES.get(res.signal or "", 130))
    if res.failed:
        sys.exit(1)


def _resume_hint(sweep_file: str, out_dir: Path) -> str:
    return f"interrupted; continue with  fastdyn sweep {sweep_file} -o {out_dir} --resume"


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))


def _split(sw, out_dir: Path, parts, scheduler, workers, resources, threads, say) -> None:
    from ..config.load import from_dict
    from ..drive.checkpoint import exit_code
    from ..drive.split import plan, run_split
    from ..sweep import cluster

    unknown = set(sw.split) - {"parts", "file"}
    if unknown:
        raise UserError(f"split.{sorted(unknown)[0]}: unknown key; allowed: file, parts")
    if sw.axes or sw.seeds is not None:
        raise UserError(
            "split: a split run divides one config; remove [grid], [[zip]] and sweep.seeds (or sweep them without splitting)"
        )
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise UserError(f"split.parts: must be an integer ≥ 1 (task-index parts), got {parts!r}")
    name = sw.split.get("file", "run.h5")
    if not (isinstance(name, str) and name.endswith(".h5") and "/" not in name):
        raise UserError(f"split.file: must be a file name ending in .h5, got {name!r}")
    cfg = from_dict(sw.base)
    try:
        spans = plan(cfg, parts)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    out = out_dir / name
    if out.exists():
        raise UserError(f"--output {out_dir}: {name} exists; remove it or choose another -o")
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"split run: {sum(n for _f, n in spans)} tasks in {len(spans)} parts of whole chunks")
    with cluster.executor(scheduler, workers, resources, log=say) as (ex, t):
        status = run_split(cfg, out, parts, ex, threads or t)
    say(f"{out}: {status}")
    if not status.startswith("complete"):
        sys.exit(exit_code(status))
