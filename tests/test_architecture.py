"""The package's shape: the CUDA twins sit beside their CPU kernels without an import cycle, and no
kernel or model reads a device global (the device is an argument, issue 16). The layer contracts
themselves are import-linter's (`.ci/run` runs `lint-imports`)."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import grimp
import pytest

PKG = Path(__file__).resolve().parents[1] / "fastdyn"


def test_no_import_cycle_through_a_cuda_twin():
    g = grimp.build_graph("fastdyn")
    twins = [m for m in g.modules if m.endswith("_cuda")]
    assert len(twins) >= 3  # theory_cuda, integrate_cuda, attn_m.kernels_cuda
    cycles = [
        (m, imp)
        for m in twins
        for imp in g.find_modules_directly_imported_by(m)
        if g.chain_exists(importer=imp, imported=m)
    ]
    assert not cycles, cycles


# --- the device is an argument -------------------------------------------------------------------
# ``device`` is resolved once, from the config (``fastdyn.drive.device.resolve`` at the driver's
# entry, ``--device`` in ``simulate``), and passed down: ``setup(cfg, device)`` → ``advance(...,
# device=)``, ``loss_partials(..., device=)``, the attention model's ``device`` field. The
# regression to guard against is a second, hidden channel: a module-level setting that the CLI
# or the driver sets and a kernel or model reads (``drive.device.CURRENT = "cuda"``), an
# environment variable read deep down (``FASTDYN_DEVICE``), or a kernel module that asks numba.cuda
# itself whether to use the GPU.

#: the device rules, and the kernels and models that must not consult them (only the config
#: classes, which check the ``device`` key (``config/`` and each model's ``config`` module), the
#: driver's entry, ``drive.run``, which resolves it, and the CLI may): a kernel or model that
#: imports them is choosing its device itself
DEVICE_RULES = ("fastdyn.drive.device", "fastdyn.config.device")
KERNELS_AND_MODELS = ("fastdyn.core", "fastdyn.models", "fastdyn.problems", "fastdyn.drive")
DEVICE_RESOLVERS = {"fastdyn.drive.run", "fastdyn.drive.device"}

#: the modules that may load numba.cuda: the CUDA twins (``*_cuda.py``), their device memory, and
#: the availability check of ``device = "cuda"``
CUDA_OK = ("_cuda_memory.py", "drive/device.py")

_DEVICEISH = re.compile(r"device|gpu|cuda", re.I)
_DEVICE_NAMES = {"cpu", "cuda", "gpu"}


def _module_level(tree: ast.Module):
    """The statements that run at import (the module's, not those in function or class bodies)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            todo.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))


def _bound(node: ast.stmt) -> list[tuple[str, ast.expr | None]]:
    """(name, value) for every module-level name that ``node`` binds."""
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets, value = [node.target], node.value
    else:
        return []
    names = [n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return [(n.id, value) for n in names]


def _names_table(value: ast.expr | None) -> bool:
    """A literal table of device names, not a setting: a tuple of string constants (``DEVICES =
    ("cpu", "cuda")``) or a dict of such tuples (the devices each model runs on)."""

    def names(v: ast.expr | None) -> bool:
        return isinstance(v, ast.Tuple) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in v.elts
        )

    if isinstance(value, ast.Dict):
        return all(isinstance(k, ast.Constant) for k in value.keys) and all(
            names(v) for v in value.values
        )
    return names(value)


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _env_keys(tree: ast.Module):
    """The keys of every ``os.environ[...]``, ``os.environ.get/pop/setdefault(...)`` and
    ``os.getenv(...)`` (a key given by a module-level constant is looked up)."""
    consts = {
        name: v.value
        for node in _module_level(tree)
        for name, v in _bound(node)
        if isinstance(v, ast.Constant) and isinstance(v.value, str)
    }
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault")
                    and _is_environ(f.value)) or (
                isinstance(f, ast.Attribute | ast.Name)
                and (f.attr if isinstance(f, ast.Attribute) else f.id) == "getenv"
            ):  # fmt: skip
                key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            yield node.lineno, key.value
        elif isinstance(key, ast.Name) and key.id in consts:
            yield node.lineno, consts[key.id]


