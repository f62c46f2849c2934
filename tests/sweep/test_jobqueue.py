"""Acceptance 7: the dask-jobqueue path builds the SLURM (and PBS) job script — without
submitting anything — with the sweep's resources and the one-thread worker command; and the
SLURM array line of --print-array."""

from __future__ import annotations

import shlex

from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.sweep.cluster import jobqueue_cluster

from .conftest import SWEEP12, write_sweep

RES = {
    "cores": 8,
    "workers_per_job": 2,
    "memory": "16GB",
    "walltime": "02:00:00",
    "queue": "short",
    "account": "proj",
    "prologue": ["module load python"],
    "job_extra": ["--constraint=cpu"],
    "interface": "lo",
}


def test_slurm_job_script():
    cl = jobqueue_cluster("slurm", RES)  # starts a scheduler on the loopback interface only
    try:
        script = cl.job_script()
        addr = cl.scheduler_address
    finally:
        cl.close()
    assert addr.startswith("tcp://127.0.0.1:")
    lines = script.splitlines()
    for want in (
        "#SBATCH -p short",
        "#SBATCH -A proj",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH -t 02:00:00",
        "#SBATCH --constraint=cpu",
        "export NUMBA_NUM_THREADS=4",
        "module load python",
    ):
        assert want in lines, (want, script)
    mem = [ln for ln in lines if ln.startswith("#SBATCH --mem=")]
    assert len(mem) == 1 and mem[0] in (
        "#SBATCH --mem=15G",
        "#SBATCH --mem=16G",
    )  # 16 GB = 14.9 GiB, rounded by dask-jobqueue
    (cmd,) = [ln for ln in lines if "distributed.cli.dask_worker" in ln]
    argv = shlex.split(cmd)
    assert argv[argv.index("-m") + 1] == "distributed.cli.dask_worker" and addr in argv
    # 2 worker processes per job, each with ONE Dask thread (numba's pool: NUMBA_NUM_THREADS = 8/2)
    assert argv[argv.index("--nthreads") + 1] == "1" and argv[argv.index("--nworkers") + 1] == "2"
    assert argv[argv.index("--interface") + 1] == "lo"
    assert lines.index("export NUMBA_NUM_THREADS=4") < lines.index(cmd)


def test_pbs_job_script():
    cl = jobqueue_cluster("pbs", RES)
    try:
        script = cl.job_script()
    finally:
        cl.close()
    assert "#PBS -l select=1:ncpus=8:mem=16GB" in script.splitlines()
    assert (
        "#PBS -l walltime=02:00:00" in script.splitlines()
        and "#PBS -q short" in script.splitlines()
    )
    assert "--nthreads 1" in script and "--nworkers 2" in script


def test_print_array(tmp_path):
    path = write_sweep(
        tmp_path, SWEEP12 + '\n[resources]\ncores = 4\nmemory = "8G"\nwalltime = "00:30:00"\n'
    )
    r = CliRunner().invoke(
        main, ["sweep", str(path), "-o", str(tmp_path / "o"), "--print-array", "--queue", "short"]
    )
    assert r.exit_code == 0, r.output
    argv = shlex.split(r.output.strip())
    assert argv[:2] == ["sbatch", "--array=0-11"]  # one array task per point by default
    assert {"--cpus-per-task=4", "--mem=8G", "--time=00:30:00", "--partition=short"} <= set(argv)
    (wrap,) = [a for a in argv if a.startswith("--wrap=")]
    inner = shlex.split(wrap[len("--wrap=") :])
    assert inner[0] == "NUMBA_NUM_THREADS=4" and inner[1:4] == [
        "fastdyn",
        "sweep",
        str(path.resolve()),
    ]
    assert inner[inner.index("-o") + 1] == str((tmp_path / "o").resolve())
    assert not (tmp_path / "o").exists()  # nothing run, nothing written
    r = CliRunner().invoke(main, ["sweep", str(path), "--print-array", "--array-size", "4"])
    assert shlex.split(r.output.strip())[1] == "--array=0-3"
