"""FMA contraction stays inside the kernels that ask for it (models/msfr/lanes.py, models/msfr/lanes_dopri5.py).

numba compiles a jitted callee that is not inlined with the fastmath flags of the caller that first
needs it, and every later caller (in the process, or through the cache) gets that version: the
results of, e.g., the softmax attention weights (models/_fastexp.exp_nonpos) would depend on
which kernel was compiled first. The contracted kernels therefore call only numba-IR-inlined
functions; this checks that the shared exp_nonpos and log_pos are never compiled contracted."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_contracted_kernels_leave_shared_functions_alone(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np
        from fastdyn.models.msfr import lanes, lanes_dopri5 as L
        from fastdyn.models._fastexp import exp_nonpos, log_pos

        W = np.zeros(L.DP_NW * L.DP_LANES)
        W[L._OERR : L._OERR + L.DP_LANES] = 0.5
        L._dp_pow_lanes(W)
        L._dp_step_lanes(W, 1e-14, 1e-8)
        lanes._lanes_rk4(np.zeros(lanes._NW * lanes.LANES), 1, 1.0, np.zeros(2, np.int64))
        assert abs(W[L._OPW] - 0.5 ** -0.2) < 1e-15
        exp_nonpos(-1.0), log_pos(2.0)  # what any other kernel would use
        for f in (exp_nonpos, log_pos):
            assert f.signatures, f.__name__
            for sig in f.signatures:  # compiled here (empty cache), so their LLVM IR is known
                ir = f.inspect_llvm(sig)
                assert " contract " not in ir and "fmul" in ir, (f.__name__, sig)
        print("ok")
        """
    )
    env = {"NUMBA_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
