"""``fastdyn.simulate(cfg, path)`` never replaces an existing file unless ``overwrite=True``.

It used to overwrite a finished file silently, even one holding another model's run; the CLI
already refused without ``--overwrite``. A path that is not a regular file is refused with or
without the flag (the writer's own check, kept).
"""

from __future__ import annotations

import hashlib

import pytest

import fastdyn
from fastdyn.h5.lock import NotRegularFile

SMALL = ["task.n_tasks=10", "output.track=[1,2]", 'solver.integrator="none"', "time.n_times=8"]


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def finished(tmp_path):
    out = tmp_path / "a.h5"
    assert fastdyn.simulate(fastdyn.load_config(None, SMALL), out) == "complete"
    return out


def test_an_existing_file_is_refused_and_left_untouched(finished):
    before = _digest(finished)
    other = fastdyn.load_config(None, ['model="msfr-attn"'])  # another model's run
    with pytest.raises(FileExistsError, match="overwrite=True") as e:
        fastdyn.simulate(other, finished)
    assert str(finished) in str(e.value) and len(str(e.value).splitlines()) == 1
    assert _digest(finished) == before
    assert sorted(p.name for p in finished.parent.iterdir()) == ["a.h5"]  # no lock, no scratch
    assert fastdyn.load(finished).model == "msfr"


def test_overwrite_true_replaces_it(finished):
    cfg = fastdyn.load_config(None, [*SMALL, "task.n_tasks=12"])
    assert fastdyn.simulate(cfg, finished, overwrite=True) == "complete"
    run = fastdyn.load(finished)
    assert run.config["task"]["n_tasks"] == 12


def test_any_existing_file_counts_even_an_empty_one(tmp_path):
    out = tmp_path / "empty.h5"
    out.touch()
    with pytest.raises(FileExistsError, match="exists; pass overwrite=True"):
        fastdyn.simulate(fastdyn.load_config(None, SMALL), out)
    assert out.read_bytes() == b""


def test_a_fifo_is_refused_even_with_overwrite(tmp_path):
    import os

    node = tmp_path / "fifo"
    os.mkfifo(node)
    with pytest.raises(NotRegularFile, match="is a FIFO"):
        fastdyn.simulate(fastdyn.load_config(None, SMALL), node, overwrite=True)
