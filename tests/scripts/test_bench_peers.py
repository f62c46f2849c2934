"""The peer benchmarks (bench/peers_*.py, bench/peak.py, issue 20) start without the optional
``bench`` extra: ``--help`` imports no peer package, a missing peer is skipped with one printed
line, and the timing helper alternates the case order. No timing is checked here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _peers  # noqa: E402


@pytest.mark.parametrize(
    "script",
    ["peers_msfr.py", "peers_icl.py", "peers_icl_minibatch.py", "peers_msfr_attn.py", "peak.py"],
)
def test_help_without_peers(script):
    code = (
        "import runpy, sys\n"
        "sys.modules['jax'] = sys.modules['torch'] = sys.modules['diffrax'] = None\n"
        f"sys.argv = ['{script}', '--help']\n"
        f"runpy.run_path(r'{ROOT / 'bench' / script}', run_name='__main__')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout


def test_missing_peer_is_skipped(capsys):
    assert _peers.optional("fastdyn_no_such_peer_package") is None
    assert "skipped" in capsys.readouterr().out


def test_blocked_peer_is_skipped(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # import jax raises ImportError
    assert _peers.optional("jax") is None
    assert "jax" in capsys.readouterr().out


def test_measure_alternates_order():
    calls = []
    res = _peers.measure({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert len(res["a"].wall) == len(res["b"].cpu) == len(res["a"].load) == 3


def test_rel_diff():
    assert _peers.rel_diff([1.0, 2.5], [1.0, 2.0]) == pytest.approx(0.25)
