"""Every file names the packages that made it (the plug-in's distribution among them) and the
commit of the checkout it was run from; provenance never fails a run."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version
from pathlib import Path

import h5py
import numba
import numpy as np
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5 import provenance


def _versions(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["versions"])


def _run(tmp_path: Path, *sets: str) -> dict:
    out = tmp_path / "run.h5"
    args = ["simulate", "-o", str(out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return _versions(out)


def _git_head() -> str | None:
    """HEAD of the checkout fastdyn is imported from, asked of git itself (None: not a checkout)."""
    root = Path(fastdyn.__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    r = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return r.stdout.strip() if r.returncode == 0 else None


def test_a_plugin_run_names_the_plugin_distribution_and_every_package(tmp_path) -> None:
    v = _run(tmp_path, 'model="logistic"', "task.n_tasks=2000", "time.n_times=4")
    assert (
        v["model_package"]
        == f"fastdyn-logistic {version('fastdyn-logistic')}"
        == "fastdyn-logistic 0.1.0"
    )
    assert v["fastdyn-logistic"] == "0.1.0"
    assert v["fastdyn"] == fastdyn.__version__
    assert (v["numba"], v["numpy"], v["h5py"]) == (
        numba.__version__,
        np.__version__,
        h5py.__version__,
    )
    head = _git_head()
    if head is None:  # an installed fastdyn: no commit to name
        assert "git_commit" not in v
    else:
        assert v["git_commit"] == head and isinstance(v["git_modified"], bool)


def test_a_builtin_run_names_fastdyn_as_its_model_package(tmp_path) -> None:
    v = _run(
        tmp_path, "task.n_tasks=2000", "output.track=[1, 10]", "time.n_times=4", "time.t_max=10"
    )
    assert v["model_package"] == f"fastdyn {fastdyn.__version__}"
    assert not any(k.startswith("fastdyn-") for k in v)


def test_the_commit_is_read_from_a_worktree_and_packed_refs(tmp_path) -> None:
    """A worktree's ``.git`` file pointing at a git dir whose branch is only in packed-refs (the
    layout ``git worktree add`` and ``git gc`` leave), and a detached HEAD."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    common = tmp_path / "main.git"
    wt = common / "worktrees" / "w"
    wt.mkdir(parents=True)
    (wt / "HEAD").write_text("ref: refs/heads/topic\n")
    (wt / "commondir").write_text("../..\n")
    (common / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/topic\n")
    root = tmp_path / "checkout"
    root.mkdir()
    (root / ".git").write_text(f"gitdir: {wt}\n")
    assert provenance._head_from_files(root) == sha
    (wt / "HEAD").write_text(sha[::-1] + "\n")  # detached
    assert provenance._head_from_files(root) == sha[::-1]
    assert provenance._head_from_files(tmp_path) is None  # no .git at all


def test_no_git_no_checkout_no_failure(tmp_path, monkeypatch) -> None:
    """Without a git executable the commit still comes from the files; a failing git call is
    None, never an exception."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    assert provenance._git(tmp_path, "rev-parse", "HEAD") is None
    provenance.checkout.cache_clear()
    try:
        got = provenance.checkout()
        head = _git_head_from_files()
        assert got.get("git_commit") == head and "git_modified" not in got
    finally:
        provenance.checkout.cache_clear()


def _git_head_from_files() -> str | None:
    root = Path(fastdyn.__file__).resolve().parents[1]
    return provenance._head_from_files(root) if (root / ".git").exists() else None
