"""The sweep index file. Its format lives with the other file formats in ``h5/sweep_index.py`` (so
``analysis`` reads it without importing ``sweep``); ``fastdyn.sweep.index`` is that module."""

import sys

from ..h5 import sweep_index

sys.modules[__name__] = sweep_index
