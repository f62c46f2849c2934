"""④ Progress of a run on stderr: a click bar on a terminal; without one (a batch job's stderr
goes to a file) one line every N seconds with the rows written, model time, step, rate and ETA;
nothing with ``-q``.

``progress`` as the drivers take it: ``False`` nothing; ``True`` the bar on a terminal, else a
line every :data:`EVERY` seconds; a number > 0: the same with a line every that many seconds.
"""

from __future__ import annotations

import sys
import threading
import time as _time

#: seconds between two progress lines in a batch log (``fastdyn simulate --progress-every``)
EVERY = 30.0


def _duration(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


#: what a first run on an empty kernel cache says before it compiles (measured on 2 cores: the
#: quickstart preset ≈ 20 s, an in-context-regression run 30–50 s)
COMPILING = (
    "fastdyn: compiling the kernels: a first run with an empty kernel cache does this once "
    "(about 20 s to 1 min on 2 idle cores), later runs load them; progress and its ETA start after it"
)

#: set by :func:`compile_notice` in a process that compiles: progress lines say so until the
#: first rows (or the first chunk of a phase) are done
_compiling = False


def compile_notice() -> bool:
    """Print :data:`COMPILING` on stderr when numba's kernel cache is empty
    (:func:`fastdyn._cache.cache_is_empty`); True if it did."""
    from .._cache import cache_is_empty

    global _compiling
    if not cache_is_empty():
        return False
    _compiling = True
    try:
        sys.stderr.write(COMPILING + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return True


def _bar_counting_from(cls: type) -> type:
    """click's progress bar class ``cls`` with its ETA measured from row ``base`` on."""

    class Bar(cls):  # type: ignore[misc, valid-type]
        base = 0

        @property
        def time_per_iteration(self) -> float:
            import time

            done = self.pos - self.base
            return (time.time() - self.start) / done if done > 0 else 0.0

        def make_step(self, n_steps: int) -> None:
            super().make_step(n_steps)
            self.eta_known = self.length is not None and self.pos > self.base

    return Bar


class Progress:
    """Progress of ``total`` rows, ``start`` of them written before (a resumed run). With
    ``total_steps`` (the run's last step) the fraction and the ETA count steps, not rows:
    log-spaced rows cost very different amounts of work."""

    def __init__(
        self,
        total: int,
        show: bool | float,
        label: str = "simulate",
        *,
        start: int = 0,
        total_steps: int | None = None,
    ):
        self.bar = None
        self.total, self.label, self.total_steps = int(total), label, total_steps
        self._t0 = _time.monotonic()
        #: (clock, rows, model time, step) at the latest update, and the rows and step at the first
        #: one: rates are measured between updates, so compilation and setup do not count
        self.last: tuple[float, int, float | None, int | None] = (self._t0, int(start), None, None)
        self._first: tuple[float, int, int] | None = None
        #: (name, done, total, clock at its start) of a phase that writes no rows (the closed
        #: form's pass over the tasks), shown instead of the rows while it runs
        self._phase: tuple[str, int, int, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if show is False or show is None:
            return
        every = EVERY if show is True else float(show)
        if not every > 0:
            raise ValueError(
                f"progress: must be True, False or a number of seconds > 0, got {show!r}"
            )
        if sys.stderr.isatty():
            import click

            self.bar = click.progressbar(length=total, label=label, file=None, show_eta=True)
            self.bar.__enter__()
            self.bar.update(start)
            return
        self._thread = threading.Thread(
            target=self._tick, args=(every,), name="fastdyn-progress", daemon=True
        )
        self._thread.start()

    def update(self, k: int, t: float | None = None, step: int | None = None) -> None:
        """``k`` more rows written; the last one at model time ``t`` and ``step``."""
        now, rows = _time.monotonic(), self.last[1] + k
        if self.bar is not None and k:
            if self._first is None:  # the bar's ETA counts from the first row: not compiling
                self._restart_bar(k)
            self.bar.update(k)
        if self._first is None:
            self._first = (now, rows, 0 if step is None else step)
        self.last = (now, rows, t, step)  # one assignment: the ticker thread reads a consistent row

    def _restart_bar(self, k: int) -> None:
        """Make click's bar time its rate from the first rows on: its ETA was (time since the
        bar started / rows) × rows left, and before the first row that time is compiling and
        setup (an ETA of 7:52 was shown for a 64 s run). From here it is (time since now / rows
        written since these ``k``) × rows left, unknown until more rows come."""
        import time

        bar = self.bar
        bar.__class__ = _bar_counting_from(type(bar))
        bar.base = bar.pos + k
        bar.start = time.time()  # click's clock
        bar.avg = []

    def phase(self, name: str | None, done: int = 0, total: int = 0) -> None:
        """A phase that writes no rows: ``done`` of ``total`` chunks of ``name`` (None: it ended)."""
        if name is None:
            self._phase = None
            return
        start = (
            self._phase[3]
            if self._phase is not None and self._phase[0] == name
            else _time.monotonic()
        )
        self._phase = (name, int(done), int(total), start)  # one assignment, as in update

    def _phase_line(self) -> str:
        name, done, total, start = self._phase  # type: ignore[misc]
        span = _time.monotonic() - start
        eta = _duration((total - done) * span / done) if done and total else "?"
        pct = 100 * done / total if total else 0.0
        rows = self.last[1]
        return (
            f"fastdyn: {self.label}: {name}: {done}/{total} chunks of tasks ({pct:.1f}%), "
            f"{rows}/{self.total} rows written, elapsed {_duration(_time.monotonic() - self._t0)}, "
            f"ETA of this phase {eta}"
        )

    def line(self) -> str:
        """The progress line for now (one line, no newline)."""
        global _compiling
        if _compiling:
            if self._first is None and (self._phase is None or self._phase[1] == 0):
                return (
                    f"fastdyn: {self.label}: compiling the kernels (once), "
                    f"elapsed {_duration(_time.monotonic() - self._t0)}; rows and ETA follow"
                )
            _compiling = False
        if self._phase is not None:
            return self._phase_line()
        clock, rows, t, step = self.last
        by_steps = bool(self.total_steps) and step is not None
        done, total = (step, self.total_steps) if by_steps else (rows, self.total)
        parts = [f"{rows}/{self.total} rows written ({100 * done / total if total else 100:.1f}%)"]
        if t is not None:
            parts.append(f"t = {t:.6g}")
        if step is not None:
            parts.append(f"step {step}" + (f"/{self.total_steps}" if self.total_steps else ""))
        rate = eta = "?"
        if self._first is not None and clock > self._first[0]:
            span = clock - self._first[0]
            rate = f"{(rows - self._first[1]) / span:.3g}"
            per_s = (done - (self._first[2] if by_steps else self._first[1])) / span
            if per_s > 0:
                eta = _duration(max(0.0, (total - done) / per_s - (_time.monotonic() - clock)))
        parts += [f"{rate} rows/s", f"elapsed {_duration(_time.monotonic() - self._t0)}"]
        parts.append(f"ETA {eta}")
        return f"fastdyn: {self.label}: " + ", ".join(parts)

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                sys.stderr.write(self.line() + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):  # stderr closed: the run goes on without progress
                return

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
