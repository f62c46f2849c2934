"""How idle kernel threads wait (imported by ``fastdyn/__init__.py`` before any kernel runs).

numba's ``omp`` threading layer (GNU libgomp) lets a thread that reaches the end of a parallel
region spin for ~300 000 iterations before it sleeps. fastdyn launches many short regions (the ICL
per-sample kernels: ~0.1 ms per epoch at Fig. 1 size), so on a shared machine the spinning
threads take the cores the working thread needs: with the 2-core machine at load 5, the shipped
``icl_fig1.toml`` (2001 epochs) took 6.5–34 s with the default policy against 2.7–3.6 s with
``OMP_WAIT_POLICY=PASSIVE`` and 2.5 s on one thread. Unless the user chose a policy
(``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` set), fastdyn asks for ``PASSIVE``: idle threads sleep
at once. libgomp reads it when numba first loads the layer, i.e. at the first parallel kernel
call; a process that ran a numba parallel kernel before importing fastdyn keeps its policy. The
threads' results do not depend on it (fixed-order block reductions).
"""

from __future__ import annotations

import os

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
