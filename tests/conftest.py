"""The suite needs the example plug-in installed (the README's test command installs it): the
plug-in tests run it through the entry point, as a user's installed model runs."""

import importlib.util
import os

import pytest

# a run on a cold numba cache may compile its integrator in a second process
# (fastdyn.drive.compile_beside); the suite keeps one process per run, and
# tests/drive/test_compile_beside.py turns it on where it tests it
os.environ["FASTDYN_COMPILE_BESIDE"] = "0"


def pytest_sessionstart(session):
    if importlib.util.find_spec("fastdyn_logistic") is None:
        raise pytest.UsageError(
            "the example model plug-in is not installed: pip install ./examples/logistic (see README)"
        )
