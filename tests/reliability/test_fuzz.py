"""Hostile configs: 2000 hypothesis-generated configs through ``fastdyn simulate CONFIG --check``
in-process (issue 6, acceptance 4): never a traceback; a config made invalid on purpose always
exits 2 with one line naming the broken field; a valid one exits 0; random ones exit 0 or 2.

The oracle is the construction, not fastdyn's validator: `valid` draws only values inside the
documented ranges (models/msfr/config.py), `broken` takes such a config and breaks exactly one field in a
way the documentation forbids (unknown key, wrong type, out of range, non-finite, a request far
beyond any machine's memory, a malformed file)."""

from __future__ import annotations

import json
import math

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastdyn.cli import main


def SETTINGS(n: int):
    """Reproducible (derandomized, no example database) runs of ``n`` examples."""
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


def _str(k: str) -> str:
    """A TOML basic string: JSON's escapes, plus DEL, which TOML (not JSON) forbids raw."""
    return json.dumps(k, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(k: str) -> str:
    return _str(k)


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return (
            "nan"
            if math.isnan(v)
            else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
        )
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_val(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(d: dict) -> str:
    top = [f"{_key(k)} = {_val(v)}" for k, v in d.items() if not isinstance(v, dict)]
    tables = [
        f"[{_key(k)}]\n" + "\n".join(f"{_key(kk)} = {_val(vv)}" for kk, vv in v.items())
        for k, v in d.items()
        if isinstance(v, dict)
    ]
    return "\n".join(top + tables) + "\n"


# ------------------------------------------------------------------ valid MSFR configs
valid = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**40),
        "task": st.fixed_dictionaries(
            {
                "n_tasks": st.integers(1, 10**5),
                "alpha": st.floats(0.1, 20),
                "gamma": st.floats(-5, 20),
                "psi0": st.floats(1, 1e6),
                "beta": st.floats(-5, 20),
            },
            optional={
                "n_samples": st.sampled_from(["inf", 1e3, 1e6]),
                "x_dist": st.just("rademacher"),
            },  # gaussian: msfr-attn only
        ),
        "solver": st.fixed_dictionaries(
            {
                "integrator": st.sampled_from(["dopri5", "rk4", "none"]),
                "rtol": st.floats(1e-12, 1e-3),
            }
        ),
        "time": st.fixed_dictionaries(
            {
                "t_min": st.floats(1e-3, 1.0),
                "t_max": st.floats(10.0, 1e12),
                "n_times": st.integers(1, 5000),
            }
        ),
        "output": st.fixed_dictionaries(
            {"checkpoint_every": st.sampled_from([0, 30, "5s", "10 steps", 1.5])}
        ),
    }
)

# one field broken: (section, key, value, what must be named in the error)
_BAD = [
    (
        "task",
        "n_tasks",
        st.sampled_from([0, -1, 10**11, 1.5, "many", True, [1], {"a": 1}]),
        "task.n_tasks",
    ),
    ("task", "n_tasks", st.just(10**10), "task.model_size"),  # ~2 TB of state: never fits
    (
        "task",
        "alpha",
        st.sampled_from([0.0, -1.0, math.nan, math.inf, 1e300, "2", False]),
        "task.alpha",
    ),
    (
        "task",
        "x_dist",
        st.text(min_size=1, max_size=12).filter(lambda s: s not in ("rademacher", "gaussian")),
        "task.x_dist",
    ),
    ("solver", "rtol", st.sampled_from([0.0, 1.0, -1e-8, math.nan, "1e-8"]), "solver.rtol"),
    (
        "solver",
        "integrator",
        st.text(max_size=10).filter(lambda s: s not in ("dopri5", "rk4", "gd", "none")),
        "solver.integrator",
    ),
    ("time", "n_times", st.sampled_from([0, 10**8, 10**18, -5, 2.5]), "time.n_times"),
    ("time", "t_max", st.sampled_from([0.0, -1.0, 1e300, math.inf]), "time.t_max"),
    (
        "output",
        "checkpoint_every",
        st.sampled_from([-1, "soon", "1.5 steps", math.nan, [60], True]),
        "output.checkpoint_every",
    ),
    (
        "output",
        "track",
        st.lists(st.integers(2 * 10**5, 10**9), min_size=1, max_size=3),
        "output.track",
    ),
]


