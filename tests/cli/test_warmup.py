"""Start-up (issue 20): ``fastdyn --help`` loads no heavy library, ``fastdyn warmup``'s plumbing,
and its plan covers every shipped preset and model (a full warm-up takes minutes: not run here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from fastdyn.cli import main, warmup
from fastdyn.config import load_config, presets
from fastdyn.models import registry

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "h5py", "numba", "scipy", "matplotlib")


def test_help_imports_no_heavy_library():
    """--help of the group and of every command in a fresh process: none of numpy, h5py, numba,
    scipy, matplotlib gets imported (they cost most of a second of CPU)."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from fastdyn.cli import main\n"
        "r = CliRunner()\n"
        "assert r.invoke(main, ['--help']).exit_code == 0\n"
        "for name in main.commands:\n"
        "    assert r.invoke(main, [name, '--help']).exit_code == 0, name\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_help_lists_warmup():
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0
    assert any(line.split()[:1] == ["warmup"] for line in r.output.splitlines())


def test_unwritable_cache_dir_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    r = CliRunner().invoke(main, ["warmup", "--cache-dir", str(blocker / "cache")])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "--cache-dir" in lines[0] and "not a writable directory" in lines[0]


def test_unknown_model_is_one_line_exit_2(tmp_path):
    r = CliRunner().invoke(main, ["warmup", "--cache-dir", str(tmp_path), "--model", "nope"])
    assert r.exit_code == 2
    assert len(r.output.strip().splitlines()) == 1 and "--model" in r.output


def shipped_models() -> list[str]:
    """The models fastdyn ships (an installed plug-in, or a test's in-process model, is not one)."""
    from fastdyn import plugins

    return sorted(n for n in registry.model_names() if plugins.is_builtin(n))


def test_tiny_sizes_for_every_shipped_model():
    assert "msfr" in shipped_models() and "attn-m" in shipped_models()
    assert all(registry.get_model(m).warmup.sizes for m in shipped_models())


def _config(name, sets):
    """A planned run's config: a preset's, or (no preset: a plug-in's run) the defaults."""
    return load_config(presets.resolve(name) if name else None, sets)


def test_plan_runs_every_preset_and_every_model():
    runs = warmup.plan()
    assert {name for _, name, _ in runs} - {""} == set(presets.names())
    assert {label for label, _, _ in runs} >= set(presets.names())  # each preset as shipped
    models = {_config(name, sets).model for _, name, sets in runs}
    assert models == set(registry.model_names())  # the installed plug-ins too


def test_an_installed_plug_in_is_warmed_at_its_defaults_and_listed():
    """examples/logistic (installed by the test command) has no preset: it is warmed at its
    own defaults, shrunk by its warmup sizes, and --list shows that run, after the generic rk4
    kernel declared for it (built from its three functions)."""
    assert "logistic" not in shipped_models()
    (run,) = [r for r in warmup.plan(("logistic",))]
    assert run[0] == "logistic defaults" and run[1] == ""
    assert _config(run[1], run[2]).task.n_tasks == 2000
    r = CliRunner().invoke(main, ["warmup", "--list", "--model", "logistic"])
    assert r.exit_code == 0, r.output
    from fastdyn.drive import integrate_soa

    kernel = (
        "fastdyn.drive.integrate_soa:rk4[fastdyn_logistic.kernels:rhs,"
        "fastdyn_logistic.kernels:observe,fastdyn_logistic.kernels:loss]"
    )
    assert r.output.strip().splitlines() == [
        f"precompile: {kernel} {integrate_soa.rk4.signature}",
        "logistic defaults: fastdyn simulate --set 'task.n_tasks=2000' "
        "--set 'time.n_times=8' --set 'model=\"logistic\"'",
    ]


def test_declared_kernels_come_from_the_models_of_the_plan():
    """The pairs compiled beside the runs are those the planned runs' models declare: MSFR's
    closed form and tracked tasks' closed-form f, and the two integrator kernels (dopri5's, the
    lane kernel of rk4 and gd) its run compiles itself meanwhile; attn-m's fused GD steps, the minibatches' draw and the fused minibatch steps; for an installed plug-in
    on the generic solver, the
    integrator the driver builds from its functions; each pair once."""
    msfr = warmup.precompiles(warmup.plan(("msfr",)))
    names = [k.rsplit(":", 1)[1] for k, _ in msfr]
    assert sorted(names) == [
        "_f_curves_kernel", "_loss_partials_kernel", "dopri5_kernel", "lanes_kernel"
    ]  # fmt: skip
    other = warmup.precompiles(warmup.plan(("attn-m", "logistic")))
    assert [k for k, _ in other] == [
        "fastdyn.models.icl.attn_m.kernels:lin_last_gd",
        "fastdyn.problems.philox:epoch_batches",
        "fastdyn.models.icl.attn_m.kernels:lin_last_steps",
        "fastdyn.drive.integrate_soa:rk4[fastdyn_logistic.kernels:rhs,"
        "fastdyn_logistic.kernels:observe,fastdyn_logistic.kernels:loss]",
    ]
    every = warmup.precompiles(warmup.plan())
    assert len(set(every)) == len(every) and set(msfr) | set(other) <= set(every)


def test_plan_configs_are_valid_and_restricted_by_model():
    """Every planned run's config loads (a variant that no longer validates fails here, not in a
    user's warm-up); --model keeps exactly the runs of that model."""
    for _, name, sets in warmup.plan():
        _config(name, sets)
    only = warmup.plan(("msfr-h",))
    assert only and all(_config(n, s).model == "msfr-h" for _, n, s in only)


