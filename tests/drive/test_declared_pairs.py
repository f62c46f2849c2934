"""Every model family's declared pre-compiles (fastdyn._precompile, fastdyn.drive.compile_beside):
the (kernel, signature) pairs declared for a run of the ICL models, of msfr-attn, and of an ODE
model on the generic solver (the driver's own, named through the integrator's builder and the
model's functions); the plug-in's pair compiled by ``python -m fastdyn._precompile`` into an
empty numba cache is the entry a fresh process running the plug-in loads (a cache hit, no
compile of its own). The drivers start and wait for the second process where the docstrings
say. Timings are in bench/RESULTS.md, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from click.testing import CliRunner

from fastdyn import _precompile as pc
from fastdyn.cli import main, warmup
from fastdyn.config import load_config, presets
from fastdyn.core.device import Device
from fastdyn.drive import compile_beside as cb
from fastdyn.drive import ode_maths
from fastdyn.models.registry import get_model

#: generous: fresh interpreters compiling under a loaded machine (never a timing assert)
SUBPROCESS_S = 900

_ICL = ("schedule.epochs=4", "schedule.save_every=2", "data.P=20")
_ATTN = ("schedule.epochs=4", "schedule.n_saves=2", "attention.constrained=true")
_LOGISTIC = ('model="logistic"', "task.n_tasks=2000", "time.n_times=8")

#: the configs whose declared pairs are listed: the ICL preset of paper Fig. 1 (attn-m, full-batch
#: GD), msfr-attn with its comparison, and the logistic plug-in on the generic rk4 solver
DECLARING = (("icl_fig1", _ICL), ("msfr_attention", _ATTN), ("", _LOGISTIC))
#: the run compiled into an empty cache: the plug-in, whose kernel the engine names from the
#: model's functions and rebuilds in the second process (the trained models' declared types are
#: checked against their runs' calls in tests/drive/test_compile_beside.py, MSFR's end to end
#: there too; their first steps would add ≈ 15 s of compiling here)
FRESH = (("", _LOGISTIC),)
#: a fresh process: the runs (no second process), then each kernel's cache hits and misses
_RUN = textwrap.dedent("""
    import json, sys
    from click.testing import CliRunner
    from fastdyn import _precompile as pc
    from fastdyn.cli import main
    runs, kernels, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    for i, (preset, sets) in enumerate(runs):
        args = ["-q", "simulate", *([preset] if preset else []), "-o", f"{out}/r{i}.h5"]
        res = CliRunner().invoke(main, args + [a for s in sets for a in ("--set", s)])
        assert res.exit_code == 0, res.output
    stats = {}
    for name in kernels:  # a built kernel: the one the run built (this process's memo)
        d = pc.kernel(name)
        stats[name] = [sum(d._cache_hits.values()), sum(d._cache_misses.values())]
    print(json.dumps(stats))
