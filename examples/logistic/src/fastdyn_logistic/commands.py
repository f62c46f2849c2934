"""``fastdyn theory learning-times``: when each task is half learned (:func:`.laws.learning_time`).

A click command, found through the ``fastdyn.theory`` entry point. It imports only click and the
standard library, so ``fastdyn theory --help`` stays fast; a ValueError it raises is shown as one
line with exit 2.
"""

from __future__ import annotations

import click

from .laws import learning_time


@click.command("learning-times")
@click.option("--r0", type=float, default=1.0, show_default=True, help="Rate of task 1 (1/time).")
@click.option(
    "--a", type=float, default=1.0, show_default=True, help="Rate exponent: r_s = r0 s^-a."
)
@click.option(
    "--f0", type=float, default=1e-3, show_default=True, help="f(0) of every task, 0 < f0 < 1."
)
@click.option(
    "--tasks",
    default="1,10,100,1000",
    show_default=True,
    help="Comma-separated task indices s ≥ 1.",
)
def learning_times(r0: float, a: float, f0: float, tasks: str) -> None:  # fmt: skip
    """Logistic example: t_s = ln((1 − f0)/f0) s^a / r0, when task s reaches half its target."""
    if not 0 < f0 < 1:
        raise ValueError(f"--f0: must lie in (0, 1), got {f0:g}")
    if not r0 > 0:
        raise ValueError(f"--r0: must be > 0, got {r0:g}")
    try:
        idx = [int(v) for v in tasks.split(",")]
    except ValueError:
        raise ValueError(f"--tasks: must be comma-separated integers, got {tasks!r}") from None
    if min(idx) < 1:
        raise ValueError(f"--tasks: indices start at 1, got {min(idx)}")
    click.echo(f"{'s':>8s}  {'t_s':>12s}")
    for s in idx:
        click.echo(f"{s:>8d}  {learning_time(s, r0, a, f0):>12.6g}")
