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
The hashes depend on the numerical libraries and may depend on the CPU (BLAS kernels); the test
says so when its environment differs from the recorded one.
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
    if a.only and a.output.exists():  # merge: the other runs keep their hashes and provenance
        old = json.loads(a.output.read_text())
        drop = set(_runs.select(old["hashes"], a.only))
        hashes = {k: v for k, v in old["hashes"].items() if k not in drop} | hashes
        recorded = old["recorded"]
        recorded["merged"] = [*recorded.get("merged", []), env | {"runs": sorted(a.only)}]
    doc = {
        "note": (
            "Golden hashes of tests/golden/_runs.py (written by tests/golden/record.py): "
            "sha256 of dtype, shape and raw bytes of every dataset and of the stable root "
            "attributes; 'recorded' names the commit and machine (runs re-recorded with --only "
            "are listed under 'merged')"
        ),
        "recorded": recorded,
        "hashes": dict(sorted(hashes.items())),
    }
    a.output.write_text(json.dumps(doc, indent=1) + "\n")
    n = sum(len(v) for v in hashes.values())
    print(f"{a.output}: {len(hashes)} files, {n} hashes ({wall:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
