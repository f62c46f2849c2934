"""``fastdyn inspect``: how it words what a file holds."""


def test_timings_are_explained():
    """``inspect`` says what each timing measures (total > wall: set-up comes before the file)."""
    from fastdyn.cli.inspect import _timings

    got = _timings('{"kernels": 5.2414, "total": 6.091, "wall": 5.8634, "resumed_at": 0}')
    assert got == (
        "kernels 5.24 s (inside the compiled kernels); total 6.09 s (the whole run, set-up and "
        "compilation included); wall 5.86 s (from opening the file to closing it); this session "
        "resumed the run at 1970-01-01 00:00:00 UTC"
    )
    assert _timings("not json") == "not json"


def test_checkpoint_size_is_stated(tmp_path):
    """A file that keeps its resume state says how big it is (a killed 10^6-task MSFR file is
    ≈ 130 MB of it) and when it goes away."""
    import re

    from click.testing import CliRunner

    from fastdyn.cli import main

    p = tmp_path / "k.h5"
    sets = [
        "task.n_tasks=20000",
        "time.n_times=8",
        "output.keep_checkpoint=true",
        "output.track=[]",
    ]
    res = CliRunner().invoke(
        main, ["-q", "simulate", "quickstart", *(f"--set={s}" for s in sets), "-o", str(p)]
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["inspect", str(p)])
    line = next(ln for ln in res.output.splitlines() if ln.startswith("checkpoint:"))
    m = re.fullmatch(r"checkpoint: #\d+, after row \d+; ([\d.]+) (kB|MB) \(the state --resume "
                     r"restarts from; dropped when the run completes unless output.keep_checkpoint\)", line)  # fmt: skip
    assert m, line
    size = float(m[1]) * (1e3 if m[2] == "kB" else 1e6)
    # two slots of the per-task state (≥ 2 float64 per task each) fit inside the file
    assert 2 * 2 * 8 * 20000 <= size <= p.stat().st_size, (size, p.stat().st_size)


def test_a_theory_for_other_tokens_is_marked(tmp_path):
    """msfr-attn on Gaussian tokens writes the Rademacher closed form beside it: the file says so
    (root ``note``, shown by inspect); a Rademacher run has no note."""
    import h5py
    from click.testing import CliRunner

    from fastdyn.cli import main

    notes = {}
    for dist in ("gaussian", "rademacher"):
        p = tmp_path / f"{dist}.h5"
        sets = [f"task.x_dist={dist}", "schedule.epochs=4", "schedule.n_saves=2"]
        res = CliRunner().invoke(
            main, ["-q", "simulate", "msfr_attn_quick", *(f"--set={s}" for s in sets), "-o", str(p)]
        )
        assert res.exit_code == 0, res.output
        with h5py.File(p, "r") as f:
            assert "theory/loss/test" in f
            notes[dist] = f.attrs.get("note")
        shown = CliRunner().invoke(main, ["inspect", str(p)]).output
        assert ("note:     theory/* curves are the closed form for Rademacher tokens" in shown) == (
            dist == "gaussian"
        )
    assert "tokens are gaussian" in notes["gaussian"] and notes["rademacher"] is None
