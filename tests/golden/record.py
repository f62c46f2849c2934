"""Record tests/golden/hashes.json: the hashes of every golden run (tests/golden/_runs.py).

The runs use whichever ``fastdyn`` Python imports, and that checkout's data/configs and
data/sweeps. To record the hashes of a given commit (e.g. main before a refactor), check the
commit out in a separate worktree and put it first on PYTHONPATH (the venv has the main checkout
installed editable, so without PYTHONPATH the main checkout would be imported):

    git worktree add /tmp/golden_wt COMMIT
    cd /tmp/golden_wt
    PYTHONPATH=/tmp/golden_wt /work/main/.venv/bin/python /work/main/tests/golden/record.py
    cd /work/main && git worktree remove --force /tmp/golden_wt

It prints the imported package's path and commit (check them) and writes the commit, the CPU
model, the numba thread count and the library versions beside the hashes. Options:
``--threads N`` (numba threads; default: numba's default, all cores), ``-o FILE`` (default:
tests/golden/hashes.json), ``--only NAME`` (repeatable: record and merge just these runs).
The hashes depend on the numerical libraries and on the CPU (numba compiles for the host's vector
width, numpy's libm kernels differ between AVX2 and AVX-512), so hashes.json keeps one set per
recorded environment: recording replaces this environment's set and drops, from the others, every
hash that changed here or is no longer written (stale there). On an environment with no set the test compares the hashes
all recorded environments agree on.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _runs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None, help="numba threads [numba's default]")
    p.add_argument("-o", "--output", type=Path, default=_runs.HASHES, help="[%(default)s]")
    p.add_argument("--only", action="append", help="run name (repeatable); merged into -o")
    a = p.parse_args(argv)
    import numba

    import fastdyn

    unknown = set(a.only or ()) - set(_runs.all_names())
    if unknown:
        p.error(f"--only: unknown run(s) {sorted(unknown)}; known: {_runs.all_names()}")
    env = _runs.environment()
    env["threads"] = a.threads or numba.get_num_threads()
    print(f"fastdyn: {fastdyn.__file__} (commit {env['commit']}); {env['cpu']}", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="golden-") as d:
        hashes = _runs.run_all(Path(d), threads=a.threads, only=a.only, log=print)
    wall = time.perf_counter() - t0
    recorded = env | {"wall_s": round(wall, 1)}
    envs = _runs.load_golden(a.output) if a.output.exists() else []
    here = next((e for e in envs if _runs.same_environment(e["recorded"], env)), None)
    before = here["hashes"] if here else {}
    if a.only:  # merge: the other runs keep their hashes and provenance
        if here is None:
            p.error("--only: no full record for this environment yet; record every run first")
        drop = set(_runs.select(before, a.only))
        hashes = {k: v for k, v in before.items() if k not in drop} | hashes
        recorded = here["recorded"]
        recorded["merged"] = [*recorded.get("merged", []), env | {"runs": sorted(a.only)}]
    # Other environments: a hash that changed here (or is new) is stale there; drop it, so that
    # environment compares only what this commit did not change (it is re-recorded there later).
    # So is one this commit no longer writes (a dataset renamed or removed in a recorded file).
    stale = 0
    others = [e for e in envs if e is not here]
    if here is not None:
        for e in others:
            for f, keys in hashes.items():
                theirs = e["hashes"].setdefault(f, {})
                for k in list(theirs):
                    gone = k in before.get(f, {}) and k not in keys
                    if gone or (k in keys and before.get(f, {}).get(k) != keys[k]):
                        del theirs[k]
                        stale += 1
    envs = [*others, {"recorded": recorded, "hashes": dict(sorted(hashes.items()))}]
    doc = {
        "note": (
            "Golden hashes of tests/golden/_runs.py (written by tests/golden/record.py): "
            "sha256 of dtype, shape and raw bytes of every dataset and of the stable root "
            "attributes, per recorded environment (CPU and library versions); 'recorded' names "
            "the commit and machine (runs re-recorded with --only are listed under 'merged'); "
            "hashes that a later commit changed on another environment are dropped here"
        ),
        "environments": envs,
    }
    a.output.write_text(json.dumps(doc, indent=1) + "\n")
    n = sum(len(v) for v in hashes.values())
    print(f"{a.output}: {len(hashes)} files, {n} hashes ({wall:.1f} s); {stale} stale elsewhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
