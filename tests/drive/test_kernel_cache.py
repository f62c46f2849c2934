"""The generic kernels on disk (``drive/_kernel_cache.py``): a second process loads a model's kernel
from numba's cache instead of compiling it (≈ 3 s) and computes the same bits; a changed model
function, or a constant it reads, is another entry; a model whose compile-time values cannot be
named stably is not cached at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from fastdyn.drive import _kernel_cache

ROOT = Path(__file__).resolve().parents[2]

_RUN = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from fastdyn.drive import integrate_soa as soa
    from tests.drive.test_integrate_soa_dopri5 import (
        _logistic_table, _run, first_component, logistic_loss, logistic_rhs,
    )
    params, y0 = _logistic_table(100)
    y, h, counts, f, test, train = _run(
        logistic_rhs, first_component, logistic_loss, params, y0, np.geomspace(1e-2, 1e2, 7), 1e-8
    )
    k = soa._KERNELS[("dopri5", logistic_rhs, first_component, logistic_loss, None)]
    print(json.dumps({"hits": sum(k._cache_hits.values()), "misses": sum(k._cache_misses.values()),
                      "index": k._cache._cache_file._index_path,
                      "out": [a.tobytes().hex() for a in (y, h, counts, f, test, train)]}))
    """
)


def test_a_second_process_loads_the_kernel_and_computes_the_same_bits():
    """Two fresh interpreters: the first compiles the plug-in's dopri5 kernel and stores it (or
    loads it, when an earlier process of the suite stored it), the second loads it, without
    compiling, and its outputs are bit-identical. (numba's cache directory of the suite: an
    empty one would have every other kernel compiled too, ≈ 5 s more.)"""
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    got = []
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", _RUN], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        got.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert got[0]["misses"] + got[0]["hits"] == 1, got[0]
    assert (got[1]["misses"], got[1]["hits"]) == (0, 1), got[1]
    assert got[0]["out"] == got[1]["out"]
    assert got[0]["index"] == got[1]["index"] and Path(got[1]["index"]).is_file()


_HELPER = """
from numba import njit

@njit
def helper(x):
    return {helper}
"""

_MODEL = """
from numba import njit

RATE = 2.0

@njit
def rhs(p, y, dy):
    dy[0] = RATE * helper(y[0])
"""


def _load(path: Path, text: str):
    import importlib.util

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fingerprint_of(d: Path, helper: str = "x * x", rate: float | None = None) -> str | None:
    """A model (rhs in one file, its callee in another) and a closure over it, as integrate_soa's
    kernels are over the model's functions; the fingerprint of that closure."""
    mod = _load(d / "model.py", _MODEL)
    mod.helper = _load(d / "helpers.py", _HELPER.format(helper=helper)).helper
    if rate is not None:
        mod.RATE = rate  # numba reads a global once, at compile time

    def kernel(y):
        mod.rhs(y, y, y)

    return _kernel_cache.fingerprint(kernel)


def test_the_fingerprint_follows_the_model_functions_their_callees_and_constants(tmp_path):
    """The same sources (in another folder, so another process, another install) give the same
    fingerprint; a changed callee in another file, or another value of a global the model reads,
    gives another."""
    fp = _fingerprint_of(tmp_path / "a")
    assert fp is not None and _fingerprint_of(tmp_path / "b") == fp
    assert _fingerprint_of(tmp_path / "c", helper="x * x * x") != fp
    assert _fingerprint_of(tmp_path / "d", rate=3.0) != fp


def test_no_fingerprint_for_a_value_without_a_stable_name():
    """A cell or global whose repr holds an address (an arbitrary object) cannot be named the same
    way in another process: no fingerprint, the kernel compiles uncached, as before."""
    box = object()

    def kernel(y):
        return box, y

    assert _kernel_cache.fingerprint(kernel) is None
    arr = np.arange(3.0)

    def kernel2(y):
        return arr[0] + y

    assert _kernel_cache.fingerprint(kernel2) is not None


_FLOW = """
from numba import njit


@njit
def rhs(p, y, dy):
    dy[0] = {sign}p[0] * y[0]


@njit
def observe(p, y):
    return y[0]


@njit
def loss(p, y):
    return y[0] * y[0], 0.0
"""

_RK4 = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from fastdyn.drive import integrate_soa as soa
    from fastdyn.reduce import block_partials

    out = {}
    for name in sys.argv[1:]:
        m = __import__(name)
        n, times = 8, np.array([0.5, 1.0])
        y, f = np.ones((1, n)), np.zeros((n, 2))
        pt, pr = block_partials(n, 2), block_partials(n, 2)
        soa.advance_rk4(m.rhs, m.observe, m.loss, np.ones((1, n)), y, 0.0, times, 0.01,
                        np.arange(n), pt, pr, f)
        out[name] = f[0].tolist()
    print(json.dumps(out))
    """
)


def test_two_models_kernels_from_two_processes_load_into_one(tmp_path):
    """Two models whose generic RK4 kernels were compiled in two processes (the same closures,
    numbered alike by numba) run in one third process that loads both from the cache: each
    computes its own flow (y' = −y and y' = +y, y(0) = 1; RK4 at h = 0.01 is within 1e-10 of
    e^∓t). Before the kernels' closures were named by their fingerprint, the second model's
    kernel ran the first model's step (one symbol, two bodies)."""
    for name, sign in (("decay_model", "-"), ("growth_model", "")):
        (tmp_path / f"{name}.py").write_text(_FLOW.format(sign=sign))
    env = dict(
        os.environ, NUMBA_NUM_THREADS="1", NUMBA_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
    )  # fmt: skip
    runs = []
    for names in (["decay_model"], ["growth_model"], ["decay_model", "growth_model"]):
        r = subprocess.run(
            [sys.executable, "-c", _RK4, *names], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    both = runs[2]
    assert both["decay_model"] == runs[0]["decay_model"]
    assert both["growth_model"] == runs[1]["growth_model"]
    t = np.array([0.5, 1.0])
    np.testing.assert_allclose(both["decay_model"], np.exp(-t), rtol=1e-10)
    np.testing.assert_allclose(both["growth_model"], np.exp(t), rtol=1e-10)
