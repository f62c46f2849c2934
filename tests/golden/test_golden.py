"""Golden-hash regression test: every shipped config and sweep writes bit-identical datasets.

tests/golden/_runs.py defines the runs (each config of data/configs/ at reduced sizes, a few
variants, and each sweep of data/sweeps/ on a reduced copy) and the hashing (every dataset's
dtype, shape and raw bytes; the root attributes but timings, versions, command line, creation
time and fastdyn version; the resolved config key by key). tests/golden/hashes.json holds the
hashes recorded by tests/golden/record.py, one set per recorded environment (CPU and library
versions: numba compiles for the host's vector width and numpy's libm kernels differ between AVX2
and AVX-512, so bit-identical hashes only hold on one environment). On a recorded environment every
hash is compared; on another, the portable ones (held and equal on every recorded environment:
configs, attributes, integer data, CPU-independent values).

A dataset or attribute that differs from its golden hash, or is missing, fails the test. One the
golden files do not have (a dataset, attribute or config field added since) is only reported, as a
warning; set FASTDYN_GOLDEN_STRICT=1 to fail on those too.

The runs go through the CLI in-process with numba set to 1 thread (fast on a loaded machine; the
hashes were recorded with numba's default thread count, so this also checks that the outputs do
not depend on it); FASTDYN_GOLDEN_THREADS=N uses N threads. ``test_golden_all_threads`` reruns a
few cheap runs with every numba thread.
"""

from __future__ import annotations

import os
import warnings

import numba
import pytest

from . import _runs

ENVS = _runs.load_golden()

#: cheap runs that reach the parallel kernels of every driver, rerun with all numba threads
ALL_THREADS = (
    "quickstart",
    "msfr_resources:rk4_random",
    "msfr_attn_scaling_d",
    "icl_fig1:white_population",
    "icl_variants:adam_minibatch",
    "sweep:split_example",
)


def _check(now: dict[str, dict[str, str]], names) -> None:
    env = _runs.environment()
    golden, exact, why = _runs.golden_for(ENVS, env)
    golden = _runs.select(golden, names)
    if not golden:
        pytest.skip(f"{why}; none portable: record them here with tests/golden/record.py")
    changed, added = _runs.diff(golden, now)
    strict = exact and os.environ.get("FASTDYN_GOLDEN_STRICT", "") not in ("", "0")
    if added and exact and not strict:
        warnings.warn(
            f"{len(added)} datasets/attributes not in the golden files (not compared):\n  "
            + "\n  ".join(added),
            stacklevel=2,
        )
    elif added and not exact:  # the CPU-dependent hashes: only compared where recorded
        n = sum(len(v) for v in golden.values())
        warnings.warn(f"{why}: compared the {n} portable hashes only", stacklevel=2)
    bad = changed + (added if strict else [])
    if not bad:
        return
    msg = [f"{len(bad)} differences from the golden hashes ({why}):"]
    msg += [f"  {line}" for line in bad]
    pytest.fail("\n".join(msg), pytrace=False)


def test_golden_runs_cover_every_shipped_file() -> None:
    root = _runs.repo_root() / "data"
    configs = {p.name for p in (root / "configs").glob("*.toml")}
    sweeps = {p.name for p in (root / "sweeps").glob("*.toml") if not p.name.startswith("_")}
    assert configs <= {cfg for _, cfg, _ in _runs.SIMULATE}, "a shipped config has no golden run"
    assert sweeps == {sw for _, sw, _ in _runs.SWEEPS}, "a shipped sweep has no golden run"
    for e in ENVS:  # every environment recorded every run (a stale run is dropped key by key)
        recorded = {k.split("/", 1)[0] for k in e["hashes"]}
        assert recorded == set(_runs.all_names()), "hashes.json and _runs.py list different runs"


def test_portable_hashes_are_held_and_equal_everywhere() -> None:
    """A hash is portable when every environment holds it with the same value: not when one
    environment dropped it as stale and two others (say both AVX-512) agree on it."""

    def env(**files):
        return {"recorded": {}, "hashes": files}

    envs = [
        env(a={"x": "1", "y": "2", "z": "3"}, b={"w": "4"}),
        env(a={"x": "1", "y": "9", "z": "3"}, b={"w": "4"}),
        env(a={"x": "1", "z": "3"}),  # y differs elsewhere; b not recorded here
    ]
    assert _runs.portable(envs) == {"a": {"x": "1", "z": "3"}}
    envs[2]["hashes"]["a"].pop("z")  # dropped as stale here: no longer portable
    assert _runs.portable(envs) == {"a": {"x": "1"}}
    assert _runs.portable(envs[:1]) == {}


def test_golden_hashes(tmp_path) -> None:
    threads = int(os.environ.get("FASTDYN_GOLDEN_THREADS", "1"))
    _check(_runs.run_all(tmp_path, threads=threads), _runs.all_names())


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba has a single thread")
def test_golden_all_threads(tmp_path) -> None:
    now = _runs.run_all(tmp_path, threads=numba.config.NUMBA_NUM_THREADS, only=ALL_THREADS)
    _check(now, ALL_THREADS)
