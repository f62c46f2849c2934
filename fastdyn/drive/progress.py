"""④ Progress of a run on stderr: a click progress bar, or nothing (``-q``, no TTY)."""

from __future__ import annotations


class Progress:
    """A click progress bar of ``total`` units on stderr when ``show``; otherwise a no-op."""

    def __init__(self, total: int, show: bool, label: str = "simulate"):
        self.bar = None
        if show:
            import click

            self.bar = click.progressbar(length=total, label=label, file=None, show_eta=True)
            self.bar.__enter__()

    def update(self, k: int) -> None:
        if self.bar is not None and k:
            self.bar.update(k)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
