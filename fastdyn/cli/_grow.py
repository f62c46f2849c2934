"""``fastdyn simulate --resume FILE --set schedule.epochs=…`` / ``--set time.t_max=…``: a run grows.

A resumed config may differ from the file's in the keys of its step or time grid (:func:`grid_key`):
more optimiser steps (``schedule.epochs``) or a later end of the output grid (``time.t_max``).
Every row already written must then be the new config's first rows, bit for bit: the driver
compares the written ``/time`` and ``/step`` with the new grid before it reopens the file
(:func:`fastdyn.drive.lifecycle.check_written`), and the file takes the new config.

A new ``time.t_max`` alone continues the grid at its own spacing (:func:`extend_time`): a log grid
keeps the ratio between consecutive times, a linear grid its step, and the new end is the first
grid point at or beyond the value given (said in one line when it is not the value given).

A complete file keeps its resume state only with ``output.keep_checkpoint = true``; one without
it grows by a replay (:mod:`fastdyn.drive.replay`: the run from its start, every row checked
against the file's), said in one line (:func:`fastdyn.drive.replay.note`).
"""

from __future__ import annotations

from typing import Any

from ._common import UserError

#: the sections whose keys make the step or output-time grid of a run
GRID_SECTIONS = ("schedule.", "time.")


def grid_key(key: str) -> bool:
    """Whether a dotted config key belongs to the step or time grid (may grow a run)."""
    return key.startswith(GRID_SECTIONS)


def check_growing(file: Any, old: dict[str, Any], new: dict[str, Any], keys: list[str]) -> None:
    """UserError (one line) for a grid key that would shrink the run."""
    for key in ("schedule.epochs", "time.t_max"):
        if key in keys and isinstance(new.get(key), int | float) and new[key] < old.get(key, 0):
            raise UserError(
                f"--resume {file}: {key} = {new[key]!r} is below the file's {old[key]!r}; a run only grows (start a new file with -o for a shorter one)"
            )


def extend_time(file: Any, old: dict[str, Any], cfg: dict[str, Any]) -> str | None:
    """With only ``time.t_max`` raised on a log or linear grid: set ``cfg['time']`` (the nested
    config dict, in place) to the file's grid continued at its own spacing up to the first point
    at or beyond the given t_max; returns the note saying what it became (None when nothing was
    continued). When floating point keeps ``t_min, t_max', n'`` from repeating the written times
    bit for bit the grid is stored as its explicit times (``time.grid = "explicit"``), where the
    model's [time] section has them; otherwise UserError."""
    from ..core.saveat import continue_grid

    t = cfg.get("time", {})
    grid = t.get("grid", "log")
    t_new = t.get("t_max")
    if grid not in ("log", "linear") or t_new == old.get("time.t_max"):
        return None
    if t.get("n_times") != old.get("time.n_times") or t_new is None:
        return None  # both given: the driver checks that the written rows are kept
    try:
        t_max, n, times, plain = continue_grid(
            grid, float(old["time.t_min"]), float(old["time.t_max"]), int(old["time.n_times"]),
            float(t_new),
        )  # fmt: skip
    except ValueError as e:
        raise UserError(f"--resume {file}: {e}") from None
    how = "ratio" if grid == "log" else "step"
    note = f"{file}: time.t_max = {t_new:g} continues the {grid} grid at its own {how}"
    note += (
        f" to n_times = {n}, ending at t_max = {t_max!r} (the first grid point at or beyond it)"
        if t_max != t_new
        else f" to n_times = {n}"
    )
    t["t_max"], t["n_times"] = t_max, n
    if not plain:
        if "times" not in t:
            raise UserError(
                f"--resume {file}: time.t_max = {t_new:g}: no t_max near {t_max!r} with n_times = {n} repeats the file's output times bit for bit (floating point), and this model takes no explicit time.times; start a new file with -o"
            )
        t["grid"], t["times"] = "explicit", [float(x) for x in times]
        note += '; stored as explicit times (time.grid = "explicit"), the only way a run of the stored config repeats the written times bit for bit'
    return note
