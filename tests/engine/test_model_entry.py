"""What a model declares (fastdyn.models.ModelEntry): a small base class with grouped defaults
(RunHooks, AnalysisHooks, WarmupHooks), built either by instantiating it or by subclassing; the
device is a typed choice (fastdyn.core.device.Device) from the declaration to the driver."""

from __future__ import annotations

import pytest

from fastdyn import plugins
from fastdyn.config import load_config, presets
from fastdyn.config.schema import ConfigError
from fastdyn.core.device import Device
from fastdyn.drive.device import resolve
from fastdyn.models import AnalysisHooks, ModelEntry, RunHooks, WarmupHooks


def _setup(cfg, tools):
    return ("set up", cfg, tools)


class _Schema:
    pass


class _Sub(ModelEntry):
    name = "sub"
    kind = "ode"
    summary = "a subclassed entry"
    run = RunHooks(setup=_setup, schema=_Schema, devices=("cpu", "cuda"))
    warmup = WarmupHooks(sizes=("time.n_times=4",))


def test_subclass_and_instance_declare_the_same_model():
    """A subclass's class attributes and an instance's keywords give the same groups; the
    groups not given keep their defaults; ``setup`` calls ``run.setup`` (not bound to the entry)."""
    made = ModelEntry(
        name="sub",
        kind="ode",
        summary="a subclassed entry",
        run=RunHooks(setup=_setup, schema=_Schema, devices=(Device.CPU, Device.CUDA)),
        warmup=WarmupHooks(sizes=("time.n_times=4",)),
    )
    sub = _Sub()
    for e in (made, sub):
        assert e.run == made.run and e.warmup == made.warmup
        assert e.analysis == AnalysisHooks()
        assert e.analysis.default_series == ("loss/test",) and e.analysis.scaling is None
        assert e.default is False
        assert e.setup("cfg", "tools") == ("set up", "cfg", "tools")


def test_devices_are_typed_and_checked():
    """Device names are taken as their Device; an unknown one is refused at declaration."""
    assert _Sub().run.devices == (Device.CPU, Device.CUDA)
    assert all(type(d) is Device for d in _Sub().run.devices)
    assert RunHooks(setup=_setup, schema=_Schema).devices == (Device.CPU,)
    with pytest.raises(ValueError, match=r"device: must be one of 'cpu', 'cuda', got 'tpu'"):
        RunHooks(setup=_setup, schema=_Schema, devices=("cpu", "tpu"))


def test_a_wrong_declaration_is_refused_naming_the_part():
    run = RunHooks(setup=_setup, schema=_Schema)
    with pytest.raises(TypeError, match="unknown part 'warmup_sizes'"):
        ModelEntry(name="x", kind="ode", summary="s", run=run, warmup_sizes=("a=1",))
    with pytest.raises(TypeError, match="'run' is required"):
        ModelEntry(name="x", kind="ode", summary="s")
    with pytest.raises(ValueError, match="kind must be 'ode' or 'trained', got 'closed'"):
        ModelEntry(name="x", kind="closed", summary="s", run=run)
    with pytest.raises(TypeError, match=r"analysis must be given as AnalysisHooks\(…\)"):
        ModelEntry(name="x", kind="ode", summary="s", run=run, analysis={"fit_note": "n"})
    with pytest.raises(AttributeError, match="read-only"):
        _Sub().kind = "trained"


def test_every_installed_model_declares_typed_groups():
    """Every model fastdyn finds (built in and the example plug-ins) is a ModelEntry whose
    groups are the hook classes and whose devices are Device values."""
    names = plugins.names()
    assert {"msfr", "attn-m", "logistic", "deep-linear"} <= set(names)
    for name in names:
        e = plugins.get(name)
        assert isinstance(e, ModelEntry) and e.name == name
        assert isinstance(e.run, RunHooks) and isinstance(e.analysis, AnalysisHooks)
        assert isinstance(e.warmup, WarmupHooks)
        assert e.run.devices and all(type(d) is Device for d in e.run.devices), name


def test_the_driver_resolves_a_device_once():
    """``drive.device.resolve`` hands the driver a Device (the config holds its name); a model
    without CUDA kernels is refused naming the field, from its declared devices."""
    assert resolve(load_config(presets.resolve("quickstart"))) is Device.CPU
    assert Device.CUDA not in plugins.get("mlp-cubic").run.devices
    with pytest.raises(
        ConfigError, match=r"^device: 'cuda' is not available for model 'mlp-cubic'"
    ):
        load_config(None, ['model="mlp-cubic"', 'device="cuda"'])
