"""Events a child ``fastdyn`` process reports to its test, so the test waits for what it needs
(a row appended, a compiled kernel running) instead of sleeping for a while and hoping.

The child inherits the write end of a pipe (its number in ``$FASTDYN_TEST_EVENT_FD``) and writes
one byte per event; the test blocks in ``select`` on the read end until the byte it waits for
comes, or fails at once when the child has exited (end of file) or after a generous limit.

A compiled kernel runs with the GIL released and gives no Python-level sign of life (the dopri5
kernel of the stiff tests writes its first outputs only after ~40 s), so :func:`inside` (in the
child) calls it with a watcher thread beside it that reports once the main thread is in the call
with the GIL released: the watcher runs (so the main thread does not hold the GIL) and the main
thread's innermost Python frame is the one making the call, stopped at its call instruction (numba
compiling or loading the kernel from its cache would show numba's own frames; C code of the
dispatcher holds the GIL). A signal sent then reaches only the watcher thread of
:class:`fastdyn.drive.checkpoint.StopSignals`, as inside a long kernel. The watcher polls its own
process's frames, the only way to see that; the test itself never polls.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import Any

FD_ENV = "FASTDYN_TEST_EVENT_FD"

#: Python to put first in a child's ``-c`` script: ``event(tag)`` and ``inside(tag, fn, *args)``
CHILD = '''
import dis as _dis, os as _os, sys as _sys, threading as _threading

_EVENT_FD = int(_os.environ["FASTDYN_TEST_EVENT_FD"])


def event(tag=b"."):
    try:
        _os.write(_EVENT_FD, tag)
    except OSError:  # the test has stopped listening
        pass


def _call(fn, args):  # the frame the watcher looks for: its one call instruction is fn(*args)
    return fn(*args)


_CALL_AT = [i.offset for i in _dis.get_instructions(_call) if i.opname.startswith("CALL")]
assert len(_CALL_AT) == 1, _CALL_AT


def inside(tag, fn, *args):
    """fn(*args), reporting ``tag`` once this thread is inside the call with the GIL released
    (a nogil compiled function running)."""
    me, done = _threading.get_ident(), _threading.Event()

    def watch():
        while not done.wait(0.001):
            f = _sys._current_frames().get(me)
            if f is not None and f.f_code is _call.__code__ and f.f_lasti in _CALL_AT:
                event(tag)
                return

    _threading.Thread(target=watch, daemon=True).start()
    try:
        return _call(fn, args)
    finally:
        done.set()
'''


class ChildEvents:
    """A pipe for one child's events: ``popen`` starts the child with its write end."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        self._seen = b""
        self.proc: subprocess.Popen | None = None

    def popen(self, argv: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen:
        try:
            self.proc = subprocess.Popen(
                argv, env=dict(env, **{FD_ENV: str(self._w)}), pass_fds=(self._w,), **kw
            )
        finally:
            os.close(self._w)  # the child's copy is the only one left: EOF once it exits
        return self.proc

    def wait(self, tag: bytes, count: int = 1, limit: float = 300.0) -> None:
        """Block until the child has reported ``tag`` ``count`` times in all; AssertionError if
        it exits first or ``limit`` seconds pass (a hung child, not a slow machine)."""
        deadline = time.monotonic() + limit
        while self._seen.count(tag) < count:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._r], [], [], max(0.0, left))
            if not ready:
                raise AssertionError(f"no event {tag!r} ×{count} within {limit} s")
            data = os.read(self._r, 4096)
            if not data:
                rc = self.proc.wait(timeout=60) if self.proc else None
                why = ""
                if self.proc is not None and self.proc.stderr is not None:
                    why = self.proc.stderr.read()
                raise AssertionError(
                    f"the child exited (rc={rc}) before event {tag!r} ×{count}: {why}"
                )
            self._seen += data

    def close(self) -> None:
        if self._r >= 0:
            os.close(self._r)
            self._r = -1

    def __enter__(self) -> ChildEvents:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
