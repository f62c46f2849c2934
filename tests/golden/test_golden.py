"""Golden-hash regression test: every shipped config and sweep writes bit-identical datasets.

tests/golden/_runs.py defines the runs (each config of data/configs/ at reduced sizes, a few
variants, and each sweep of data/sweeps/ on a reduced copy) and the hashing (every dataset's
dtype, shape and raw bytes; the root attributes but timings, versions, command line, creation
time and fastdyn version; the resolved config key by key). tests/golden/hashes.json holds the
hashes recorded by tests/golden/record.py from the commit and on the CPU it names (its docstring
says how to re-record against a given commit).

A dataset or attribute that differs from its golden hash, or is missing, fails the test. One the
golden files do not have (a dataset, attribute or config field added since) is only reported, as a
warning; set FASTDYN_GOLDEN_STRICT=1 to fail on those too.

The runs go through the CLI in-process with numba set to 1 thread (fast on a loaded machine; the
hashes were recorded with numba's default thread count, so this also checks that the outputs do
not depend on it); FASTDYN_GOLDEN_THREADS=N uses N threads. ``test_golden_all_threads`` reruns a
few cheap runs with every numba thread.
"""

from __future__ import annotations

import json
import os
import warnings

import numba
import pytest

from . import _runs

GOLDEN = json.loads(_runs.HASHES.read_text())

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
    changed, added = _runs.diff(_runs.select(GOLDEN["hashes"], names), now)
    strict = os.environ.get("FASTDYN_GOLDEN_STRICT", "") not in ("", "0")
    if added and not strict:
        warnings.warn(
            f"{len(added)} datasets/attributes not in the golden files (not compared):\n  "
            + "\n  ".join(added),
            stacklevel=2,
        )
    bad = changed + (added if strict else [])
    if not bad:
        return
    rec = GOLDEN["recorded"]
    env = _runs.environment()
    moved = [f"{k}: {rec.get(k)} -> {env[k]}" for k in _runs.ENV_KEYS if rec.get(k) != env[k]]
    msg = [f"{len(bad)} differences from the golden hashes (recorded at {rec['commit']}):"]
    msg += [f"  {line}" for line in bad]
    if moved:
        msg.append(
            "the environment differs from the recorded one ("
            + "; ".join(moved)
            + "): re-record the reference commit here (tests/golden/record.py) before trusting this"
        )
    pytest.fail("\n".join(msg), pytrace=False)


def test_golden_runs_cover_every_shipped_file() -> None:
    root = _runs.repo_root() / "data"
    configs = {p.name for p in (root / "configs").glob("*.toml")}
    sweeps = {p.name for p in (root / "sweeps").glob("*.toml") if not p.name.startswith("_")}
    assert configs <= {cfg for _, cfg, _ in _runs.SIMULATE}, "a shipped config has no golden run"
    assert sweeps == {sw for _, sw, _ in _runs.SWEEPS}, "a shipped sweep has no golden run"
    recorded = {k.split("/", 1)[0] for k in GOLDEN["hashes"]}
    assert recorded == set(_runs.all_names()), "hashes.json and _runs.py list different runs"


def test_golden_hashes(tmp_path) -> None:
    threads = int(os.environ.get("FASTDYN_GOLDEN_THREADS", "1"))
    _check(_runs.run_all(tmp_path, threads=threads), _runs.all_names())


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba has a single thread")
def test_golden_all_threads(tmp_path) -> None:
    now = _runs.run_all(tmp_path, threads=numba.config.NUMBA_NUM_THREADS, only=ALL_THREADS)
    _check(now, ALL_THREADS)
