"""The suite needs the example plug-ins installed (the README's test command installs them): the
plug-in tests run them through their entry points, as a user's installed model runs."""

import importlib.util
import os

import pytest

# a run on a cold numba cache may compile its integrator in a second process
# (fastdyn.drive.compile_beside); the suite keeps one process per run, and
# tests/drive/test_compile_beside.py turns it on where it tests it
os.environ["FASTDYN_COMPILE_BESIDE"] = "0"


def pytest_sessionstart(session):
    for module, folder in (
        ("fastdyn_logistic", "logistic"),
        ("fastdyn_deep_linear", "deep_linear"),
    ):
        if importlib.util.find_spec(module) is None:
            raise pytest.UsageError(
                f"the example model plug-in is not installed: pip install ./examples/{folder} (see README)"
            )


@pytest.fixture
def sigterm_after(monkeypatch):
    """``arm(n, writer=RunWriter)``: send this process SIGTERM after the n-th row set that
    ``writer.append`` takes (the run's handler takes the signal; ``monkeypatch.undo()`` disarms)."""
    import signal

    from fastdyn.h5.writer import RunWriter

    def arm(n: int, writer: type = RunWriter) -> None:
        orig, count = writer.append, {"n": 0}

        def append(self, *a, **k):
            orig(self, *a, **k)
            count["n"] += 1
            if count["n"] == n:
                os.kill(os.getpid(), signal.SIGTERM)

        monkeypatch.setattr(writer, "append", append)

    return arm