""")


def _declared() -> list[tuple[str, str]]:
    return [p for name, sets in DECLARING for p in warmup.declared(name, sets)]


def test_each_family_declares_its_kernels():
    """attn-m (full-batch GD, linear attention): its fused GD steps; msfr-attn with its
    comparison (constrained: no gd lane kernel): its two training passes; the logistic plug-in:
    the generic rk4 kernel named by its three functions."""
    names = [k for k, _ in _declared()]
    assert names == [
        "fastdyn.models.icl.attn_m.kernels:lin_last_gd",
        "fastdyn.models.msfr_attn.kernels:_sparse_pass1",
        "fastdyn.models.msfr_attn.kernels:_sparse_pass2",
        "fastdyn.drive.integrate_soa:rk4[fastdyn_logistic.kernels:rhs,"
        "fastdyn_logistic.kernels:observe,fastdyn_logistic.kernels:loss]",
    ]


def test_a_fresh_process_loads_every_declared_kernel(tmp_path):
    """Empty NUMBA_CACHE_DIR: ``python -m fastdyn._precompile`` on the plug-in's declared pair
    exits 0; then a fresh process runs the plug-in, and its integrator is loaded from the cache
    (1 hit, 0 misses): the entry the second process wrote, since the folder was empty."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), **{cb.ENV: "0"})
    pairs = [p for name, sets in FRESH for p in warmup.declared(name, sets)]
    assert len(pairs) == 1
    r = subprocess.run(
        pc.command(pairs), env=env, capture_output=True, text=True, timeout=SUBPROCESS_S
    )
    assert r.returncode == 0, r.stderr[-3000:]
    kernels = [k for k, _ in pairs]
    args = [json.dumps(FRESH), json.dumps(kernels), str(tmp_path)]
    r = subprocess.run(
        [sys.executable, "-c", _RUN, *args], env=env, capture_output=True, text=True,
        timeout=SUBPROCESS_S,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert {k: stats[k] for k in kernels} == {k: [1, 0] for k in kernels}


def test_one_phase_and_other_paths_declare_nothing():
    """Paths with one phase or small kernels declare nothing: ICL softmax, the reduced and
    population paths, mlp-cubic; msfr-attn without its comparison; the generic solver on the GPU,
    for the closed form only, or with model functions that are not module-level. (ICL's other
    optimisers, full batch or minibatches, declare their fused steps, minibatches their draw
    first.)"""
    hook = get_model("attn-m").warmup.precompile
    for sets in (
        ["attention.softmax=true"], ["attention.reduced=true"], ['model="mlp-cubic"'],
    ):  # fmt: skip
        assert hook(load_config(presets.resolve("icl_variants"), sets)) == (), sets
    steps = "fastdyn.models.icl.attn_m.kernels:lin_last_steps"
    draw = "fastdyn.problems.philox:epoch_batches"
    for sets, want in (
        (['optim.name="adam"'], [steps]),
        (['optim.name="sgd"', "optim.batch_size=10"], [draw, steps]),
    ):
        cfg = load_config(presets.resolve("icl_variants"), sets)
        assert [k for k, _ in hook(cfg)] == want
    cfg = load_config(presets.resolve("msfr_attention"), ["theory.compare=false"])
    assert get_model("msfr-attn").warmup.precompile(cfg) == ()
    cfg = load_config(None, [*_LOGISTIC, 'solver.integrator="dopri5"'])
    m = get_model("logistic").setup(cfg, Device.CPU)
    (name, sig), = ode_maths.precompile(m)  # fmt: skip
    assert name.startswith("fastdyn.drive.integrate_soa:dopri5[") and name.endswith(",None]")
    assert pc.argument_types(sig) == pc.argument_types(pc.built(name)[0].signature)
    assert ode_maths.precompile(m, Device.CUDA) == ()
    cfg = load_config(None, [*_LOGISTIC, 'solver.integrator="none"'])
    assert ode_maths.precompile(get_model("logistic").setup(cfg, Device.CPU)) == ()
    m.rhs = pc.kernel("fastdyn_logistic.kernels:rhs")  # the module's own: named
    assert ode_maths.precompile(m)
    from numba import njit

    m.rhs = njit(lambda p, y, dy: None)  # a lambda: no stable name
    assert ode_maths.precompile(m) == ()


def test_built_names_are_checked():
    """A built kernel's name: its builder must be one, its arguments named functions or None,
    True, False, and its signature the builder's."""
    import pytest

    with pytest.raises(ValueError, match="not a kernel builder"):
        pc.built("fastdyn.reduce:accumulate_blocks[None]")
    with pytest.raises(ValueError, match="not found"):
        pc.built("fastdyn.drive.integrate_soa:rk4[fastdyn_logistic.kernels:nope]")
    name = _declared()[-1][0]
    with pytest.raises(ValueError, match="built for"):
        pc.pending([(name, "(float64,)")])


class _Fake:
    """A second process that is not one: records its waits and closes."""

    here = ()  # no kernels for the run to compile itself meanwhile
    first = False

    def __init__(self, log: list) -> None:
        self.log = log

    def wait(self, stop=None) -> bool:
        self.log.append("wait")
        return True

    def close(self) -> None:
        self.log.append("close")


def test_the_ode_driver_starts_the_generic_kernel_and_waits(tmp_path, monkeypatch):
    """A logistic run with ``compile_beside``: the driver starts the second process on the
    generic kernel it derived (the model declares none), waits once before integrating, and
    closes it at the end."""
    log: list = []
    started = []

    def start_pairs(pairs, device):
        started.append(list(pairs))
        return _Fake(log)

    monkeypatch.setattr(cb, "start_pairs", start_pairs)
    args = ["-q", "simulate", "-o", str(tmp_path / "l.h5")]
    r = CliRunner().invoke(main, args + [a for s in _LOGISTIC for a in ("--set", s)])
    assert r.exit_code == 0, r.output
    assert started == [[_declared()[-1]]]
    assert log == ["wait", "close"]


def test_msfr_compiles_its_integrator_then_waits_before_the_closed_form(tmp_path, monkeypatch):
    """A quickstart run with a second process that compiles the closed form: the run compiles
    the pairs it keeps (``here``) itself, then waits for the second process, both before the
    closed form; the wait before integrating returns at once; the process is closed at the end."""
    from fastdyn.drive import ode_run

    log: list = []

    class _Here(_Fake):
        here = (("fastdyn.models.msfr.integrate_kernels:dopri5_kernel", "(…)"),)
        first = True

        def compile_here(self) -> None:
            self.log.append("compile here")
            self.here = ()

    monkeypatch.setattr(cb, "start", lambda entry, cfg, device: _Here(log))
    closed_form = ode_run.theory_all
    monkeypatch.setattr(
        ode_run, "theory_all", lambda *a, **k: log.append("closed form") or closed_form(*a, **k)
    )
    args = ["-q", "simulate", "quickstart", "-o", str(tmp_path / "q.h5")]
    sets = ("task.n_tasks=3000", "time.n_times=6", "output.track=[1, 2]")
    r = CliRunner().invoke(main, args + [a for s in sets for a in ("--set", s)])
    assert r.exit_code == 0, r.output
    assert log == ["compile here", "wait", "closed form", "wait", "close"]


def test_the_trained_driver_waits_before_the_first_update(tmp_path, monkeypatch):
    """An attn-m run with a second process: it is waited for once, after the first step's loss
    and gradient and before the first optimiser update (then the fused GD steps)."""
    from fastdyn.drive import trained

    log: list = []
    monkeypatch.setattr(cb, "start", lambda entry, cfg, device: _Fake(log))
    make = trained.make_optimizer

    def make_optimizer(*a, **k):
        opt = make(*a, **k)
        step = opt.step
        opt.step = lambda *s, **t: (log.append("update"), step(*s, **t))[1]
        return opt

    monkeypatch.setattr(trained, "make_optimizer", make_optimizer)
    args = ["-q", "simulate", "icl_fig1", "-o", str(tmp_path / "a.h5")]
    r = CliRunner().invoke(main, args + [a for s in _ICL for a in ("--set", s)])
    assert r.exit_code == 0, r.output
    assert log[0] == "wait" and log.count("wait") == 1 and "update" in log
