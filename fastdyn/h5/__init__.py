"""⑤ h5: the on-disk format (layout), the streaming writer and the reader."""

from .reader import FileFormatError, Run, load
from .writer import RunWriter

__all__ = ["FileFormatError", "Run", "RunWriter", "load"]
