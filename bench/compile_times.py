"""Compile time per kernel of one ``fastdyn`` command run with an empty numba cache.

Runs the command in a child process whose ``NUMBA_CACHE_DIR`` is a fresh empty directory, with
numba's event API (``numba:compile``) recording how long each dispatcher's compilation takes,
exclusive of the compilations nested inside it (a kernel calling another kernel compiles it
first). Prints the process wall time, the compile total and the slowest kernels; then runs the
same command again on the now-warm cache for the process wall time without compilation.

Run: ``.venv/bin/python bench/compile_times.py [--top 25] -- -q simulate quickstart -o x.h5 --overwrite``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import collections, json, sys, time
from numba.core import event

spent = collections.defaultdict(float)
count = collections.Counter()
stack = []


class Timer(event.Listener):
    def on_start(self, e):
        f = e.data["dispatcher"].py_func
        stack.append((f"{f.__module__}.{f.__qualname__}", time.perf_counter()))

    def on_end(self, e):
        name, t0 = stack.pop()
        dt = time.perf_counter() - t0
        spent[name] += dt
        count[name] += 1
        if stack:  # exclusive: the caller's compile time without its callees'
            spent[stack[-1][0]] -= dt


event.register("numba:compile", Timer())
from fastdyn.cli import main

try:
    main(sys.argv[2:], standalone_mode=False)
finally:
    with open(sys.argv[1], "w") as fh:
        json.dump({"spent": spent, "count": count}, fh)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="fastdyn's arguments, after --")
    a = ap.parse_args()
    cmd = [c for c in a.command if c != "--"] or ["-q", "simulate", "quickstart", "-o", "x.h5"]
    print(f"# fastdyn {' '.join(cmd)}; load {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        out = os.path.join(d, "spent.json")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", _CHILD, out, *cmd], env=env, check=True)
        cold = time.perf_counter() - t0
        with open(out) as fh:
            got = json.load(fh)
        spent, count = got["spent"], got["count"]
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fastdyn", *cmd], env=env, check=True)
        warm = time.perf_counter() - t0
    total = sum(spent.values())
    print(f"cold process {cold:.1f} s, warm {warm:.1f} s (difference {cold - warm:.1f} s); "
          f"compiling {total:.1f} s in {len(spent)} dispatchers")  # fmt: skip
    for name, s in sorted(spent.items(), key=lambda kv: -kv[1])[: a.top]:
        n = count[name]
        print(
            f"{s:7.2f} s  {100 * s / total:4.1f} %  {name}"
            + (f"  ({n} signatures)" if n > 1 else "")
        )
    several = {k: n for k, n in count.items() if n > 1}
    print(f"dispatchers compiled for more than one signature: {several or 'none'}")
    print(f"# load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
