"""Acceptance 1: a 12-point sweep gives identical results with `local` and with `processes`
(a Dask LocalCluster of 2 worker processes); and the index file format (docs/sweeps.md)."""

from __future__ import annotations

import math
import os

import h5py
import numpy as np

from fastdyn.sweep import load, parse, read, run_sweep

from .conftest import assert_same_point_files, loss


def test_local_equals_processes(local12, dask_client, tmp_path):
    path, out_local, res_local = local12
    client, threads = dask_client
    # one Dask thread per worker process, numba's pool sized so that workers x threads <= cores
    from fastdyn.sweep.cluster import cores

    assert threads == max(1, cores() // 2)
    assert set(client.nthreads().values()) == {1} and len(client.nthreads()) == 2
    pools = client.run(
        lambda: (
            __import__("numba").config.NUMBA_NUM_THREADS,
            __import__("os").environ["NUMBA_NUM_THREADS"],
        )
    )
    assert set(pools.values()) == {(threads, str(threads))}
    sw = load(path)
    res = run_sweep(sw, tmp_path / "proc", executor=client, threads=threads)
    assert len(res.points) == 12
    assert res.counts() == {"complete": 12} == res_local.counts()
    # the points really ran in the worker processes (not in this one), the local ones here
    assert set(res_local.pids.values()) == {os.getpid()}
    assert os.getpid() not in res.pids.values() and 1 <= len(set(res.pids.values())) <= 2
    for p in res.points:
        assert_same_point_files(out_local / p.relpath, tmp_path / "proc" / p.relpath)
    # not a comparison of constants: every point's curve differs from its neighbour's
    curves = [loss(out_local / p.relpath) for p in res.points]
    assert all(not np.array_equal(a, b) for a, b in zip(curves, curves[1:], strict=False))
    a, b = read(out_local / "index.h5"), read(tmp_path / "proc" / "index.h5")
    for k in a:
        if k not in ("_attrs", "wall_s"):
            assert a[k] == b[k], k


def test_index_format(local12):
    path, out, res = local12
    with h5py.File(out / "index.h5", "r") as f:
        assert f.attrs["format"] == "fastdyn-sweep" and int(f.attrs["format_version"]) == 1
        assert f.attrs["sweep"] == path.read_text()
        assert str(f.attrs["generated_by"]).startswith("fastdyn ")
        g = f["points"]
        n = 12
        assert g["id"].dtype == np.int64 and g["id"][()].tolist() == list(range(n))
        names = [x.decode() for x in g["name"][()]]
        assert names == [f"p{i:04d}" for i in range(n)]
        assert [x.decode() for x in g["status"][()]] == ["complete"] * n
        assert [x.decode() for x in g["path"][()]] == [f"points/{m}.h5" for m in names]
        assert [x.decode() for x in g["error"][()]] == [""] * n
        assert g["wall_s"].dtype == np.float64 and np.all(g["wall_s"][()] > 0)
        assert sorted(k for k in g if k.startswith("param:")) == [
            "param:seed",
            "param:task.alpha",
            "param:task.model_size",
        ]
        assert g["param:task.model_size"].dtype == np.float64
        assert g["param:task.model_size"][()].tolist() == [300.0] * 4 + [1100.0] * 4 + [2500.0] * 4
        assert g["param:seed"][()].tolist() == [0.0, 1.0] * 6
        for ds in g.values():
            assert ds.shape == (n,)
        # /runs: external links to each point file's root, readable through the index
        for m in names:
            link = f["runs"].get(m, getlink=True)
            assert (
                isinstance(link, h5py.ExternalLink)
                and link.filename == f"points/{m}.h5"
                and link.path == "/"
            )
        with h5py.File(out / "points" / "p0005.h5", "r") as pf:
            assert np.array_equal(f["runs/p0005/loss/test"][()], pf["loss/test"][()])
    assert not (out / "index.h5.tmp").exists()
    assert all(math.isfinite(r.wall_s) for r in res.rows.values())


def test_any_concurrent_futures_executor(local12, tmp_path):
    """The executor hook: a plain concurrent.futures pool (one thread: numba's workqueue layer
    must not see parallel kernels from two threads at once) gives the same files."""
    from concurrent.futures import ThreadPoolExecutor

    path, out_local, res_local = local12
    text = path.read_text().replace(
        "task.model_size = [300, 1100, 2500]", "task.model_size = [300]"
    )
    sw = parse(text)
    with ThreadPoolExecutor(max_workers=1) as pool:
        res = run_sweep(sw, tmp_path / "pool", executor=pool)
    assert res.counts() == {"complete": 4}
    by_config = {p.config_toml: p for p in res_local.points}
    for p in res.points:
        assert_same_point_files(
            out_local / by_config[p.config_toml].relpath, tmp_path / "pool" / p.relpath
        )


def test_missing_dask_is_a_clear_user_error(tmp_path, monkeypatch):
    import sys

    from click.testing import CliRunner

    from fastdyn.cli import main

    from .conftest import SWEEP12, write_sweep

    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` now fails
    path = write_sweep(tmp_path, SWEEP12)
    r = CliRunner().invoke(
        main, ["sweep", str(path), "-o", str(tmp_path / "o"), "--scheduler", "processes"]
    )
    assert r.exit_code == 2
    assert (
        r.output.strip()
        == "fastdyn: error: --scheduler processes: needs Dask; install it with  pip install 'fastdyn[dist]'  (dask[distributed] and dask-jobqueue)"
    )


def test_existing_scheduler_address(local12, dask_client, tmp_path):
    """--scheduler tcp://…: the CLI connects to a running Dask scheduler (here the LocalCluster
    of the `processes` test, on the loopback interface) and uses its workers."""
    from click.testing import CliRunner

    from fastdyn.cli import main

    from .conftest import write_sweep

    client, _ = dask_client
    addr = client.scheduler.address
    assert addr.startswith("tcp://127.0.0.1:")
    path, out_local, res_local = local12
    text = path.read_text().replace(
        "task.model_size = [300, 1100, 2500]", "task.model_size = [2500]"
    )
    sweep = write_sweep(tmp_path, text)
    r = CliRunner().invoke(
        main, ["sweep", str(sweep), "-o", str(tmp_path / "o"), "--scheduler", addr]
    )
    assert r.exit_code == 0, r.output
    assert "more than one thread" not in r.output
    by_config = {p.config_toml: p for p in res_local.points}
    for p in parse(text).points():
        assert_same_point_files(
            out_local / by_config[p.config_toml].relpath, tmp_path / "o" / p.relpath
        )
    r = CliRunner().invoke(
        main,
        ["sweep", str(sweep), "-o", str(tmp_path / "o2"), "--scheduler", addr, "--workers", "2"],
    )
    assert (
        r.exit_code == 2 and "--workers: an existing Dask scheduler has its own workers" in r.output
    )


_ENV_AT_IMPORT = dict(os.environ)  # collected before the session's cluster starts


def test_processes_cluster_leaves_this_process_env_alone(dask_client):
    """The nanny sets the workers' NUMBA_NUM_THREADS in os.environ before spawning them; left
    there, numba in this process launched its pool with the workers' count and later refused
    to recompile ("Cannot set NUMBA_NUM_THREADS ... once the threads have been launched")."""
    from fastdyn.sweep.cluster import worker_env

    client, threads = dask_client
    for k in worker_env(threads):
        assert os.environ.get(k) == _ENV_AT_IMPORT.get(k), k
    # the workers do have it
    got = client.run(lambda: os.environ.get("NUMBA_NUM_THREADS"))
    assert set(got.values()) == {str(threads)}
