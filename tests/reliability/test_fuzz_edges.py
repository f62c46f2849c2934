"""The audit's input edges (issue 22, acceptance 5): 480 fuzzed configs of its kinds — deep
nesting, huge and tiny sizes, extreme values of every numeric field — for MSFR, the ICL models and
msfr-attn, through ``fastdyn simulate CONFIG --check`` in-process under a 4 GiB memory limit.

Every one exits 0, or 2 with one line naming a field of that model (or, for nesting, the file).
Independent facts: a value outside a field's documented range names that field; a config whose
unavoidable arrays alone (MSFR state 4·8·D bytes, ICL tokens P(N+1)(D+1)·8, population moments
8·D⁴, msfr-attn sequences n_samples(psi_min+1)·4) exceed the limit is refused. And a few runs
whose estimate is just under their limit are run for real: their peak RSS stays under it."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.config import load_config
from fastdyn.config.load import schema_for

from .test_fuzz import to_toml

LIMIT = 4 * 2**30
BASES = {
    "msfr": {"task": {"n_tasks": 1000}, "time": {"n_times": 16}},
    "attn-m": {"model": "attn-m", "data": {"P": 500}},
    "attn-s": {"model": "attn-s", "data": {"P": 500, "D": 4}, "attention": {"H": 4, "R": 1}},
    "mlp-cubic": {"model": "mlp-cubic", "data": {"P": 500}},
    "msfr-attn": {"model": "msfr-attn", "task": {"n_tasks": 1000, "n_samples": 10000}},
}
SIZES = {
    "msfr": [
        "task.n_tasks",
        "task.model_size",
        "time.n_times",
        "task.psi0",
        "task.n_samples",
        "output.chunk_tasks",
        "output.times_per_segment",
    ],
    "icl": [
        "data.P",
        "data.N",
        "data.D",
        "data.n_test",
        "attention.H",
        "attention.R",
        "optim.batch_size",
        "schedule.epochs",
    ],
    "msfr-attn": [
        "task.n_samples",
        "task.n_tasks",
        "task.model_size",
        "data.n_test",
        "attention.rank",
        "task.psi0",
        "task.psi_min",
        "schedule.n_saves",
    ],
}


def numeric_fields(model: str) -> dict[str, object]:
    """``section.key`` → Rule of every number/integer field of ``model``'s config (the documented
    ranges: what ``--help`` and the docs print)."""
    out = {}
    for f in dataclasses.fields(schema_for(model)):
        if dataclasses.is_dataclass(f.default):
            for g in dataclasses.fields(f.default):
                rule = g.metadata.get("rule")
                if rule is not None and rule.kind in ("number", "integer"):
                    out[f"{f.name}.{g.name}"] = rule
        elif f.metadata.get("rule") is not None and f.metadata["rule"].kind in (
            "number",
            "integer",
        ):
            out[f.name] = f.metadata["rule"]
    return out


def all_fields(model: str) -> set[str]:
    out = {"model"}
    for f in dataclasses.fields(schema_for(model)):
        out |= (
            {f"{f.name}.{g.name}" for g in dataclasses.fields(f.default)}
            if dataclasses.is_dataclass(f.default)
            else {f.name}
        )
    return out


def put(cfg: dict, key: str, value) -> dict:
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items()}
    sec, _, name = key.rpartition(".")
    if sec:
        cfg.setdefault(sec, {})[name] = value
    else:
        cfg[name] = value
    return cfg


def out_of_range(rule, v) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return True
    if rule.kind == "integer" and v != int(v):
        return True
    lo_bad = rule.lo is not None and (v < rule.lo or (rule.lo_open and v == rule.lo))
    hi_bad = rule.hi is not None and (v > rule.hi or (rule.hi_open and v == rule.hi))
    return lo_bad or hi_bad


def extremes(rule, rnd: random.Random):
    lo, hi = rule.lo, rule.hi
    vals = [math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 0, -1, True, "1"]
    for b in (lo, hi):
        if b is not None:
            step = 1 if rule.kind == "integer" else max(abs(b) * 1e-6, 1e-300)
            vals += [b, b - step, b + step]
    v = rnd.choice(vals)
    if (
        rule.kind == "integer"
        and isinstance(v, float)
        and math.isfinite(v)
        and v == int(v)
        and abs(v) < 2**62
    ):
        v = int(v)
    return v


def unavoidable_bytes(model: str, cfg) -> float:
    """Bytes the run must hold whatever the implementation (a lower bound)."""
    if model == "msfr":
        return 32.0 * cfg.task.d if cfg.solver.integrator != "none" else 0.0
    if model == "msfr-attn":
        return 4.0 * float(cfg.task.n_samples) * (cfg.task.psi_min + 1)
    d = cfg.data
    if d.population:
        return 8.0 * d.D**4
    return 8.0 * d.P * (d.N + 1) * (d.D + 1)


def cases() -> list[tuple[str, str, dict, str | None]]:
    """(kind, model, config, field that must be named or None) — 480 of them, seeded."""
    rnd = random.Random(22)
    models = list(BASES)
    out: list[tuple[str, str, dict, str | None]] = []
    for _ in range(60):  # nesting
        m = rnd.choice(models)
        depth = rnd.choice([33, 40, 100, 500, 1000, 5000])
        form = rnd.choice(["array", "table", "header", "mixed"])
        if form == "array":
            text = "[" * depth + "]" * depth
        elif form == "table":
            text = "{a = " * depth + "1" + "}" * depth
        else:
            text = "[" * depth + "{a = 1}" + "]" * depth
        key = rnd.choice(["deep", "task.n_tasks", "data.P"])
        out.append(
            ("nesting", m, {"_raw": (BASES[m], key, text, form == "header", depth)}, "config file")
        )
    for _ in range(180):  # sizes: one to three size fields huge, tiny or at their bounds
        m = rnd.choice(models)
        group = SIZES["icl" if m in ("attn-m", "attn-s", "mlp-cubic") else m]
        cfg = BASES[m]
        for key in rnd.sample(group, rnd.randint(1, 3)):
            cfg = put(
                cfg,
                key,
                rnd.choice(
                    [
                        1,
                        2,
                        7,
                        10**3,
                        10**5,
                        10**6,
                        10**7,
                        10**8,
                        10**9,
                        10**10,
                        10**12,
                        10**18,
                        2**31,
                    ]
                ),
            )
        out.append(("sizes", m, cfg, None))
    for _ in range(240):  # extremes of one numeric field
        m = rnd.choice(models)
        fields = numeric_fields(m)
        key = rnd.choice(sorted(fields))
        v = extremes(fields[key], rnd)
        out.append(
            ("extremes", m, put(BASES[m], key, v), key if out_of_range(fields[key], v) else None)
        )
    return out


def _text(cfg: dict) -> str:
    if "_raw" not in cfg:
        return to_toml(cfg)
    base, key, deep, header, depth = cfg["_raw"]
    if header:
        return to_toml(base) + "\n[" + ".".join(["t"] * depth) + "]\nx = 1\n"
    sec, _, name = key.rpartition(".")
    if not sec:
        return f"{name} = {deep}\n" + to_toml(base)
    rest = {k: v for k, v in base.items() if k != sec}
    body = "\n".join(
        f"{k} = {v!r}".replace("'", '"') for k, v in base.get(sec, {}).items() if k != name
    )
    return to_toml(rest) + f"\n[{sec}]\n{body}\n{name} = {deep}\n"


CASES = cases()


def test_480_audit_configs_run_or_exit_2_naming_a_field(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTDYN_MEMORY_LIMIT", str(LIMIT))
    assert len(CASES) == 480
    p = tmp_path / "c.toml"
    seen = {"ok": 0, "refused": 0, "memory": 0}
    for kind, model, cfg, must in CASES:
        p.write_text(_text(cfg), encoding="utf-8")
        res = CliRunner().invoke(main, ["simulate", str(p), "--check"])
        case = (kind, model, cfg if "_raw" not in cfg else "deep", res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), (
            case,
            repr(res.exception),
        )
        assert res.exit_code in (0, 2), case
        if res.exit_code == 0:
            seen["ok"] += 1
            assert must is None, case
            # independent: what must be allocated fits the limit
            assert unavoidable_bytes(model, load_config(p)) <= LIMIT, case
            continue
        seen["refused"] += 1
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("fastdyn: error: "), case
        named = lines[0][len("fastdyn: error: ") :]
        if must == "config file":
            assert named.startswith(f"config file {str(p)!r}: ") and "nest" in named, case
            continue
        field = re.match(r"[\w.]+", named).group(0)
        assert field in all_fields(model) or field == "FASTDYN_MEMORY_LIMIT", case
        if must is not None:
            assert field == must, case
        seen["memory"] += "allowed (FASTDYN_MEMORY_LIMIT" in named
    # the mix covers every outcome (guards against a generator that only makes valid configs)
    assert seen["ok"] > 50 and seen["refused"] > 150 and seen["memory"] > 20, seen


#: (config sets, what the estimate covers) — runs of a few seconds whose estimate is most of its limit
REAL = [
    [
        "--set",
        "model=attn-m",
        "--set",
        "data.P=60000",
        "--set",
        "data.n_test=20000",
        "--set",
        "schedule.epochs=4",
        "--set",
        "schedule.save_every=2",
    ],
    [
        "--set",
        "model=attn-m",
        "--set",
        'attention.loss="cumulative"',
        "--set",
        "data.P=60000",
        "--set",
        "data.n_test=20000",
        "--set",
        "schedule.epochs=4",
        "--set",
        "schedule.save_every=2",
    ],
    [
        "--set",
        "task.n_tasks=1000000",
        "--set",
        "solver.integrator=rk4",
        "--set",
        "time.t_max=10",
        "--set",
        "time.n_times=4",
        "--set",
        "output.checkpoint_every=0",
    ],
    [
        "--set",
        "model=msfr-attn",
        "--set",
        "task.n_tasks=1000",
        "--set",
        "task.n_samples=300000",
        "--set",
        "schedule.epochs=2",
        "--set",
        "schedule.n_saves=1",
        "--set",
        "theory.compare=false",
    ],
]


#: runs the CLI and writes the process's peak RSS (VmHWM, bytes) at exit. Not wait4's ru_maxrss:
#: Linux carries the parent's RSS at fork into the child's maxrss across exec, so a child of a
#: large pytest process reported the parent's 900 MB whatever it used itself.
_PEAK = """
import sys
from fastdyn.cli import main
code = 0
try:
    main(sys.argv[2:])
