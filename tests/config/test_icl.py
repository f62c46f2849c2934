"""The ICL config on the one schema system: the same rules and one-line errors from TOML and from
Python, the run settings equal to the config's, the resolved TOML unchanged, and config/ standing
alone (no models/, no problems/)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import numpy as np
import pytest

from fastdyn.config import ConfigError, from_dict, load_config, to_toml
from fastdyn.config.schema import Rule
from fastdyn.models.icl.config import IclConfig
from fastdyn.models.icl.settings import (
    DataSettings,
    ICLSettings,
    InitSettings,
    ModelSettings,
    OptimSettings,
    ScheduleSettings,
)

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"

#: the resolved config of data/configs/icl_fig1.toml as earlier releases stored it in every file
FIG1_TOML = """model = "attn-m"
seed = 0
device = "cpu"

[data]
D = 4
N = 31
P = 5000
spectrum = "linear"
exponent = 1.0
eigenvalues = []
rotate = true
normalize_trace = true
center = true
whiten = true
icl_fraction = 1.0
n_test = 1000
population = false
save = false

[attention]
H = 8
R = 1
softmax = false
attention_scale = "1"
loss = "last"
reduced = false
ic_only = false

[init]
scheme = "reference"
scale = 1e-06

[optim]
name = "gd"
lr = 0.001
momentum = 0.0
beta1 = 0.9
beta2 = 0.999
eps = 1e-08
weight_decay = 0.0

[schedule]
epochs = 6001
save_every = 10
save_steps = []

[output]
checkpoint_every = 60.0
keep_checkpoint = false
"""


def test_resolved_toml_of_a_shipped_config_is_unchanged():
    assert to_toml(load_config(CONFIGS / "icl_fig1.toml")) == FIG1_TOML


@pytest.mark.parametrize("name", ["icl_fig1", "icl_fig3", "icl_fig4", "icl_variants"])
def test_shipped_configs_round_trip(name):
    cfg = load_config(CONFIGS / f"{name}.toml")
    assert isinstance(cfg, IclConfig)
    assert from_dict(tomllib.loads(to_toml(cfg))) == cfg


def test_unset_optional_fields_are_omitted_and_set_ones_written():
    text = to_toml(load_config(None, ["model=attn-m"]))
    assert (
        "from_file" not in text
        and "batch_size" not in text
        and "\nseed" not in text.split("[data]")[1]
    )
    cfg = load_config(
        None, ["model=attn-m", "data.seed=3", "init.seed=4", "optim.name=sgd", "optim.batch_size=7"]
    )
    d = tomllib.loads(to_toml(cfg))
    assert (d["data"]["seed"], d["init"]["seed"], d["optim"]["batch_size"]) == (3, 4, 7)


def test_settings_are_the_configs_run():
    cfg = load_config(
        None,
        ["model=attn-s", "seed=5", "data.D=3", "attention.H=3", "attention.R=1", "optim.lr=0.5"],
    )
    s = cfg.settings
    assert s == ICLSettings(
        data=DataSettings(D=3),
        model=ModelSettings(name="attn-s", H=3, R=1),
        optim=OptimSettings(lr=0.5),
        seed=5,
    )
    assert s.model.name == "attn-s" and s.seed == 5 and s.data is cfg.data


@pytest.mark.parametrize(
    ("sets", "build"),
    [
        (["data.P=0"], lambda: DataSettings(P=0)),
        (["attention.H=-1"], lambda: ModelSettings(H=-1)),
        (["optim.name=foo"], lambda: OptimSettings(name="foo")),
        (["init.scale=nan"], lambda: InitSettings(scale=float("nan"))),
        (["schedule.save_steps=[-1]"], lambda: ScheduleSettings(save_steps=[-1])),
        (
            ["model=attn-s", "attention.R=5"],
            lambda: ICLSettings(model=ModelSettings(name="attn-s", R=5)),
        ),
        (
            ["model=mlp-cubic", "attention.softmax=true"],
            lambda: ModelSettings(name="mlp-cubic", softmax=True),
        ),
        (["data.population=true"], lambda: ICLSettings(data=DataSettings(population=True))),
        (
            ["optim.name=sgd", "optim.batch_size=11", "data.P=10"],
            lambda: ICLSettings(
                data=DataSettings(P=10), optim=OptimSettings(name="sgd", batch_size=11)
            ),
        ),
        (  # minibatches with full-batch gradient descent: refused, not silently ignored
            ["optim.batch_size=5", "data.P=10"],
            lambda: ICLSettings(data=DataSettings(P=10), optim=OptimSettings(batch_size=5)),
        ),
        (  # minibatches of the reduced model (its moments: always the full batch): refused
            ["attention.reduced=true", "optim.name=adam", "optim.batch_size=5", "data.P=10"],
            lambda: ICLSettings(
                model=ModelSettings(reduced=True),
                data=DataSettings(P=10),
                optim=OptimSettings(name="adam", batch_size=5),
            ),
        ),
    ],
)
def test_python_and_toml_give_the_same_one_line_error(sets, build):
    with pytest.raises(ConfigError) as from_toml:
        load_config(None, ["model=attn-m", *sets] if not sets[0].startswith("model=") else sets)
    with pytest.raises(ValueError) as from_python:
        build()
    assert str(from_toml.value) == str(from_python.value)
    assert "\n" not in str(from_toml.value)


def test_direct_construction_canonicalises():
    d = DataSettings(D=np.int64(3), P=10.0, eigenvalues=[1, 2, 3], spectrum="explicit")
    assert d.D == 3 and type(d.D) is int and d.P == 10 and d.eigenvalues == (1.0, 2.0, 3.0)
    assert ModelSettings(attention_scale=1).attention_scale == "1"
    with pytest.raises(ValueError, match=r"^data.P: must be an integer"):
        DataSettings(P=2.5)
    with pytest.raises(ValueError, match=r"^model: must be a ModelSettings"):
        ICLSettings(model=DataSettings())


def test_every_icl_field_carries_a_rule_with_help():
    from dataclasses import fields

    for cls in (DataSettings, ModelSettings, InitSettings, OptimSettings, ScheduleSettings):
        for f in fields(cls):
            rule = f.metadata.get("rule")
            assert isinstance(rule, Rule) and rule.help, f"{cls.__name__}.{f.name}"


def test_config_imports_nothing_of_fastdyn_but_config():
    """config/ is the lowest layer (also checked by import-linter in .ci/run); it may ask
    ``fastdyn.plugins`` (which imports no fastdyn module) for a model's schema."""
    root = Path(__file__).resolve().parents[2] / "fastdyn" / "config"
    bad = []
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level == 2 and mod == "" and [a.name for a in node.names] == ["plugins"]:
                    continue
                if node.level > 1 or (
                    node.level == 0
                    and mod.startswith("fastdyn")
                    and not mod.startswith("fastdyn.config")
                ):
                    bad.append(f"{path.name}: from {'.' * node.level}{mod}")
            elif isinstance(node, ast.Import):
                bad += [
                    f"{path.name}: import {a.name}"
                    for a in node.names
                    if a.name.startswith("fastdyn") and not a.name.startswith("fastdyn.config")
                ]
    assert not bad, bad


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["data.P=1000000000"], "data.P"),  # the audit's 477 GiB allocation
        (["data.N=1000000"], "data.N"),  # the audit's > 8 GiB in 53 s
        (["data.D=1000000"], "data.D"),
        (["data.n_test=10000000000"], "data.n_test"),
        (["attention.H=1000000", "data.D=100"], "attention.H"),
        (["model=attn-s", "attention.R=1000", "data.D=1000", "attention.H=1000"], "attention.R"),
        (["model=mlp-cubic", "data.D=300"], "data.D"),  # cubic features: P × D² floats
        (["attention.reduced=true", "data.population=true", "data.D=1000"], "data.D"),  # (D², D²)
    ],
)
def test_sizes_beyond_memory_name_the_field(sets, field):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model=attn-m", *sets])
    msg = str(e.value)
    assert (
        "\n" not in msg and msg.startswith(f"{field}: with {field} = ") and "GiB allowed" in msg
    ), msg


