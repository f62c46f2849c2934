"""A first run on a cold numba cache compiles its integrator in a second process
(fastdyn.drive.compile_beside): the second process runs, the run's file is the same bits as a run
without it, nothing is left behind, and it is not started where it cannot help. Its effect on the
wall time (a cold quickstart 27.6 → 19 s) is in bench/RESULTS.md, not timed here."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from numba import njit

from fastdyn import _cache
from fastdyn.cli import main
from fastdyn.config import presets
from fastdyn.config.load import load_config
from fastdyn.drive import compile_beside as cb
from fastdyn.models.registry import get_model

SMALL = ("task.n_tasks=3000", "time.n_times=6", "output.track=[1, 2]")


def _run(path, *sets) -> None:
    args = ["-q", "simulate", "quickstart"]
    for s in (*SMALL, *sets):
        args += ["--set", s]
    res = CliRunner().invoke(main, [*args, "-o", str(path)])
    assert res.exit_code == 0, res.output


def _datasets(path) -> dict[str, np.ndarray]:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.update({n: o[()]}) if isinstance(o, h5py.Dataset) else None)
    return out


@njit(cache=True)
def _never_called(x):
    return x


def test_cache_probe():
    """Compiled and cached: True; never compiled: False; not a cached kernel: True (do nothing)."""
    from fastdyn.reduce import accumulate_blocks

    accumulate_blocks(np.zeros(2), np.zeros((1, 2)))  # compiled (or loaded) here
    assert _cache.has_cached(accumulate_blocks)
    assert not _cache.has_cached(_never_called)
    assert _cache.has_cached(len)


#: the cold run, in a fresh process: the CLI in-process, then the integrator's cache counts
_COLD = """
import sys
from click.testing import CliRunner
from fastdyn.cli import main
from fastdyn.models.msfr.integrate_kernels import dopri5_kernel
res = CliRunner().invoke(main, sys.argv[1:])
assert res.exit_code == 0, res.output
s = dopri5_kernel.stats
print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))
"""


@pytest.mark.skipif(cb._cores() < 2, reason="the second process needs two cores")
def test_a_cold_run_loads_the_integrator_the_second_process_compiled(tmp_path):
    """A run on an empty numba cache (a fresh process, its own NUMBA_CACHE_DIR): the second
    process compiles dopri5's kernel into the cache and the run loads it from there (one cache
    hit, no compile of its own; breaking the second process makes it a miss); the file is the same
    bits as a run in this process without the second process; no temporary directory is left."""
    import os
    import subprocess
    import sys

    tmp = tmp_path / "tmp"  # the child's own temporary folder: other processes' stay out of it
    tmp.mkdir()
    args = ["-q", "simulate", "quickstart"]
    for s in SMALL:
        args += ["--set", s]
    env = dict(
        os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp), **{cb.ENV: "1"}
    )
    out = subprocess.run(
        [sys.executable, "-c", _COLD, *args, "-o", str(tmp_path / "cold.h5")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "0"]
    assert list(tmp.iterdir()) == []
    _run(tmp_path / "plain.h5")  # this process: FASTDYN_COMPILE_BESIDE=0 (conftest)
    a, b = _datasets(tmp_path / "plain.h5"), _datasets(tmp_path / "cold.h5")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True), k


@pytest.mark.parametrize(
    "sets",
    [
        ('theory.level="none"',),
        ('solver.integrator="none"',),
        ('time.grid="explicit"', "time.times=[1.0, 2.0]"),
    ],
    ids=["no-theory", "no-ode", "explicit-times"],
)
def test_nothing_to_split(sets, monkeypatch):
    """A run with one phase (no closed form, or the closed form alone) starts nothing, nor does
    a run whose times the small run would not shrink."""
    monkeypatch.setattr(_cache, "has_cached", lambda d: False)
    cfg = load_config(presets.resolve("quickstart"), sets)
    assert get_model("msfr").warmup.compile_beside(cfg) is None


def test_not_started_where_it_cannot_help(monkeypatch):
    """Off by the environment, on one core, on the GPU, or with the kernels cached."""
    cfg = load_config(presets.resolve("quickstart"))
    entry = get_model("msfr")
    monkeypatch.setattr(_cache, "has_cached", lambda d: False)
    monkeypatch.setattr(cb, "_cores", lambda: 2)
    monkeypatch.setenv(cb.ENV, "0")
    assert cb.start(entry, cfg, "cpu") is None
    monkeypatch.setenv(cb.ENV, "1")
    assert cb.start(entry, cfg, "cuda") is None
    monkeypatch.setattr(cb, "_cores", lambda: 1)
    assert cb.start(entry, cfg, "cpu") is None
    monkeypatch.setattr(cb, "_cores", lambda: 2)
    monkeypatch.setattr(_cache, "has_cached", lambda d: True)
    assert cb.start(entry, cfg, "cpu") is None
    assert get_model("attn-m").warmup.compile_beside is None


def test_a_failed_or_slow_second_process_is_given_up(tmp_path, monkeypatch):
    """wait() is False for a process that failed, outlived WAIT_S or was waited for by a run
    asked to stop (then killed); the directory is removed either way, and the run goes on (to
    compile the kernels itself, or to stop)."""
    import subprocess
    import sys
    from types import SimpleNamespace

    stopped = SimpleNamespace(requested=True)
    cases = (
        ("raise SystemExit(3)", 60.0, None),  # failed
        ("import time; time.sleep(60)", 0.2, None),  # slower than WAIT_S
        ("import time; time.sleep(60)", 60.0, stopped),  # the run was asked to stop
    )
    for i, (code, limit, stop) in enumerate(cases):
        d = tmp_path / f"d{i}"
        d.mkdir()
        monkeypatch.setattr(cb, "WAIT_S", limit)
        p = subprocess.Popen([sys.executable, "-c", code])
        assert cb.Beside(p, d).wait(stop) is False
        assert p.poll() is not None and not d.exists()


def test_no_temporary_directory_no_second_process(monkeypatch):
    """An unwritable temporary directory (a full or read-only /tmp) only means no second
    process: start() returns None, and the run goes on as before."""
    cfg = load_config(presets.resolve("quickstart"))
    monkeypatch.setattr(_cache, "has_cached", lambda d: False)
    monkeypatch.setattr(cb, "_cores", lambda: 2)
    monkeypatch.setenv(cb.ENV, "1")

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cb.tempfile, "mkdtemp", full)
    assert cb.start(get_model("msfr"), cfg, "cpu") is None
