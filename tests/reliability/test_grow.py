"""Runs grow: ``fastdyn simulate --resume FILE --set schedule.epochs=…`` (trained models) or
``--set time.t_max=…`` (ODE models) continues a complete file; the grown file equals a run made
to the new end at once, every dataset and attribute bit for bit (the timings, command line and
creation time aside, and the resume state's sequence numbers). A file made with default settings
kept no resume state: it grows by a replay of the run from its start, every replayed row checked
against the file's bit for bit, and a file whose rows the replay does not repeat is refused in one
line naming the row. Overrides that would change a written row are refused in one line."""

from __future__ import annotations

import tomllib

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.core.saveat import continue_grid, make_times
from fastdyn.h5.writer import read_checkpoint

#: root attributes that record when and how a file was made, not what it holds
_WHEN = {"timings", "command_line", "created"}

#: checkpoints after every save / segment: a grown file continues from a checkpoint near its end
KEPT = ["output.checkpoint_every=0", "output.keep_checkpoint=true"]
ATTN_M = ["model=attn-m", "data.P=200", "schedule.save_every=10", *KEPT]
OPTIM = {"adam": ["optim.name=adam", "optim.lr=0.01"], "gd": ["optim.name=gd", "optim.lr=0.05"]}
#: 42 rows (t = 0 first) in segments of 4: a replay's state at row 40 is the one the file opens at
MSFR = [
    "task.n_tasks=2048", "time.t_min=0.01", "time.n_times=41", "output.times_per_segment=4",
    "theory.level=leading", *KEPT,
]  # fmt: skip
#: the line a grown file that kept no resume state starts with
REPLAY = "no resume state kept: replaying"


def _settings(sets: list[str], kept: bool) -> list[str]:
    """``sets`` as given (kept: the resume state kept), or with fastdyn's defaults for it."""
    return sets if kept else [s for s in sets if s not in KEPT]


def _kept(path) -> bool:
    with h5py.File(path, "r") as f:
        return "checkpoint" in f


def _run(*args: str):
    return CliRunner().invoke(main, ["-q", *args])


def _simulate(path, sets: list[str]) -> None:
    res = _run("simulate", *(a for s in sets for a in ("--set", s)), "-o", str(path))
    assert res.exit_code == 0, res.output


def _grow(path, *sets: str):
    return CliRunner().invoke(
        main, ["simulate", "--resume", str(path), *(a for s in sets for a in ("--set", s))]
    )


def _contents(path) -> dict:
    """Every dataset outside /checkpoint, the root attributes but :data:`_WHEN`, and the arrays
    of the newest resume state."""
    out: dict = {}
    with h5py.File(path, "r") as f:
        for k, v in f.attrs.items():
            if k not in _WHEN:
                out[f"@{k}"] = v
        f.visititems(
            lambda n, o: (
                out.__setitem__(n, o[()])
                if isinstance(o, h5py.Dataset) and not n.startswith("checkpoint")
                else None
            )
        )
        ck = read_checkpoint(f)
        if ck is not None:
            out |= {f"checkpoint:{k}": v for k, v in ck[0].items()} | {"checkpoint:rows": ck[1]}
    return out


