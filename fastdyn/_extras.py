"""Optional dependencies: imported where a call needs them, with a one-line error naming the
extra that installs them (``pip install 'fastdyn[xarray]'``)."""

from __future__ import annotations

import importlib
from types import ModuleType

#: the extra that installs each optional package
EXTRA = {"xarray": "xarray", "h5netcdf": "xarray", "pandas": "xarray"}


def require(module: str, what: str) -> ModuleType:
    """``module`` imported, or ModuleNotFoundError: "``what`` needs MODULE, not installed:
    pip install 'fastdyn[EXTRA]'" (one line)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        extra = EXTRA.get(module, module)
        raise ModuleNotFoundError(
            f"{what} needs {module}, which is not installed: pip install 'fastdyn[{extra}]'",
            name=module,
        ) from None