def _loads_numba_cuda(tree: ast.Module):
    """Lines that import numba.cuda or reach it as ``numba.cuda`` (at import or in a function)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name == "numba.cuda" or a.name.startswith("numba.cuda.") for a in node.names
        ):
            yield node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.startswith("numba.cuda") or (
                node.module == "numba" and any(a.name == "cuda" for a in node.names)
            ):
                yield node.lineno
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "cuda"
            and isinstance(node.value, ast.Name)
            and node.value.id == "numba"
        ):
            yield node.lineno


def device_globals(root: Path) -> list[str]:
    """Every place in the package at ``root`` that could carry the device other than as an
    argument: a module-level binding named after the device or holding a device's name (bar
    literal tables of names such as ``DEVICES``), a ``global`` of such a name, an environment
    read of a variable naming a device, numba.cuda loaded outside the twins and the availability
    check."""
    found = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
        for node in _module_level(tree):
            for name, value in _bound(node):
                holds_name = isinstance(value, ast.Constant) and value.value in _DEVICE_NAMES
                if (_DEVICEISH.search(name) or holds_name) and not _names_table(value):
                    found.append(f"{rel}:{node.lineno}: module-level {name!r}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Global | ast.Nonlocal):
                for name in node.names:
                    if _DEVICEISH.search(name):
                        found.append(f"{rel}:{node.lineno}: global {name!r}")
        for line, key in _env_keys(tree):
            if _DEVICEISH.search(key):
                found.append(f"{rel}:{line}: environment read of {key!r}")
        if not (p.stem.endswith("_cuda") or rel in CUDA_OK):
            found += [f"{rel}:{line}: loads numba.cuda" for line in _loads_numba_cuda(tree)]
    return found


def test_no_module_level_device_setting():
    assert device_globals(PKG) == []


def test_no_kernel_or_model_consults_the_device_rules():
    g = grimp.build_graph("fastdyn")
    users = {m for rule in DEVICE_RULES for m in g.find_modules_that_directly_import(rule)}
    assert users, "the device rules moved: update DEVICE_RULES"
    bad = sorted(
        m
        for m in users - DEVICE_RESOLVERS
        if any(m == k or m.startswith(k + ".") for k in KERNELS_AND_MODELS)
        and not m.endswith(".config")  # a model's config schema checks its ``device`` key
    )
    assert not bad, bad


#: plausible regressions, each applied to a copy of the package: (file, text appended)
REGRESSIONS = {
    "a settable current device": ("drive/device.py", '\nCURRENT = "cpu"\n'),
    "a module-level flag in a kernel module": ("models/msfr/integrate.py", "\n_on_gpu = False\n"),
    "set through global": (
        "drive/run.py",
        "\ndef use(name):\n    global _device\n    _device = name\n",
    ),
    "an environment variable": (
        "models/msfr/theory.py",
        '\nimport os\n\ndef _dev():\n    return os.environ.get("FASTDYN_DEVICE", "cpu")\n',
    ),
    "an environment constant": (
        "models/icl/attn_m/__init__.py",
        '\nimport os\n_KEY = "FASTDYN_USE_GPU"\n\ndef _dev():\n    return os.getenv(_KEY)\n',
    ),
    "a kernel that asks numba.cuda itself": (
        "models/msfr/integrate.py",
        "\ndef _gpu_here():\n    from numba import cuda\n\n    return cuda.is_available()\n",
    ),
    "numba.cuda by attribute": ("models/msfr/theory.py", "\nimport numba\n_X = numba.cuda\n"),
}


@pytest.mark.parametrize("what", list(REGRESSIONS))
def test_the_device_check_catches_a_regression(tmp_path, what):
    """The check above can fail: each regression, applied to a copy of its file (at its place
    in the package's tree), is reported, and only it."""
    rel, text = REGRESSIONS[what]
    assert (PKG / rel).is_file(), f"{rel} moved: update REGRESSIONS"
    copy = tmp_path / "fastdyn" / rel
    copy.parent.mkdir(parents=True)
    shutil.copy(PKG / rel, copy)
    assert device_globals(tmp_path / "fastdyn") == []
    with copy.open("a", encoding="utf-8") as fh:
        fh.write(text)
    found = device_globals(tmp_path / "fastdyn")
    assert len(found) == 1 and found[0].startswith(rel + ":"), found