def test_memory_limit_from_the_environment(monkeypatch):
    load_config(None, ["model=attn-m", "data.P=100000"])
    monkeypatch.setenv("FASTDYN_MEMORY_LIMIT", "300MiB")  # 100000 × 32 × 18 floats ≈ 440 MiB
    with pytest.raises(ConfigError, match=r"^data\.P: .*FASTDYN_MEMORY_LIMIT = 300MiB"):
        load_config(None, ["model=attn-m", "data.P=100000"])
    monkeypatch.setenv("FASTDYN_MEMORY_LIMIT", "lots")
    with pytest.raises(ConfigError, match=r"^FASTDYN_MEMORY_LIMIT: must be a positive size"):
        load_config(None, ["model=attn-m"])


def test_plugins_imports_no_fastdyn_module():
    """``fastdyn.plugins`` finds models through entry points only, so the config layer can use it."""
    path = Path(__file__).resolve().parents[2] / "fastdyn" / "plugins.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("fastdyn"), node.module
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("fastdyn") for a in node.names)


def test_the_estimate_grows_with_the_test_sets_on_the_cumulative_loss():
    """Each test set gets its prefix rows while it alone stays under the limit, so the estimate
    counts them per set: 2 × 120 000 test samples need more than 2 × 100 000 (before, the two
    sets were taken as one, which crossed the limit and dropped the rows from the estimate)."""
    from fastdyn.models.icl import config as icl

    def est(n_test: int) -> float:
        s = load_config(
            None,
            ["model=attn-m", "attention.loss=cumulative", "data.P=500", f"data.n_test={n_test}"],
        ).settings
        return sum(b for b, _ in icl.bytes_needed(s.model, s.data, s.optim))

    assert icl.prefix_moment_bytes(120_000, 31, 4) < icl.PREFIX_BYTES_MAX  # each set has its rows
    assert est(120_000) > est(100_000) > est(1000)
