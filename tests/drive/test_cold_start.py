"""A cold run says what it does: on an empty kernel cache, one line saying that it compiles, that
this happens once and about how long; the terminal bar's ETA counts from the first rows, not from
the start of compiling (it showed 7:52 for a 64 s run)."""

from __future__ import annotations

import io

import click

from fastdyn import _cache
from fastdyn.drive import progress


def test_an_empty_cache_is_told_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    assert _cache.cache_is_empty()
    (tmp_path / "fastdyn" / "drive").mkdir(parents=True)
    (tmp_path / "fastdyn" / "drive" / "k.dopri5-12.py311.nbi").write_bytes(b"x")
    assert not _cache.cache_is_empty()


def test_the_notice_is_one_line_and_only_on_a_cold_cache(monkeypatch, capsys):
    monkeypatch.setattr(_cache, "cache_is_empty", lambda: True)
    assert progress.compile_notice()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    line = err.strip()
    assert line.startswith("fastdyn: compiling the kernels") and "once" in line
    assert "about 20 s to 1 min" in line
    monkeypatch.setattr(_cache, "cache_is_empty", lambda: False)
    assert not progress.compile_notice()
    assert capsys.readouterr().err == ""


def test_the_bar_eta_starts_after_compiling():
    p = progress.Progress(100, False)
    p.bar = click.progressbar(length=100, file=io.StringIO())
    p.bar.__enter__()
    p.bar.start -= 300.0  # 300 s of compiling before the first rows
    p.bar.last_eta = 0.0
    p.update(10)  # the first rows: the clock starts here, the ETA is not known yet
    assert not p.bar.eta_known
    p.bar.start -= 10.0  # 10 s later, 10 more rows: 1 s a row, 80 rows left
    p.bar.last_eta = 0.0
    p.update(10)
    # 80 s plus 8 s for each second this test itself takes between the two updates (a loaded
    # machine); without the restart: (310 / 20) × 80 = 1240 s
    assert p.bar.eta_known and 79.0 < p.bar.eta < 120.0
    p.close()


def test_batch_lines_say_compiling_until_the_first_rows(monkeypatch):
    monkeypatch.setattr(_cache, "cache_is_empty", lambda: True)
    monkeypatch.setattr(progress, "_compiling", False)
    p = progress.Progress(602, False)
    assert p.line().startswith("fastdyn: simulate: 0/602 rows written")  # a warm cache: as before
    progress.compile_notice()
    assert p.line().startswith("fastdyn: simulate: compiling the kernels (once), elapsed ")
    p.update(5, t=1.0)
    assert p.line().startswith("fastdyn: simulate: 5/602 rows written")
    assert not progress._compiling
