"""fastdyn.analysis: fitting scaling laws from fastdyn outputs (fits, windows, frontiers)."""

from fastdyn.analysis.fit import (
    BrokenPowerLawFit,
    Frontier,
    PowerLawFit,
    RegimeReport,
    auto_window,
    detect_regimes,
    fit_broken_power_law,
    fit_power_law,
    frontier,
)

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
