"""The package's shape: the CUDA twins sit beside their CPU kernels without an import cycle, and no
kernel or model reads a device global (the device is an argument, issue 16). The layer contracts
themselves are import-linter's (`.ci/run` runs `lint-imports`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import grimp

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


def test_no_device_global():
    assert importlib.util.find_spec("fastdyn._device") is None
    readers = [
        str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "_device.active" in p.read_text()
    ]
    assert not readers, readers
