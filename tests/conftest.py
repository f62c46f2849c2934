"""The suite needs the example plug-in installed (the README's test command installs it): the
plug-in tests run it through the entry point, as a user's installed model runs."""

import importlib.util

import pytest


def pytest_sessionstart(session):
    if importlib.util.find_spec("fastdyn_logistic") is None:
        raise pytest.UsageError(
            "the example model plug-in is not installed: pip install ./examples/logistic (see README)"
        )
