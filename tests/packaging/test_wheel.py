"""The built wheel works where users install it (issue 17, acceptance 6): presets packaged, numba's
cache redirected when site-packages is read-only and HOME is unset, and ``fastdyn --help`` does
not import numba.

The install is a fresh venv holding only the wheel (``pip install --no-deps --target``); its
dependencies come from this environment's site-packages through a plain path line (no ``.pth``
processing there, so this checkout's editable install cannot leak in). The venv is made read-only
by a read-only bind mount when the tests run as root (root writes through file modes), else by
file modes."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import h5py
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _site(venv: Path) -> Path:
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    return venv / rel


def _read_only(tree: Path) -> bool:
    """Make ``tree`` read-only; True when that is a bind mount to undo."""
    if os.geteuid() == 0:
        r1 = subprocess.run(["mount", "--bind", str(tree), str(tree)], capture_output=True)
        if r1.returncode != 0:
            pytest.skip(
                "running as root where mount is not allowed: cannot make a read-only install"
            )
        r2 = subprocess.run(["mount", "-o", "remount,bind,ro", str(tree)], capture_output=True)
        if r2.returncode != 0:
            subprocess.run(["umount", str(tree)])
            pytest.skip("cannot remount read-only here")
        return True
    for d, _dirs, files in os.walk(tree):
        for f in files:
            p = Path(d) / f
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        Path(d).chmod(0o555)
    return False


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    tmp.chmod(0o755)
    whl_dir = tmp / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(whl_dir), str(ROOT)], capture_output=True, text=True)  # fmt: skip
    if r.returncode != 0:
        pytest.fail(f"pip wheel failed: {r.stderr[-2000:]}")
    (whl,) = whl_dir.glob("fastdyn-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = _site(venv)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site), str(whl)], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (site / "_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    mounted = _read_only(venv)
    try:
        yield venv
    finally:
        if mounted:
            subprocess.run(["umount", str(venv)])
        shutil.rmtree(
            Path(tempfile.gettempdir()) / f"fastdyn-numba-{os.getuid()}", ignore_errors=True
        )


def _no_home(cwd: Path, ro: Path) -> dict:
    """subprocess.run arguments: no writable HOME and no cache settings. Unset, HOME falls back to
    the user's home in the password database (writable for root), so it is pointed at the
    read-only install instead."""
    drop = ("HOME", "NUMBA_CACHE_DIR", "FASTDYN_CACHE_DIR", "PYTHONPATH", "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HOME"] = str(ro)
    return {"cwd": cwd, "env": env, "capture_output": True, "text": True}


def _run_preset(wheel_venv, tmp_path, extra: list[str]) -> None:
    py = wheel_venv / "bin" / "python"
    out = tmp_path / "run"
    out.mkdir()
    kw = _no_home(out, wheel_venv)
    where = subprocess.run([str(py), "-c", "import fastdyn, os; print(fastdyn.__file__); print(os.access(os.path.dirname(fastdyn.__file__), os.W_OK))"], **kw)  # fmt: skip
    assert where.returncode == 0, where.stderr
    path, writable = where.stdout.split()
    assert path.startswith(str(wheel_venv)) and writable == "False", where.stdout
    r = subprocess.run([str(py), "-m", "fastdyn", "-q", "simulate", "quickstart", "--set", "task.n_tasks=1000", "--set", "output.track=[1, 10]", *extra, "-o", "q.h5"], **kw)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    with h5py.File(out / "q.h5", "r") as f:
        assert (
            f.attrs["status"] == "complete"
            and f["loss/test" if not extra else "theory/loss/test"].shape[0] > 0
        )


def test_read_only_install_defines_every_kernel_and_finds_the_presets(wheel_venv, tmp_path):
    """The two failures of a read-only install, without compiling anything (seconds): numba raises
    "no locator available" when a ``cache=True`` kernel is defined, i.e. at import, and a preset
    must resolve to a file inside the installed package."""
    py = wheel_venv / "bin" / "python"
    code = (
        "import pkgutil, importlib, fastdyn, os\n"
        "mods = [m.name for m in pkgutil.walk_packages(fastdyn.__path__, 'fastdyn.') if '_cuda' not in m.name and 'cli' not in m.name and not m.name.endswith('__main__')]\n"
        "[importlib.import_module(m) for m in mods]\n"
        "from fastdyn.config.presets import resolve, names\n"
        "print(fastdyn.__file__, os.access(os.path.dirname(fastdyn.__file__), os.W_OK), resolve('quickstart'), len(names()), len(mods))\n"
    )
    r = subprocess.run([str(py), "-c", code], **_no_home(tmp_path, wheel_venv))
    assert r.returncode == 0, r.stderr[-3000:]
    path, writable, preset, n_presets, n_mods = r.stdout.split()
    assert path.startswith(str(wheel_venv)) and writable == "False", r.stdout
    assert preset.startswith(str(wheel_venv)) and preset.endswith("presets/quickstart.toml")
    assert int(n_presets) >= 12 and int(n_mods) > 40


@pytest.mark.slow
def test_wheel_runs_the_quickstart_command_of_the_issue(wheel_venv, tmp_path):
    """Issue 17, acceptance 6, as written: ``simulate quickstart --set task.n_tasks=1000`` from the
    read-only install (dopri5 and the first-order theory compiled from nothing: ~45 s on 2 cores,
    hence slow; the test above covers the same two failures in seconds)."""
    _run_preset(wheel_venv, tmp_path, [])


def test_help_does_not_import_numba(wheel_venv, tmp_path):
    py = wheel_venv / "bin" / "python"
    code = "import sys, fastdyn.cli; from click.testing import CliRunner; r = CliRunner().invoke(fastdyn.cli.main, ['--help']); assert r.exit_code == 0, r.output; print('numba' in sys.modules)"  # fmt: skip
    r = subprocess.run([str(py), "-c", code], **_no_home(tmp_path, wheel_venv))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
