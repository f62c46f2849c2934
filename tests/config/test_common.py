"""The keys and rules several models share (fastdyn/config/common.py), and one way of validating:
every section of fastdyn's own models is a schema.Section, checked on construction."""

from __future__ import annotations

import dataclasses

import pytest

from fastdyn import plugins
from fastdyn.config import ConfigError, load_config
from fastdyn.config.load import schema_for
from fastdyn.config.schema import Section
from fastdyn.models.msfr.config import MsfrConfig, OutputSection, TaskSection, TimeSection

BUILTIN = [m for m in plugins.names() if plugins.is_builtin(m)]


def _sections(cls: type):
    yield cls
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default):
            yield from _sections(type(f.default))


@pytest.mark.parametrize("model", BUILTIN)
def test_every_builtin_section_validates_on_construction(model):
    for cls in _sections(schema_for(model)):
        assert issubclass(cls, Section), cls


@pytest.mark.parametrize(
    "model, sets",
    [
        ("msfr", ["task.n_tasks=10"]),
        ("msfr-h", ["task.n_tasks=10"]),
        ("msfr-attn", ["task.n_tasks=10", "task.n_samples=1000"]),
    ],
)
def test_track_beyond_the_tasks_reads_the_same_in_every_model(model, sets):
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"model={model}", *sets, "output.track=[3, 11]"])
    assert str(e.value) == (
        "output.track: task indices must be ≤ task.n_tasks (10), got 11; keep the smaller ones "
        "(--set output.track=[3]) or use [] for the default"
    )


@pytest.mark.parametrize(
    "build, sets",
    [
        (lambda: TaskSection(n_tasks=0), ["task.n_tasks=0"]),
        (lambda: TimeSection(t_min=10.0, t_max=1.0), ["time.t_min=10", "time.t_max=1"]),
        (lambda: MsfrConfig(output=OutputSection(track=(10**6,))), ["output.track=[1000000]"]),
    ],
)
def test_msfr_sections_built_in_python_fail_as_the_toml_does(build, sets):
    with pytest.raises(ConfigError) as direct:
        build()
    with pytest.raises(ConfigError) as toml:
        load_config(None, sets)
    assert str(direct.value) == str(toml.value)


def test_a_section_given_the_wrong_type_is_named():
    with pytest.raises(ConfigError, match=r"^task: must be a TaskSection, got 1$"):
        MsfrConfig(task=1)


def test_a_model_keeps_its_own_section_defaults_from_a_config_file():
    """A key a model's section defaults differently (msfr-attn's task: 1000 task types, 10 000
    sampled sequences, where MSFR has 10 000 and 'inf') has that default from a file too, and a
    minimal msfr-attn file is valid (it was refused for MSFR's n_samples = 'inf')."""
    from fastdyn.config.load import from_dict
    from fastdyn.models.msfr_attn.config import MsfrAttnConfig

    cfg = from_dict({"model": "msfr-attn"})
    assert (cfg.task.n_tasks, cfg.task.n_samples) == (1000, 10_000.0)
    assert cfg == MsfrAttnConfig()


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        # 10^7 output times × 60 tracked tasks: 64 · 10^7 · 64 B ≈ 38 GiB of saved series
        (["time.n_times=10000000", "theory.level='none'", f"output.track={list(range(1, 61))}"],
         "output.track"),
        # 10^9 represented tasks: 224 GB of state; 2 output times
        (["task.n_tasks=1000000000", "time.n_times=2", "theory.level='none'"], "task.model_size"),
    ],
)  # fmt: skip
def test_the_memory_refusal_names_the_field_that_dominates(monkeypatch, sets, field):
    """The run's estimated memory is refused naming the field of its largest part: the saved
    series (n_times × tracked tasks) used to be blamed on task.model_size."""
    monkeypatch.setenv("FASTDYN_MEMORY_LIMIT", "4GiB")
    with pytest.raises(ConfigError, match=rf"^{field}: .*FASTDYN_MEMORY_LIMIT = 4GiB"):
        load_config(None, sets)
