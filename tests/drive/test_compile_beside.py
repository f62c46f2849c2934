"""A first run on a cold numba cache compiles the kernels its model declares (kernel, argument
types) in a second process (fastdyn.drive.compile_beside, fastdyn._precompile): the second
process writes numba's cache and a fresh process loads it without compiling; the declared pairs
name real dispatchers with the types a run passes them; the run's file is the same bits as a run
without the second process; nothing is started where it cannot help. Its effect on the wall time
is in bench/RESULTS.md, not timed here."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from numba.core.caching import NullCache

from fastdyn import _precompile as pc
from fastdyn import plugins
from fastdyn.cli import main, warmup
from fastdyn.config import load_config, presets
from fastdyn.core.device import Device
from fastdyn.drive import compile_beside as cb
from fastdyn.models.registry import get_model

SMALL = ("task.n_tasks=3000", "time.n_times=6", "output.track=[1, 2]")

#: generous: a fresh interpreter importing numba, under a loaded machine (never a timing assert)
SUBPROCESS_S = 600


def _datasets(path) -> dict[str, np.ndarray]:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.update({n: o[()]}) if isinstance(o, h5py.Dataset) else None)
    return out


def _python(code: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
        timeout=SUBPROCESS_S,
    )  # fmt: skip


# --- the second process: named kernels, compiled by signature into the cache ---------------------

_TINY_MODULE = """
from numba import njit


@njit(cache=True)
def add(x, y):
    return x + y