@st.composite
def broken(draw):
    cfg = draw(valid)
    i = draw(st.integers(0, len(_BAD) + 1))
    if i == len(_BAD):  # an unknown key, possibly unicode
        sec = draw(st.sampled_from(["task", "solver", "time", "output"]))
        key = draw(
            st.text(min_size=1, max_size=15).filter(
                lambda k: (
                    k
                    not in {
                        "n_tasks",
                        "alpha",
                        "strength0",
                        "gamma",
                        "psi0",
                        "beta",
                        "psi_min",
                        "n_samples",
                        "model_size",
                        "x_dist",
                        "embedding",
                        "table",
                        "integrator",
                        "rtol",
                        "atol",
                        "steps_per_timescale",
                        "lr",
                        "settle_tol",
                        "max_steps",
                        "grid",
                        "t_min",
                        "t_max",
                        "n_times",
                        "include_zero",
                        "times",
                        "track",
                        "chunk_tasks",
                        "times_per_segment",
                        "checkpoint_every",
                    }
                )
            )
        )
        cfg[sec][key] = draw(st.integers() | st.text(max_size=5))
        return cfg, f"{sec}.{key}"
    if i == len(_BAD) + 1:  # t_min ≥ t_max (a cross-field rule)
        cfg["time"]["t_min"] = cfg["time"]["t_max"] * 2
        return cfg, "time.t_min"
    sec, key, val, name = _BAD[i]
    cfg[sec][key] = draw(val)
    if name == "task.model_size":  # a theory-only run of 1e10 tasks keeps no state: valid
        cfg["solver"]["integrator"] = "dopri5"
    return cfg, name


def _toml_scalar():
    return (
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=True)
        | st.text(max_size=20)
    )


def _toml_value():
    return st.recursive(
        _toml_scalar().filter(lambda v: v is not None),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=10,
    )


garbage = st.dictionaries(
    st.sampled_from(
        [
            "model",
            "seed",
            "task",
            "solver",
            "time",
            "output",
            "data",
            "attention",
            "optim",
            "schedule",
            "init",
            "theory",
        ]
    )
    | st.text(max_size=10),
    st.dictionaries(
        st.sampled_from(
            [
                "n_tasks",
                "alpha",
                "lr",
                "epochs",
                "D",
                "P",
                "N",
                "H",
                "name",
                "t_max",
                "integrator",
                "checkpoint_every",
            ]
        )
        | st.text(max_size=8),
        _toml_value(),
        max_size=4,
    )
    | st.sampled_from(["msfr", "attn-m", "attn-s", "mlp-cubic", "msfr-attn", "ünïcode"])
    | _toml_value(),
    max_size=6,
)


def _check(tmp_path, text: str):
    p = tmp_path / "c.toml"
    p.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(main, ["simulate", str(p), "--check"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    return res


def _lines(res) -> list[str]:
    return [ln for ln in res.output.splitlines() if ln.strip()]


def test_valid_configs_pass(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("valid")

    @SETTINGS(400)
    @given(valid)
    def run(cfg):
        res = _check(tmp, to_toml(cfg))
        assert res.exit_code == 0, (res.output, cfg)

    run()


def test_broken_configs_exit_2_naming_the_field(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("broken")

    @SETTINGS(900)
    @given(broken())
    def run(case):
        cfg, name = case
        res = _check(tmp, to_toml(cfg))
        assert res.exit_code == 2, (res.output, cfg)
        lines = _lines(res)
        assert len(lines) == 1 and lines[0].startswith("fastdyn: error: "), res.output
        assert name in lines[0] or name.split(".")[0] in lines[0], (name, lines[0])

    run()


def test_random_configs_never_traceback(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("garbage")

    @SETTINGS(600)
    @given(garbage)
    def run(cfg):
        res = _check(tmp, to_toml(cfg))
        assert res.exit_code in (0, 2), res.output
        if res.exit_code == 2:
            assert len(_lines(res)) == 1, res.output

    run()


def test_malformed_files_exit_2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bytes")

    @SETTINGS(100)
    @given(st.binary(max_size=200))
    def run(raw):
        p = tmp / "c.toml"
        p.write_bytes(b"[task]\nn_tasks = " + raw)
        res = CliRunner().invoke(main, ["simulate", str(p), "--check"])
        assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
        assert res.exit_code in (0, 2) and "Traceback" not in res.output

    run()
