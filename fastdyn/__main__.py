"""``python -m fastdyn`` = the ``fastdyn`` command."""

from .cli import main

main()
