"""What made a file: package versions, the model's own package and the source checkout's commit.

:func:`versions` is the root attribute ``versions`` (JSON) of every output file:

- ``fastdyn``, ``numpy``, ``numba``, ``h5py`` (and ``hdf5``, ``python``, ``platform``): the
  versions of everything that shapes the numbers;
- ``model_package``: the distribution and version the run's model comes from, e.g.
  ``"fastdyn-example 0.1.0"`` for a plug-in distribution, ``"fastdyn 0.1.0"`` for a built-in model,
  ``"in-process"`` for one registered in-process (:func:`fastdyn.plugins.register`); a plug-in's
  distribution is also listed under its own name (``"fastdyn-example": "0.1.0"``);
- ``git_commit``: the commit of the git checkout fastdyn is imported from (an editable install),
  ``git_modified``: whether tracked files under ``fastdyn/`` differ from it. Both are left out
  when fastdyn is not imported from a checkout or git cannot say within a second: provenance
  never fails a run.
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess
from pathlib import Path

from .._version import __version__

_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def versions(model: str | None = None) -> dict[str, str | bool]:
    """Versions of everything that shapes the numbers of a run of ``model`` (see the module)."""
    import h5py
    import numba
    import numpy as np

    out: dict[str, str | bool] = {
        "fastdyn": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "platform": platform.platform(),
    }
    if model is not None:
        dist = model_package(model)
        if dist is not None:
            name, version = dist
            out["model_package"] = f"{name} {version}".strip()
            if name not in ("fastdyn", "in-process") and version:
                out[name] = version
    out |= checkout()
    return out


def model_package(model: str) -> tuple[str, str] | None:
    """(distribution, version) that model ``model`` comes from, ("in-process", "") for one
    registered in-process, or None when it is not known."""
    from .. import plugins

    try:
        plugins.get(model)
    except KeyError:
        return None
    return plugins.distribution(model)


@functools.cache
def checkout() -> dict[str, str | bool]:
    """``{"git_commit": sha, "git_modified": bool}`` of the git checkout holding the imported
    ``fastdyn`` package, ``{}`` when there is none (an installed package) or git cannot tell."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return {}
    sha = _head_from_files(root) or _git(root, "rev-parse", "HEAD")
    if not sha or not _SHA.match(sha):
        return {}
    out: dict[str, str | bool] = {"git_commit": sha}
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", "fastdyn")
    if status is not None:
        out["git_modified"] = bool(status)
    return out


def _head_from_files(root: Path) -> str | None:
    """HEAD's commit read from the checkout's files (.git a directory, or a worktree's
    ``gitdir:`` file; loose refs, then packed-refs), or None when they do not say."""
    try:
        dot = root / ".git"
        if dot.is_file():
            line = dot.read_text().strip()
            if not line.startswith("gitdir:"):
                return None
            gitdir = (root / line.split(":", 1)[1].strip()).resolve()
        else:
            gitdir = dot
        head = (gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
        for base in (gitdir, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name.strip() == ref:
                    return sha
    except OSError:
        return None
    return None


def _git(root: Path, *args: str) -> str | None:
    """stdout of ``git -C root args`` (stripped), or None when git is absent, fails or takes
    more than a second."""
    try:
        r = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=1.0,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None
