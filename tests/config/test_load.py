"""Config loading: defaults, --set, TOML round trip, one-line errors naming the field."""

import tomllib

import numpy as np
import pytest

from fastdyn.config import ConfigError, from_dict, load_config, to_toml
from fastdyn.config.load import parse_set


def test_defaults_round_trip_through_toml():
    cfg = load_config(None, ["task.n_tasks=1234", "time.t_max=5e6", "output.track=[1, 7]"])
    assert cfg.task.n_tasks == 1234 and cfg.time.t_max == 5e6 and cfg.output.track == (1, 7)
    assert from_dict(tomllib.loads(to_toml(cfg))) == cfg


def test_set_parses_toml_values_and_bare_strings():
    assert parse_set("solver.integrator=rk4") == (["solver", "integrator"], "rk4")
    assert parse_set("task.alpha=1.5") == (["task", "alpha"], 1.5)
    assert parse_set('task.n_samples="inf"') == (["task", "n_samples"], "inf")


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["task.n_tasks=0"], "task.n_tasks"),
        (["task.n_tasks=-5"], "task.n_tasks"),
        (["task.n_tasks=1.5"], "task.n_tasks"),
        (["task.alpha=nan"], "task.alpha"),
        (["task.alpha=inf"], "task.alpha"),
        (["task.psi0=0.5"], "task.psi0"),
        (["task.bogus=1"], "task.bogus"),
        (["bogus=1"], "bogus"),
        (["solver.integrator=euler"], "solver.integrator"),
        (["time.t_min=1e13"], "time.t_min"),
        (["time.grid=explicit", "time.times=[1.0, 0.5]"], "time.times"),
        (["time.grid=explicit"], "time.times"),
        (["task.n_samples=12.5"], "task.n_samples"),
        (["task.n_samples=abc"], "task.n_samples"),
        (["init.scale=true"], "init.scale"),
        (["model=nope"], "model"),
        (["output.track=[0]"], "output.track"),
        (["task.n_tasks=10", "output.track=[11]"], "output.track"),
        (["task=3"], "task"),
        (["justtext"], "--set"),
    ],
)
def test_bad_values_name_the_field(sets, field):
    with pytest.raises(ConfigError) as e:
        load_config(None, sets)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(field), msg


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("model = [\n")
    with pytest.raises(ConfigError, match="malformed TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_shipped_configs_validate():
    from fastdyn.config.presets import CONFIG_DIR

    paths = sorted(CONFIG_DIR.glob("*.toml"))
    assert paths, "no shipped configs"
    for p in paths:
        load_config(p)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("a = " + "[" * 500 + "]" * 500, "nested too deeply"),  # tomllib itself recurses
        ("a = " + "{x = " * 500 + "1" + "}" * 500, "nested too deeply"),
        ("a = " + "[" * 100 + "]" * 100, "a[0][0]"),  # parses, refused before anything recurses
        ("[" + ".".join(["t"] * 500) + "]\nx = 1", "t.t.t"),
    ],
)
def test_deep_nesting_is_one_line_naming_the_file(tmp_path, text, named):
    p = tmp_path / "deep.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"config file {str(p)!r}: ") and named in msg, msg


def test_deep_set_names_the_key():
    with pytest.raises(ConfigError, match=r"^--set a: .*nested too deeply"):
        load_config(None, ["a=" + "[" * 2000 + "]" * 2000])
    with pytest.raises(ConfigError, match=r"^--set t\.t\.t.*300 dotted names"):
        load_config(None, [".".join(["t"] * 300) + "=1"])  # refused before any table is built


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["task.n_samples=1e12"], "task.n_samples"),  # 10^12 sequences × ~100 tokens
        (["task.n_samples=1e4", "data.n_test=100000000", "task.psi0=1e4"], "data.n_test"),
        (["task.n_samples=1e4", "task.n_tasks=10000000000", "task.model_size=10"], "task.n_tasks"),
        (
            ["task.n_samples=1e4", "task.beta=-5", "task.alpha=0.1"],
            "task.n_samples",
        ),  # ψ_s = ψ0 s^5
    ],
)
def test_msfr_attn_sizes_beyond_memory_name_the_field(sets, field):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model=msfr-attn", *sets])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{field}: ") and "GiB allowed" in msg, msg


def test_msfr_attn_mean_tokens_matches_the_exact_sum():
    from fastdyn.models.msfr_attn.config import mean_tokens

    for n, a, b in [(2**21 + 5, 1.1, -0.3), (3 * 10**6, 2.0, 0.5)]:
        cfg = load_config(
            None,
            [
                "model=msfr-attn",
                "task.n_samples=10",
                f"task.n_tasks={n}",
                f"task.alpha={a}",
                f"task.beta={b}",
                "task.model_size=10",
            ],
        )
        s = np.arange(1, n + 1, dtype=np.float64)
        p = s**-a
        psi = np.maximum(1, np.floor(100 * s**-b + 0.5))
        assert mean_tokens(cfg.task) == pytest.approx((p * (psi + 1)).sum() / p.sum(), rel=1e-3)


@pytest.mark.parametrize("given", ["off", "never", "OFF"])
def test_checkpoint_every_off_is_kept_as_off(given):
    """ "off" used to reach int(inf) in the schema and fail the run with exit 1."""
    for model in ("msfr", "attn-m"):
        cfg = from_dict({"model": model, "output": {"checkpoint_every": given}})
        assert cfg.output.checkpoint_every == "off"
