"""fastdyn.analysis: fitting scaling laws from fastdyn outputs (fits, windows, frontiers)."""

from fastdyn.analysis.broken import (
    BrokenPowerLawFit,
    RegimeReport,
    detect_regimes,
    fit_broken_power_law,
)
from fastdyn.analysis.frontiers import Frontier, frontier
from fastdyn.analysis.power_law import PowerLawFit, fit_power_law
from fastdyn.analysis.window import auto_window

__all__ = [
    "BrokenPowerLawFit",
    "Frontier",
    "PowerLawFit",
    "RegimeReport",
    "auto_window",
    "detect_regimes",
    "fit_broken_power_law",
    "fit_power_law",
    "frontier",
]