def test_list_prints_the_declared_kernels_then_one_line_per_run(tmp_path):
    """--list: one ``precompile:`` line per declared (kernel, signature) pair, then one line
    per run."""
    runs, pairs = warmup.plan(), warmup.precompiles(warmup.plan())
    expect = [f"precompile: {k} {s}" for k, s in pairs]
    r = CliRunner().invoke(main, ["warmup", "--cache-dir", str(tmp_path), "--list"])
    assert r.exit_code == 0
    lines = r.output.strip().splitlines()
    assert lines[: len(pairs)] == expect and len(lines) == len(pairs) + len(runs)
    assert not any(tmp_path.iterdir())  # --list writes nothing
    r = CliRunner().invoke(main, ["warmup", "--list"])  # docs/hpc.md: no directory needed
    assert r.exit_code == 0 and r.output.strip().splitlines() == lines
    r = CliRunner().invoke(main, ["warmup"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--cache-dir: required" in r.output


def test_kernels_compile_one_signature_per_run(tmp_path):
    """Issue 20 "fewer specialisations": a dopri5 run with the exact closed form and a random init
    compiles each of these kernels for at most one signature (they were compiled twice or more: a prange
    index is uint64 in the parallel loop and int64 while typed; literal constants got their own)."""
    from fastdyn.models.msfr import _closed_form, lanes_dopri5, theory
    from fastdyn.problems import rng

    sets = ["task.n_tasks=3000", "time.n_times=6", "output.track=[1]", 'theory.level="exact"',
            'init.scheme="random"', "time.t_max=1e4"]  # fmt: skip
    import numba

    threads = str(min(2, numba.config.NUMBA_NUM_THREADS))  # NUMBA_NUM_THREADS=1 (docs/hpc.md) too
    args = ["-q", "simulate", "quickstart", "-o", str(tmp_path / "q.h5"), "--threads", threads]
    r = CliRunner().invoke(main, args + [a for s in sets for a in ("--set", s)])
    assert r.exit_code == 0, r.output
    kernels = {
        "dopri5_group": lanes_dopri5.dopri5_group,
        "_exact_tail": _closed_form._exact_tail,
        "_walk_right": theory._walk_right,
        "_exp_terms": theory._exp_terms,
        "_series_lanes": theory._series_lanes,
        "_flush_lanes": theory._flush_lanes,
        "_lanes_0_5": theory._lanes_0_5,
        "_lanes_6_11": theory._lanes_6_11,
        "_lanes_12_18": theory._lanes_12_18,
        "rng.key": rng.key,
        "rng.uniform": rng.uniform,
        "rng.normal": rng.normal,
    }
    # kernels loaded from numba's cache list no signature; compiled ones (a fresh checkout, CI)
    # list what this process compiled: one each
    counts = {name: len(k.signatures) for name, k in kernels.items()}
    assert all(n <= 1 for n in counts.values()), counts


def test_private_copy_of_a_read_only_cache(tmp_path, monkeypatch):
    """A read-only NUMBA_CACHE_DIR is copied into a private writable directory: every file once,
    then only those changed in the shared one; what numba added to the copy stays."""
    import time

    from fastdyn import _cache

    shared = tmp_path / "shared"
    (shared / "pkg_abc").mkdir(parents=True)
    (shared / "pkg_abc" / "f-1.py311.nbi").write_bytes(b"index")
    (shared / "pkg_abc" / "f-1.py311.1.nbc").write_bytes(b"code")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    dest = _cache.private_copy(shared)
    assert dest is not None and dest.is_relative_to(tmp_path / "xdg")
    assert (dest / "pkg_abc" / "f-1.py311.nbi").read_bytes() == b"index"
    assert (dest / "pkg_abc" / "f-1.py311.1.nbc").read_bytes() == b"code"
    (dest / "pkg_abc" / "f-1.py311.2.nbc").write_bytes(b"compiled here")
    newer = time.time() + 10
    (shared / "pkg_abc" / "f-1.py311.nbi").write_bytes(b"index2")  # re-warmed
    os.utime(shared / "pkg_abc" / "f-1.py311.nbi", (newer, newer))
    assert _cache.private_copy(shared) == dest
    assert (dest / "pkg_abc" / "f-1.py311.nbi").read_bytes() == b"index2"
    assert (dest / "pkg_abc" / "f-1.py311.2.nbc").read_bytes() == b"compiled here"


def test_cached_kernels_are_dropped_when_any_source_changes(tmp_path):
    """numba checks a cached kernel against its own file only; fastdyn/_cache.py drops every
    cached kernel of an in-tree cache once any source file changed (a callee's edit would
    otherwise leave stale machine code in its callers' cache entries)."""
    import os

    from fastdyn import _cache

    pkg = tmp_path / "pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "__pycache__").mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    old = [
        pkg / "__pycache__" / "a.f-1.py311.nbi",
        pkg / "sub" / "__pycache__" / "b.g-2.py311.1.nbc",
    ]
    keep = pkg / "sub" / "__pycache__" / "b.cpython-311.pyc"
    for f in (*old, keep):
        f.write_bytes(b"x")
    assert _cache.drop_stale_kernels(pkg) == 2  # no fingerprint yet: they may be stale
    assert keep.exists() and not any(f.exists() for f in old)
    for f in old:
        f.write_bytes(b"x")  # compiled again from these sources
    assert _cache.drop_stale_kernels(pkg) == 0 and all(f.exists() for f in old)
    b = pkg / "sub" / "b.py"
    st = b.stat()
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # edited (a callee's module)
    assert _cache.drop_stale_kernels(pkg) == 2 and not any(f.exists() for f in old)
    assert _cache.drop_stale_kernels(pkg) == 0
