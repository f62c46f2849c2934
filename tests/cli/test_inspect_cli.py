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
