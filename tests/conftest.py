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