def assert_identical(a, b) -> None:
    ca, cb = _contents(a), _contents(b)
    assert sorted(ca) == sorted(cb)
    bad = [k for k in ca if not np.array_equal(ca[k], cb[k], equal_nan=np.asarray(ca[k]).dtype.kind == "f")]  # fmt: skip
    assert not bad, bad


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "replayed"])
@pytest.mark.parametrize("optim", ["adam", "gd"])
def test_a_trained_run_grows_to_the_run_made_at_once(tmp_path, optim, kept):
    """attn-m, 100 epochs grown to 200 = 200 epochs at once (adam: moments and step counter
    restored; gd: the fused GD steps of the full-batch path); from its kept resume state, or
    (default settings) replayed from step 0 to the state after its last row."""
    sets = _settings(ATTN_M + OPTIM[optim], kept)
    grown, once = tmp_path / "grown.h5", tmp_path / "once.h5"
    _simulate(grown, [*sets, "schedule.epochs=100"])
    _simulate(once, [*sets, "schedule.epochs=200"])
    assert _kept(grown) is kept
    res = _grow(grown, "schedule.epochs=200")
    assert res.exit_code == 0, res.output
    assert (f"{grown}: {REPLAY} 100 epochs" in res.output) is not kept, res.output
    with h5py.File(grown, "r") as f:
        assert f.attrs["status"] == "complete" and f["step"][-1] == 200
        assert tomllib.loads(f.attrs["config"])["schedule"]["epochs"] == 200
    assert_identical(grown, once)  # the config and its identity_crc32 among the attributes


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "replayed"])
@pytest.mark.parametrize("integrator", ["rk4", "dopri5"])
def test_an_ode_run_grows_past_t_max_at_its_own_ratio(tmp_path, integrator, kept):
    """MSFR on the log grid 0.01 … 1e3 (41 times, ratio 10^(1/8)) grown to t_max = 1e4: 49
    times at the same ratio, equal to the run made on 0.01 … 1e4 with 49 times at once; from
    its kept resume state, or (default settings) replayed."""
    sets = [*_settings(MSFR, kept), f"solver.integrator={integrator}"]
    grown, once = tmp_path / "grown.h5", tmp_path / "once.h5"
    _simulate(grown, [*sets, "time.t_max=1e3"])
    with h5py.File(grown, "r") as f:
        before = {k: f[k][()] for k in ("time", "loss/test", "tasks/f")}
    _simulate(once, [*sets, "time.t_max=1e4", "time.n_times=49"])
    assert _kept(grown) is kept
    res = _grow(grown, "time.t_max=1e4")
    assert res.exit_code == 0, res.output
    assert (f"{grown}: {REPLAY} its integration to t = 1000" in res.output) is not kept
    with h5py.File(grown, "r") as f:
        t = f["time"][()]
        for k, v in before.items():  # every integrated row kept as it was
            assert np.array_equal(f[k][: len(v)], v, equal_nan=True), k
        assert f.attrs["status"] == "complete"
    assert t.size == 1 + 49 and t[-1] == 1e4  # t = 0 first (time.include_zero)
    ratio = t[2:] / t[1:-1]  # the log grid's ratio, 10^(1/8), everywhere (closed form)
    assert np.allclose(ratio, 10 ** (1 / 8), rtol=1e-13, atol=0)
    assert_identical(grown, once)


def test_a_t_max_off_the_grid_ends_at_the_next_grid_point(tmp_path):
    """1e-3 … 5e3 with 16 times, grown to 1e4: the next point at the grid's ratio,
    5e3 · (5e6)^(1/15) ≈ 1.398e4. Floating point keeps the plain grid (t_min, t_max', 17) from
    repeating the written times bit for bit here (the old end is 5e3 exactly, the formula's
    value at its index is not), so the config stores the explicit times; a run of the stored
    config repeats the grown file."""
    sets = ["task.n_tasks=2048", "time.t_min=1e-3", "time.n_times=16", "theory.level=leading",
            "solver.integrator=rk4", "output.checkpoint_every=0", "output.keep_checkpoint=true"]  # fmt: skip
    grown = tmp_path / "grown.h5"
    _simulate(grown, [*sets, "time.t_max=5e3"])
    res = _grow(grown, "time.t_max=1e4")
    assert res.exit_code == 0, res.output
    assert (
        "ending at t_max = 13981.95836685" in res.output and 'time.grid = "explicit"' in res.output
    )
    with h5py.File(grown, "r") as f:
        t, text = f["time"][()], f.attrs["config"]
    assert t.size == 1 + 17
    assert t[-1] == pytest.approx(5e3 * (5e6) ** (1 / 15), rel=1e-13)
    (tmp_path / "stored.toml").write_text(text)
    res = _run("simulate", str(tmp_path / "stored.toml"), "-o", str(tmp_path / "once.h5"))
    assert res.exit_code == 0, res.output
    assert_identical(grown, tmp_path / "once.h5")


