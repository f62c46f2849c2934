"""Where points run: ``local`` (this process), ``processes`` (a Dask LocalCluster), an existing
Dask scheduler (``tcp://host:port`` or a scheduler file, e.g. from dask-mpi), or ``slurm``/``pbs``
jobs through dask-jobqueue; and the ``sbatch --array`` line for SLURM job arrays without Dask.

numba under Dask (docs/sweeps.md): numba's default ``workqueue`` threading layer aborts when
``parallel=True`` kernels run from several Python threads of one process at once, so every worker
is a process with ONE Dask thread, and its numba pool is sized by ``NUMBA_NUM_THREADS`` (set in the
worker's environment before numba is imported) so that workers × threads ≤ cores.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from typing import Any

from .spec import SweepError

SCHEDULERS = ("local", "processes", "slurm", "pbs")
DIST_MISSING = "--scheduler {which}: needs Dask; install it with  pip install 'fastdyn[dist]'  (dask[distributed] and dask-jobqueue)"


def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_env(threads: int) -> dict[str, str]:
    """Environment of one worker process: numba (and BLAS/OpenMP) pools of ``threads``."""
    t = str(max(1, int(threads)))
    return {
        "NUMBA_NUM_THREADS": t,
        "OMP_NUM_THREADS": t,
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def ignore_terminal_sigint() -> None:
    """In a LocalCluster's worker process (its main thread, where Dask runs this): ignore SIGINT.
    Ctrl-C reaches the whole process group, workers included, where it killed the points' runs
    mid-write with tracebacks; the sweep process takes it and asks each worker to stop its point
    (``fastdyn.sweep.runner``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _need_distributed(which: str) -> Any:
    try:
        import distributed
    except ImportError:
        raise SweepError(DIST_MISSING.format(which=which)) from None
    return distributed


def split_threads(workers: int, n_cores: int | None = None) -> int:
    """numba threads per worker so that workers × threads ≤ cores (at least 1)."""
    return max(1, (n_cores or cores()) // max(1, workers))


def jobqueue_kwargs(kind: str, resources: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of dask-jobqueue's SLURMCluster/PBSCluster from a sweep's [resources]
    (plus flags): each job books ``cores`` CPUs and starts ``workers_per_job`` worker processes,
    each with one Dask thread and ``cores / workers_per_job`` numba threads."""
    c = int(resources.get("cores", 1))
    w = int(resources.get("workers_per_job", 1))
    if w > c:
        raise SweepError(f"resources.workers_per_job: must be ≤ resources.cores ({c}), got {w}")
    mem = resources.get("memory", f"{4 * c}GB")
    nthreads = c // w
    kw: dict[str, Any] = {
        "cores": w,  # Dask threads per job: one per worker process
        "processes": w,
        "memory": mem,
        "walltime": resources.get("walltime", "01:00:00"),
        "job_script_prologue": [f"export {k}={v}" for k, v in worker_env(nthreads).items()]
        + list(resources.get("prologue", [])),
        "job_extra_directives": list(resources.get("job_extra", [])),
        "scheduler_options": {"dashboard_address": None},
    }
    if "queue" in resources:
        kw["queue"] = resources["queue"]
    if "account" in resources:
        kw["account"] = resources["account"]
    if "interface" in resources:
        kw["interface"] = resources["interface"]
    if kind == "slurm":
        kw["job_cpu"] = c  # #SBATCH --cpus-per-task: the real CPUs (numba threads × workers)
    elif kind == "pbs":
        kw["resource_spec"] = f"select=1:ncpus={c}:mem={mem}"
    else:
        raise SweepError(f"--scheduler: job queues are slurm or pbs, got {kind!r}")
    return kw


def jobqueue_cluster(kind: str, resources: dict[str, Any]) -> Any:
    """A SLURMCluster/PBSCluster (nothing is submitted until it is scaled)."""
    try:
        import dask_jobqueue
    except ImportError:
        raise SweepError(DIST_MISSING.format(which=kind)) from None
    cls = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
    return cls(**jobqueue_kwargs(kind, resources))


@contextlib.contextmanager
def executor(
    scheduler: str,
    workers: int | None = None,
    resources: dict[str, Any] | None = None,
    log: Any = None,
) -> Iterator[tuple[Any, int | None]]:
    """``(executor or None, numba threads per point or None)`` for ``--scheduler``."""
    say = log or (lambda s: None)
    if scheduler == "local":
        if workers not in (None, 1):
            raise SweepError(
                "--workers: the local scheduler runs points one after another in this process; use --scheduler processes for several workers"
            )
        yield None, None
        return
    if scheduler == "processes":
        _need_distributed(scheduler)
        from distributed import Client, LocalCluster

        n = workers or cores()
        if n < 1:
            raise SweepError(f"--workers: must be ≥ 1, got {n}")
        t = split_threads(n)
        say(f"Dask LocalCluster: {n} worker processes × 1 thread, NUMBA_NUM_THREADS={t}")
        import dask

        env = worker_env(t)
        # pre-spawn: set before the worker process starts (numba reads NUMBA_NUM_THREADS at import,
        # which may happen while the worker re-imports the main module); env: once more in the worker
        saved = {k: os.environ.get(k) for k in env}

        def restore() -> None:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

        try:
            with dask.config.set({"distributed.nanny.pre-spawn-environ": env}):
                with (
                    LocalCluster(
                        n_workers=n,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        env=env,
                    ) as cl,
                    Client(cl) as client,
                ):
                    # The nanny, which lives in this process, put env into os.environ before
                    # spawning (and never takes it out). Undo that as soon as the workers are up:
                    # numba here would otherwise launch its pool with the workers' thread count,
                    # or refuse to recompile later ("Cannot set NUMBA_NUM_THREADS ... once the
                    # threads have been launched").
                    restore()
                    client.run(ignore_terminal_sigint, wait=True)
                    yield client, t
        finally:  # a worker restarted by its nanny sets env again
            restore()
        return
    if scheduler in ("slurm", "pbs"):
        _need_distributed(scheduler)
        from distributed import Client

        res = dict(resources or {})
        cl = jobqueue_cluster(scheduler, res)
        try:
            if workers:
                cl.scale(n=workers)
            else:
                cl.scale(jobs=int(res.get("jobs", 1)))
            say(f"dask-jobqueue {scheduler}: job script\n{cl.job_script()}")
            with Client(cl) as client:
                yield client, None
        finally:
            cl.close()
        return
    if scheduler.startswith(("tcp://", "tls://", "ucx://", "inproc://")) or scheduler.endswith(
        ".json"
    ):
        _need_distributed(scheduler)
        from distributed import Client

        if workers is not None:
            raise SweepError(
                "--workers: an existing Dask scheduler has its own workers; start them with  dask worker ADDRESS --nworkers K --nthreads 1"
            )
        kw = (
            {"scheduler_file": scheduler} if scheduler.endswith(".json") else {"address": scheduler}
        )
        if "scheduler_file" in kw and not os.path.isfile(scheduler):
            raise SweepError(f"--scheduler {scheduler}: no such scheduler file")
        try:
            client = Client(timeout="30s", **kw)
        except OSError as e:
            raise SweepError(
                f"--scheduler {scheduler}: cannot connect ({str(e).splitlines()[0]})"
            ) from None
        with client:
            many = {a: n for a, n in client.nthreads().items() if n > 1}
            if many:
                say(
                    f"warning: {len(many)} Dask workers have more than one thread; numba's workqueue layer aborts when parallel kernels run from several threads — start workers with --nthreads 1 and NUMBA_NUM_THREADS set"
                )
            yield client, None
        return
    raise SweepError(
        f"--scheduler: must be local, processes, slurm, pbs, a tcp:// address or a scheduler .json file, got {scheduler!r}"
    )


def array_line(
    sweep_path: str,
    out_dir: str,
    n_tasks: int,
    resources: dict[str, Any],
    parallel: int | None = None,
) -> str:
    """The ``sbatch --array`` command that runs shard i of ``n_tasks`` in each array task."""
    c = int(resources.get("cores", 1))
    parts = [
        "sbatch",
        f"--array=0-{n_tasks - 1}" + (f"%{parallel}" if parallel else ""),
        "--job-name=fastdyn-sweep",
        f"--cpus-per-task={c}",
    ]
    if "memory" in resources:
        parts.append(f"--mem={resources['memory']}")
    parts.append(f"--time={resources.get('walltime', '01:00:00')}")
    if "queue" in resources:
        parts.append(f"--partition={resources['queue']}")
    if "account" in resources:
        parts.append(f"--account={resources['account']}")
    parts += list(resources.get("job_extra", []))
    inner = (
        f"NUMBA_NUM_THREADS={c} fastdyn sweep {shlex.quote(sweep_path)} -o {shlex.quote(out_dir)}"
    )
    parts.append("--wrap=" + shlex.quote(inner))
    return " ".join(parts)
