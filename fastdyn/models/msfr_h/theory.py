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
from ..msfr._closed_form import riccati_eval, riccati_setup


@njit(**PARALLEL)
def theory_terms(times, lam, rate, wtest, mu, p0, q0, te, tr, f):
    """Per task i and time k of the closed form: f[i, k], the loss terms te[i, k] = P(s) r²/2 and
    tr[i, k] = (#/N) r²/2 (r = f − Λ); te, tr, f: (n, T)."""
    n, nt = lam.shape[0], times.shape[0]
    for i in prange(n):
        lm, m = lam[i], mu[i]
        sp, sq = math.sqrt(p0[i]), math.sqrt(q0[i])
        if m > 0.0:
            pp, pm, rr, sig, logk, sk, mir = riccati_setup(lm, m, 0.5 * (sp + sq), 0.5 * (sp - sq))
            c = rate[i] * m * rr
        for k in range(nt):
            if m > 0.0:
                fk, r = riccati_eval(logk - c * times[k], lm, m, pp, pm, rr, sig, sk, mir)
            else:  # no positive curvature: nothing is learnt at leading order
                fk = 0.0
                r = -lm
            h = 0.5 * r * r
            te[i, k] = wtest[i] * h
            tr[i, k] = rate[i] * h
            f[i, k] = fk