def _one_line(res, needle: str) -> None:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert needle in lines[0] and "Traceback" not in res.output, res.output


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A complete attn-m file and a complete MSFR file, both with their resume state."""
    d = tmp_path_factory.mktemp("finished")
    _simulate(d / "t.h5", [*ATTN_M, *OPTIM["adam"], "schedule.epochs=50"])
    _simulate(d / "o.h5", [*MSFR, "solver.integrator=rk4", "time.t_max=1e3"])
    return d


@pytest.mark.parametrize(
    ("name", "sets", "needle"),
    [
        ("t.h5", ["optim.lr=0.02", "schedule.epochs=100"], "optim.lr (file 0.01, given 0.02)"),
        ("t.h5", ["seed=7", "schedule.epochs=100"], "seed (file 0, given 7)"),
        ("t.h5", ["schedule.save_every=20", "schedule.epochs=100"],
         "schedule.epochs, schedule.save_every: the config's output steps differ from the rows written at row 1 (step 10 in the file, 20 in the config)"),
        ("t.h5", ["schedule.epochs=20"], "schedule.epochs = 20 is below the file's 50; a run only grows"),
        ("o.h5", ["task.alpha=1.7", "time.t_max=1e4"], "task.alpha (file 2.0, given 1.7)"),
        ("o.h5", ["time.n_times=50"], "time.n_times: the config's output times differ from the rows written at row 2"),
        ("o.h5", ["time.t_max=1e2"], "time.t_max = 100.0 is below the file's 1000.0"),
    ],
)  # fmt: skip
def test_an_override_that_changes_a_written_row_is_refused(finished, name, sets, needle):
    p = finished / name
    before = p.read_bytes()
    _one_line(_grow(p, *sets), needle)
    assert p.read_bytes() == before  # refused before the file was touched


def test_a_complete_file_given_nothing_to_add_says_how_to_grow_it(finished):
    _one_line(
        _grow(finished / "o.h5"),
        "the run is complete; nothing to resume (to continue it, raise schedule.epochs or time.t_max",
    )


def test_a_plugin_run_grows_by_replay(tmp_path):
    """The example plug-in (logistic, default settings: no resume state kept) on 0.1 … 1e3 with
    40 log-spaced times, grown to 2e3: 43 times at the same ratio, ending at the next grid
    point 1e3·(1e4)^(3/39) ≈ 2030.9, equal to the run made on that grid at once."""
    sets = ["model=logistic", "task.n_tasks=1000", "time.n_times=40", "output.times_per_segment=3"]
    grown, once = tmp_path / "grown.h5", tmp_path / "once.h5"
    _simulate(grown, sets)
    assert not _kept(grown)
    res = _grow(grown, "time.t_max=2e3")
    assert res.exit_code == 0, res.output
    assert f"{grown}: {REPLAY} its integration to t = 1000" in res.output
    with h5py.File(grown, "r") as f:
        t_max = tomllib.loads(f.attrs["config"])["time"]["t_max"]
        assert f["time"].shape == (43,) and "checkpoint" not in f
    assert t_max == pytest.approx(1e3 * 1e4 ** (3 / 39), rel=1e-13)
    _simulate(once, [*sets, f"time.t_max={t_max!r}", "time.n_times=43"])
    assert_identical(grown, once)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A complete attn-m file and a complete MSFR file made with default settings (no resume
    state kept), and a copy of each to change."""
    d = tmp_path_factory.mktemp("plain")
    _simulate(d / "t.h5", [*_settings(ATTN_M, False), *OPTIM["adam"], "schedule.epochs=50"])
    _simulate(d / "o.h5", [*_settings(MSFR, False), "solver.integrator=rk4", "time.t_max=1e3"])
    return d


