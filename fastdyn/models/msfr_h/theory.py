"""The Riccati closed form of msfr-h (docs/msfr-h.md; docs/theory.md, MSFR).

For H = μΠ (Π a projector of any rank), p = Π(v + w), q = Π(v − w) obey dp/dt = −(#/N) μ r p,
dq/dt = +(#/N) μ r q, so P = |p|², Q = |q|² have P·Q = σ constant, f = μ(P − Q)/4, and P obeys
MSFR's Riccati equation with κ → μ, a → (#/N)μ. It is MSFR's closed form for the scalars
g = (√P0 + √Q0)/2, h = (√P0 − √Q0)/2 (which have (g ± h)² = P0, Q0): MSFR's kernel is reused.
For a general H, μ and Π come from its eigen-decomposition (Π: eigenvalues ≥ λmax/2, μ: their
mean); the form is then the leading order, with an error O(‖H − μΠ‖).
"""

from __future__ import annotations

import math

from numba import njit, prange

from ..._jit import PARALLEL
from ...reduce import BLOCK
from ..msfr._closed_form import riccati_eval, riccati_setup


@njit(**PARALLEL)
def theory_kernel(times, lam, rate, wtest, mu, p0, q0, tpos, pt, pr, ftrack):
    """Block partials of L_test, L_train (pt, pr: (n_blocks, T)) and f of the tracked tasks
    (tpos[i] ≥ 0: row of ftrack) of the closed form."""
    n, nt = lam.shape[0], times.shape[0]
    for b in prange((n + BLOCK - 1) // BLOCK):
        for i in range(b * BLOCK, min(b * BLOCK + BLOCK, n)):
            lm, m = lam[i], mu[i]
            sp, sq = math.sqrt(p0[i]), math.sqrt(q0[i])
            if m > 0.0:
                pp, pm, rr, sig, logk, sk, mir = riccati_setup(
                    lm, m, 0.5 * (sp + sq), 0.5 * (sp - sq)
                )
                c = rate[i] * m * rr
            for k in range(nt):
                if m > 0.0:
                    f, r = riccati_eval(logk - c * times[k], lm, m, pp, pm, rr, sig, sk, mir)
                else:  # no positive curvature: nothing is learnt at leading order
                    f = 0.0
                    r = -lm
                h = 0.5 * r * r
                pt[b, k] += wtest[i] * h
                pr[b, k] += rate[i] * h
                if tpos[i] >= 0:
                    ftrack[tpos[i], k] = f
