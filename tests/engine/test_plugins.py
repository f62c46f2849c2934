"""Model discovery: a run imports only its own model's entry point; a broken plug-in is
reported by name and hides no other model."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from types import SimpleNamespace

import pytest

from fastdyn import plugins

GOOD = SimpleNamespace(name="good")
LOADED: list[str] = []


def _good_entry():
    LOADED.append("good")
    return GOOD


class _Lazy:
    """``module:ENTRY`` objects for EntryPoint.load(): attribute access records the load."""

    def __getattr__(self, name):
        if name == "GOOD":
            return _good_entry()
        raise AttributeError(name)


@pytest.fixture
def fresh(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fastdyn_test_plugins", _Lazy())
    points = [
        EntryPoint("good", "fastdyn_test_plugins:GOOD", plugins.GROUP),
        EntryPoint("broken", "fastdyn_no_such_module_xyz:ENTRY", plugins.GROUP),
        EntryPoint("misnamed", "fastdyn_test_plugins:GOOD", plugins.GROUP),
    ]
    monkeypatch.setattr(
        plugins, "entry_points", lambda group: points if group == plugins.GROUP else []
    )
    for name, value in (("_ENTRIES", {}), ("_POINTS", {}), ("_SOURCES", {}), ("_BROKEN", {})):
        monkeypatch.setattr(plugins, name, value)
    monkeypatch.setattr(plugins, "_DISCOVERED", False)
    LOADED.clear()


def test_asking_for_one_model_loads_only_its_entry_point(fresh):
    assert plugins.get("good") is GOOD
    assert LOADED == ["good"]  # neither the broken nor the misnamed one was imported
    assert "broken" not in plugins._BROKEN


def test_a_broken_plug_in_is_reported_and_hides_no_other(fresh):
    assert plugins.names() == ["good"]
    why = plugins.broken()
    assert "fastdyn_no_such_module_xyz:ENTRY failed to load (ModuleNotFoundError" in why["broken"]
    assert "is not a model entry named 'misnamed'" in why["misnamed"]
    with pytest.raises(KeyError, match="model 'broken': unknown package"):
        plugins.get("broken")
    with pytest.raises(KeyError, match="unknown model 'nope'; known models: good"):
        plugins.get("nope")


def test_an_in_process_registration_wins_over_an_entry_point_not_loaded(fresh):
    mine = SimpleNamespace(name="good")
    plugins._discover()
    plugins.register(mine)
    assert plugins.get("good") is mine and LOADED == []
