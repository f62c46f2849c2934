"""Run a computation in fresh interpreters with different numba thread counts.

numba sizes its thread pool from ``NUMBA_NUM_THREADS`` when it is first imported, and
``numba.set_num_threads`` can only lower the count below that size. A test process started with
``NUMBA_NUM_THREADS=1`` therefore cannot compare 1 thread with 2 in-process: such a comparison
would quietly compare one thread with one thread. :func:`outputs_per_thread_count` instead runs the
computation once per thread count, each in its own interpreter whose environment sets
``NUMBA_NUM_THREADS`` before numba is imported, checks that the pool really has that size, and
returns the arrays each run saved, for a bit-for-bit comparison.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = textwrap.dedent(
    """
    import os, sys
    import numba
    import numpy as np
    _want = int(os.environ["NUMBA_NUM_THREADS"])
    assert numba.config.NUMBA_NUM_THREADS == _want, numba.config.NUMBA_NUM_THREADS
    assert numba.get_num_threads() == _want, numba.get_num_threads()
    OUT = {}
    """
)

_SAVE = textwrap.dedent(
    """
    assert OUT, "the script saved nothing"
    np.savez(sys.argv[1], **OUT)
    """
)


def outputs_per_thread_count(
    script: str, tmp_path: Path, counts=(1, 2), timeout: float = 300.0
) -> list[dict[str, np.ndarray]]:
    """Run ``script`` (it fills the dict ``OUT`` with named arrays) once per thread count in
    ``counts``; returns, per count, the arrays it saved."""
    code = _PRELUDE + textwrap.dedent(script) + _SAVE
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    outs = []
    for nt in counts:
        dest = Path(tmp_path) / f"threads_{nt}.npz"
        env = dict(os.environ, NUMBA_NUM_THREADS=str(nt), PYTHONPATH=path)
        p = subprocess.run(
            [sys.executable, "-c", code, str(dest)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert p.returncode == 0, f"NUMBA_NUM_THREADS={nt}:\n{p.stderr[-3000:]}"
        with np.load(dest) as z:
            outs.append({k: z[k] for k in z.files})
    return outs


def assert_bit_identical(outs: list[dict[str, np.ndarray]]) -> None:
    """Every run saved the same names, and each array is bit-for-bit the same in every run."""
    first = outs[0]
    for other in outs[1:]:
        assert other.keys() == first.keys()
        for k in first:
            a, b = first[k], other[k]
            assert a.dtype == b.dtype and a.shape == b.shape, k
            if a.dtype.kind == "f":
                assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)), k
            # bytes, not ==: −0.0 == 0.0 would hide a change of sign
            assert a.tobytes() == b.tobytes(), k
