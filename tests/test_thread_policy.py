"""fastdyn asks libgomp's idle threads to sleep (fastdyn/_threads.py) unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import os, fastdyn; print(os.environ.get('OMP_WAIT_POLICY'))"


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ({}, "PASSIVE"),
        ({"OMP_WAIT_POLICY": "active"}, "active"),
        ({"GOMP_SPINCOUNT": "1000"}, "None"),
    ],
)
def test_wait_policy(given, want):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**env, **given},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == want