except SystemExit as e:
    code = e.code
finally:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    open(sys.argv[1], "w").write(str(int(hwm) * 1024))
sys.exit(code)
"""


@pytest.mark.parametrize("sets", REAL, ids=["attn-m", "attn-m-cumulative", "msfr-rk4", "msfr-attn"])
def test_runs_stay_within_the_memory_they_were_allowed(tmp_path, sets):
    """The limit is set to the run's own estimate (+5%): the check passes, and the peak RSS of the
    real run (its VmHWM) stays below it."""
    cfg = load_config(None, [s for s in sets if s != "--set"])
    from fastdyn.models.icl import config as icl
    from fastdyn.models.msfr import config as msfr
    from fastdyn.models.msfr_attn import config as msfr_attn

    if cfg.model == "msfr":
        est = msfr._bytes_needed(cfg)
    elif cfg.model == "msfr-attn":
        est = sum(msfr_attn.bytes_needed(cfg))
    else:
        s = cfg.settings
        est = icl._PROCESS + sum(b for b, _ in icl.bytes_needed(s.model, s.data, s.optim))
    limit = int(est * 1.05)
    env = {**os.environ, "FASTDYN_MEMORY_LIMIT": str(limit)}
    hwm = tmp_path / "hwm"
    r = subprocess.run([sys.executable, "-c", _PEAK, str(hwm), "simulate", *sets, "-o", str(tmp_path / "r.h5"), "--quiet"], env=env, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    peak = int(hwm.read_text())
    assert peak <= limit, (peak, limit)