"""

#: a fresh process: call the kernel with floats, print its cache hits and misses
_CALL = """
import fdpre_tiny as m
assert m.add(1.0, 2.0) == 3.0
s = m.add.stats
print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))
"""


def test_second_process_writes_a_cache_a_fresh_process_loads(tmp_path):
    """``python -m fastdyn._precompile module:kernel '(types)'`` writes numba's cache; a fresh
    process calling the kernel with those types loads it (1 hit, 0 misses). Declared with other
    argument types (int64), the same call finds no entry and compiles (0 hits, 1 miss): the
    signature must be the call's."""
    (tmp_path / "fdpre_tiny.py").write_text(_TINY_MODULE)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    for sig, expect in (("(float64, float64)", "1 0"), ("(int64, int64)", "0 1")):
        cache = tmp_path / f"cache-{sig[1:4]}"
        env = dict(os.environ, PYTHONPATH=path, NUMBA_CACHE_DIR=str(cache))
        r = subprocess.run(
            pc.command([("fdpre_tiny:add", sig)]), env=env, capture_output=True, text=True,
            timeout=SUBPROCESS_S,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert list(cache.rglob("*add*.nbi")), sorted(cache.rglob("*"))
        r = _python(_CALL, env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == expect.split(), sig


def test_the_second_process_imports_this_fastdyn_not_the_working_directorys(tmp_path):
    """Started in a folder that holds another ``fastdyn`` (a second checkout), the second process
    still imports this one: it compiled the other checkout's kernels before, and the run then
    compiled its own again (a cold quickstart took 28 s instead of 19)."""
    decoy = tmp_path / "fastdyn"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("")
    (decoy / "_precompile.py").write_text("import sys\nprint('the other checkout')\nsys.exit(3)\n")
    (tmp_path / "fdpre_tiny.py").write_text(_TINY_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "mods"), env.get("PYTHONPATH", "")])
    (tmp_path / "mods").mkdir()
    (tmp_path / "fdpre_tiny.py").rename(tmp_path / "mods" / "fdpre_tiny.py")
    r = subprocess.run(
        pc.command([("fdpre_tiny:add", "(float64, float64)")]), env=pc.environment(env),
        cwd=tmp_path, capture_output=True, text=True, timeout=SUBPROCESS_S,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "the other checkout" not in r.stdout


def test_bad_pairs_are_refused_one_line_each(capsys):
    """A name that is not a dispatcher, a signature with a return type (cached under another
    key than a call's) or not numba's: ValueError saying which; the command exits 2 with one
    line per failed pair and compiles the others."""
    with pytest.raises(ValueError, match="expected 'package.module:name'"):
        pc.kernel("fastdyn.reduce.accumulate_blocks")
    with pytest.raises(ValueError, match="not a numba @njit dispatcher"):
        pc.kernel("os:getcwd")
    with pytest.raises(ValueError, match="not found"):
        pc.kernel("fastdyn.reduce:no_such_kernel")
    with pytest.raises(ValueError, match="argument types only"):
        pc.argument_types("float64(float64)")
    with pytest.raises(ValueError, match="not a numba signature"):
        pc.argument_types("(float65,)")
    assert pc.main(["fastdyn.reduce:nope", "(float64,)", "os:getcwd", "(int64,)"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "fastdyn.reduce:nope" in err[0] and "os:getcwd" in err[1]
    assert pc.main(["only-one"]) == 2


# --- what the models declare ----------------------------------------------------------------------


def _declaring_runs() -> dict[tuple[str, str], tuple[str, tuple[str, ...]]]:
    """Each (kernel, signature) pair any built-in model declares for a planned warm-up run →
    the first such run (preset, overrides)."""
    out: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
    for _, name, sets in warmup.plan(tuple(n for n in plugins.names() if plugins.is_builtin(n))):
        for pair in warmup.declared(name, sets):
            out.setdefault(pair, (name, sets))
    return out


def test_declared_pairs_name_dispatchers_and_parse():
    """Every pair a built-in model declares, for any run ``fastdyn warmup`` plans, names a
    cached ``@njit`` dispatcher and as many argument types as its Python function takes; MSFR
    declares its closed form and tracked tasks' f (and its integrator kernels, which its run
    compiles itself, ``warmup.compile_here``, with the same kind of pairs), attn-m and attn-s
    their fused GD and minibatch steps and the minibatches' draw, msfr-attn its training kernels (and MSFR's gd lane
    kernel of its comparison), msfr-h (the driver, for it) the generic rk4 kernel built from its
    functions."""
    pairs = _declaring_runs()
    names = {k.split("[")[0].rsplit(":", 1)[1] for k, _ in pairs}
    assert names == {
        "_loss_partials_kernel", "dopri5_kernel", "lanes_kernel", "_f_curves_kernel",
        "lin_last_gd", "epoch_batches", "lin_last_steps", "_sparse_pass1", "_sparse_pass2",
        "_dense_kernel", "rk4",
    }  # fmt: skip
    for kernel, sig in pairs:
        d = pc.kernel(kernel)
        assert not isinstance(d._cache, NullCache), kernel  # @njit(cache=True)
        n_args = len(inspect.signature(d.py_func).parameters)
        assert len(pc.argument_types(sig)) == n_args, kernel


def test_a_run_calls_each_kernel_with_its_declared_types(tmp_path):
    """For each declared pair, the first planned run that declares it (its model's warm-up
    sizes) calls the kernel with exactly those argument types: after the run, the types are
    among the dispatcher's compiled (or cache-loaded) signatures, which only runs add here."""
    for i, ((kernel, sig), (name, sets)) in enumerate(_declaring_runs().items()):
        args = ["-q", "simulate", *([name] if name else []), "-o", str(tmp_path / f"r{i}.h5")]
        r = CliRunner().invoke(main, args + [a for s in sets for a in ("--set", s)])
        assert r.exit_code == 0, r.output
        assert pc.argument_types(sig) in pc.kernel(kernel).overloads, (kernel, name, sets)


@pytest.mark.parametrize(
    "sets", [('theory.level="none"',), ('solver.integrator="none"',)], ids=["no-theory", "no-ode"]
)
def test_one_phase_declares_nothing(sets):
    """A run with one phase (no closed form, or the closed form alone) declares no kernel."""
    cfg = load_config(presets.resolve("quickstart"), sets)
    warm = get_model("msfr").warmup
    assert tuple(warm.precompile(cfg)) == () == tuple(warm.compile_here(cfg))


def test_explicit_times_and_integrators_declare_their_kernel():
    """The pairs do not depend on the run's sizes: an explicit time grid declares the closed
    form and the tracked tasks' f beside, and dopri5's kernel here too (the small run it replaces
    could not shrink one); rk4 and gd the lane kernel here; every level the one closed-form
    kernel."""
    warm = get_model("msfr").warmup
    cfg = load_config(presets.resolve("quickstart"), ['time.grid="explicit"', "time.times=[1.0, 2.0]"])  # fmt: skip
    f_curves = "fastdyn.models.msfr.theory:_f_curves_kernel"
    closed_form = ["fastdyn.models.msfr.theory:_loss_partials_kernel", f_curves]
    assert [k for k, _ in warm.precompile(cfg)] == closed_form
    assert [k for k, _ in warm.compile_here(cfg)] == [
        "fastdyn.models.msfr.integrate_kernels:dopri5_kernel"
    ]
    for sets in (
        ['solver.integrator="rk4"', 'theory.level="leading"'],
        ['solver.integrator="gd"', "solver.lr=0.01", 'theory.level="exact"'],
    ):
        cfg = load_config(presets.resolve("quickstart"), [*sets, "time.t_max=1"])
        assert [k for k, _ in warm.precompile(cfg)] == closed_form
        assert [k for k, _ in warm.compile_here(cfg)] == [
            "fastdyn.models.msfr.integrate_kernels:lanes_kernel"
        ]


# --- when it starts -------------------------------------------------------------------------------


def test_started_only_where_it_helps(monkeypatch):
    """With two cores, the CPU, the JIT on and the kernel not cached: the declared pair goes to
    the second process. Off by the environment, on one core, on the GPU, with the kernel cached,
    or for a model that declares nothing: nothing starts."""
    cfg = load_config(presets.resolve("quickstart"))
    entry = get_model("msfr")
    launched = []
    monkeypatch.setattr(cb, "launch", lambda pairs: launched.append(pairs) or cb.Beside(None))
    monkeypatch.setattr(pc, "is_cached", lambda d, types: False)
    monkeypatch.setattr(cb, "_cores", lambda: 2)
    monkeypatch.setenv(cb.ENV, "1")
    beside = cb.start(entry, cfg, Device.CPU)
    assert launched == [list(entry.warmup.precompile(cfg))]
    assert beside.here == tuple(entry.warmup.compile_here(cfg))  # the run compiles these itself
    assert beside.first  # and waits for the second process before its first kernel call
    monkeypatch.setenv(cb.ENV, "0")
    assert cb.start(entry, cfg, Device.CPU) is None
    monkeypatch.setenv(cb.ENV, "1")
    assert cb.start(entry, cfg, Device.CUDA) is None
    monkeypatch.setattr(cb, "_cores", lambda: 1)
    assert cb.start(entry, cfg, Device.CPU) is None
    monkeypatch.setattr(cb, "_cores", lambda: 2)
    monkeypatch.setattr(pc, "is_cached", lambda d, types: True)
    assert cb.start(entry, cfg, Device.CPU) is None
    assert get_model("msfr-h").warmup.precompile is None
    assert len(launched) == 1


def test_a_failed_or_slow_second_process_is_given_up(monkeypatch):
    """wait() is False for a process that failed, outlived WAIT_S or was waited for by a run
    asked to stop (then killed), and the run goes on (to compile the kernels itself, or to
    stop); waiting again returns at once. A process that cannot start is no second process."""
    from types import SimpleNamespace

    stopped = SimpleNamespace(requested=True)
    cases = (
        ("raise SystemExit(3)", 600.0, None),  # failed
        ("import time; time.sleep(600)", 0.2, None),  # slower than WAIT_S
        ("import time; time.sleep(600)", 600.0, stopped),  # the run was asked to stop
    )
    for code, limit, stop in cases:
        monkeypatch.setattr(cb, "WAIT_S", limit)
        p = subprocess.Popen([sys.executable, "-c", code])
        beside = cb.Beside(p)
        assert beside.wait(stop) is False
        assert p.poll() is not None
        assert beside.wait() is False  # again: at once (the process is gone)

    def no_process(*a, **k):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(cb.subprocess, "Popen", no_process)
    assert cb.launch([("fastdyn.reduce:accumulate_blocks", "(float64[::1],)")]) is None


#: the cold run, in a fresh process with two cores assumed (the test is about the mechanism):
#: the CLI in-process, then the cache hits and misses of the closed form and of dopri5
_COLD = textwrap.dedent("""
    import sys
    from click.testing import CliRunner
    from fastdyn.cli import main
    from fastdyn.drive import compile_beside
    from fastdyn.models.msfr.integrate_kernels import dopri5_kernel
    from fastdyn.models.msfr.theory import _loss_partials_kernel
    compile_beside._cores = lambda: 2
    res = CliRunner().invoke(main, sys.argv[1:])
    assert res.exit_code == 0, res.output
    for k in (_loss_partials_kernel, dopri5_kernel):
        print(sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values()))
""")


def test_a_cold_run_loads_the_closed_form_the_second_process_compiled(tmp_path):
    """A run on an empty numba cache (a fresh process, its own NUMBA_CACHE_DIR): the second
    process compiles the closed form's kernel, as declared, into the cache and the run loads it
    from there (one cache hit, no compile of its own), while the run compiles dopri5's kernel
    itself (one miss: the cache was empty, and nothing else wrote it); the file is the same bits
    as a run in this process without the second process; the second process leaves no file in
    the temporary folder."""
    tmp = tmp_path / "tmp"  # the child's own temporary folder: other processes' stay out of it
    tmp.mkdir()
    args = ["-q", "simulate", "quickstart"]
    for s in SMALL:
        args += ["--set", s]
    env = dict(
        os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp), **{cb.ENV: "1"}
    )
    out = _python(_COLD, env, *args, "-o", str(tmp_path / "cold.h5"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "0", "0", "1"]
    assert list(tmp.iterdir()) == []
    plain = ["-q", "simulate", "quickstart", *(a for s in SMALL for a in ("--set", s))]
    res = CliRunner().invoke(
        main, [*plain, "-o", str(tmp_path / "plain.h5")]
    )  # no second process (conftest)
    assert res.exit_code == 0, res.output
    a, b = _datasets(tmp_path / "plain.h5"), _datasets(tmp_path / "cold.h5")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True), k
