"""Fitting scaling laws: the public names of the fits, re-exported from the modules that own them.

All fits are done in log space, with u = ln x and v = ln y:

    power law        v = ln A - p u                              :mod:`.power_law`
    with offset      v = ln(A e^{-p u} + L_inf)                  :mod:`.power_law`
    broken (m knots) v = c + s_0 u + sum_j d_j max(u - k_j, 0)   :mod:`.broken` (BIC choice of m)
    fit window       (lo, hi) or "auto" (constant local slope)   :mod:`.window`
    frontier         L*(C) = min_D L(C/D, D), D*(C)              :mod:`.frontiers`

Shared checks and bootstrap intervals live in :mod:`._common`, the resampling kernels in
:mod:`._boot`.
"""

from __future__ import annotations

from .broken import BrokenPowerLawFit, RegimeReport, detect_regimes, fit_broken_power_law
from .frontiers import Frontier, frontier
from .power_law import PowerLawFit, fit_power_law
from .window import auto_window

__all__ = [
    "PowerLawFit",
    "BrokenPowerLawFit",
    "RegimeReport",
    "Frontier",
    "fit_power_law",
    "fit_broken_power_law",
    "detect_regimes",
    "auto_window",
    "frontier",
]