@pytest.mark.parametrize(
    ("name", "series", "row", "grow", "needle"),
    [
        ("t.h5", "loss/train", 3, "schedule.epochs=100", "loss/train differs at row 3 (time 0.6, step 30)"),
        ("o.h5", "tasks/f", 17, "time.t_max=1e4", "tasks/f[2] differs at row 17 (time 1.0)"),
    ],
)  # fmt: skip
def test_a_file_the_replay_does_not_repeat_is_refused_naming_the_row(
    plain, tmp_path, name, series, row, grow, needle
):
    """One value changed through h5py (which recomputes the chunk's Fletcher32 checksum, so the
    file reads as sound): the replay stops at that row, the file is left as it was."""
    p = tmp_path / name
    p.write_bytes((plain / name).read_bytes())
    with h5py.File(p, "r+") as f:
        ds = f[series]
        v = ds[row]
        if v.ndim:
            v[2] = np.nextafter(v[2], np.inf)  # one ulp
        else:
            v = np.nextafter(v, np.inf)
        ds[row] = v
    before = p.read_bytes()
    res = _grow(p, grow)
    lines = [ln for ln in res.output.splitlines() if "error" in ln]  # after the notes
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert needle in lines[0] and "in the file" in lines[0] and "Traceback" not in res.output
    assert "output.keep_checkpoint=true" in lines[0], lines[0]
    assert p.read_bytes() == before


def test_an_override_that_changes_a_written_row_of_a_plain_file_is_refused(plain):
    """Before any replay: the config check comes first."""
    p = plain / "t.h5"
    before = p.read_bytes()
    _one_line(_grow(p, "seed=7", "schedule.epochs=100"), "seed (file 0, given 7)")
    assert p.read_bytes() == before


@pytest.mark.parametrize(
    ("grid", "t_min", "t_max", "n", "t_new"),
    [("log", 1e-3, 1e10, 128, 1e12), ("log", 0.01, 1e3, 41, 1e4), ("log", 1e-3, 5e3, 16, 1e4),
     ("linear", 0.0, 10.0, 11, 15.5), ("linear", 0.1, 10.0, 7, 33.3)],
)  # fmt: skip
def test_continue_grid_keeps_the_spacing_and_ends_at_or_beyond_the_new_end(
    grid, t_min, t_max, n, t_new
):
    """Against the closed forms t_j = t_min·r^j (log) and t_min + jΔ (linear), rtol 1e-12 (a
    power of r in float64: ~j ulps); the new end is the first grid point at or beyond t_new; the
    written times are the first, bit for bit, in the plain grid where it is exact."""
    t_end, m, times, plain = continue_grid(grid, t_min, t_max, n, t_new)
    j = np.arange(m)
    if grid == "log":
        ref = t_min * (t_max / t_min) ** (j / (n - 1))
    else:
        ref = t_min + j * (t_max - t_min) / (n - 1)
    assert times.size == m and np.allclose(times, ref, rtol=1e-12, atol=0)
    assert times[-1] >= t_new * (1 - 1e-12) > times[-2]
    old = make_times(grid, t_min, t_max, n)
    assert np.array_equal(times[:n], old)
    if plain:
        assert np.array_equal(make_times(grid, t_min, t_end, m)[:n], old)


def test_a_stop_during_the_replay_leaves_the_file_as_it_was(plain, tmp_path, sigterm_after):
    """SIGTERM after the second replayed row: exit 143, nothing written, one line saying so."""
    from fastdyn.drive.replay import ReplayWriter

    p = tmp_path / "t.h5"
    p.write_bytes((plain / "t.h5").read_bytes())
    sigterm_after(2, ReplayWriter)
    res = _grow(p, "schedule.epochs=100")
    assert res.exit_code == 143, res.output
    assert "during the replay; the file is as it was (complete)" in res.output, res.output
    assert p.read_bytes() == (plain / "t.h5").read_bytes()


def test_a_stop_after_the_replay_leaves_a_file_that_resumes(plain, tmp_path, sigterm_after):
    """SIGTERM after the second row written past the replay (50 → 100 epochs, rows at steps 60
    and 70): the file holds the replayed state as its checkpoint, and a plain --resume finishes
    it equal to the run made to 100 epochs at once."""
    p, once = tmp_path / "t.h5", tmp_path / "once.h5"
    p.write_bytes((plain / "t.h5").read_bytes())
    sigterm_after(2)
    res = _grow(p, "schedule.epochs=100")
    assert res.exit_code == 143, res.output
    with h5py.File(p, "r") as f:
        assert f.attrs["status"].startswith("interrupted") and f["step"][-1] == 70
    res = _grow(p)
    assert res.exit_code == 0, res.output
    _simulate(once, [*_settings(ATTN_M, False), *OPTIM["adam"], "schedule.epochs=100"])
    assert_identical(p, once)
