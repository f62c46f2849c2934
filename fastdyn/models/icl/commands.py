"""The ICL models' ``fastdyn theory`` commands (spec icl.md §4): ``plateaus``, the ATTN_S plateau
losses and the ATTN_M minimum, and ``fixed-points`` of the population loss (registered through
the entries' ``commands``)."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from ...config.schema import ConfigError

__all__ = ["fixed_points_cmd", "plateau_table", "plateaus_cmd"]

SPECTRA = ("linear", "white", "power")


def plateau_table(
    dim: int, context: float, spectrum: str = "linear", exponent: float = 1.0
) -> dict[str, Any]:
    """ATTN_S plateau losses L(M_m), m = 0..D, and the ATTN_M global minimum L* (spec icl.md §4).

    Spectrum conventions of icl.md §1 (linear: ∝ 1..D with tr Λ = 1; white: I/D). Calls the model
    theory (:mod:`fastdyn.models.icl.attn_s.theory`), which owns the formula.
    """
    import numpy as np

    from .attn_s.theory import loss_star, plateau_losses
    from .problem import spectrum_eigenvalues

    if int(dim) != dim or dim < 1:
        raise ValueError(f"--dim: must be a positive integer, got {dim!r}")
    if not (math.isfinite(context) and context > 0):
        raise ValueError(f"--context: must be a finite number > 0, got {context!r}")
    lam = spectrum_eigenvalues(int(dim), spectrum, exponent)
    return {
        "dim": int(dim),
        "context": float(context),
        "spectrum": spectrum,
        "eigenvalues": lam.tolist(),
        "plateaus": np.asarray(plateau_losses(lam, context)).tolist(),
        "loss_star": float(loss_star(lam, context)),
    }


@click.command("plateaus")
@click.option("--dim", "dim", type=click.IntRange(min=1), required=True, help="Token dimension D.")
@click.option("--context", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Context length N (tokens before the query).")  # fmt: skip
@click.option("--spectrum", type=click.Choice(SPECTRA), default="linear", show_default=True,
              help="linear: λ ∝ 1..D, tr Λ = 1; white: Λ = I/D; power: λ_d ∝ d^-exponent.")  # fmt: skip
@click.option(
    "--exponent", type=float, default=1.0, show_default=True, help="For --spectrum power."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plateaus_cmd(dim: int, context: float, spectrum: str, exponent: float, as_json: bool) -> None:
    """ATTN_S plateau losses L(M_m), m = 0..D, and the ATTN_M minimum L* (Zhang et al., ICML 2025)."""
    try:
        tab = plateau_table(dim, context, spectrum, exponent)
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    if as_json:
        click.echo(json.dumps(tab, indent=2))
        return
    lam = ", ".join(f"{v:.5g}" for v in tab["eigenvalues"])
    click.echo(f"D = {dim}, N = {context:g}, spectrum {spectrum}: eigenvalues {lam}")
    click.echo(f"{'m':>4s}  {'L(M_m)':>10s}")
    for m, L in enumerate(tab["plateaus"]):
        click.echo(f"{m:>4d}  {L:>10.5f}")
    click.echo(f"L* (ATTN_M global minimum) = {tab['loss_star']:.5f}")


@click.command("fixed-points")
@click.option("--model", "model", type=click.Choice(("attn-m", "attn-s")), required=True,
              help="attn-m (merged key-query) or attn-s (separate rank-one key and query).")  # fmt: skip
@click.option("--dim", "dim", type=click.IntRange(min=1, max=10), required=True,
              help="Token dimension D (2^D subsets are listed; at most 10).")  # fmt: skip
@click.option("--context", type=click.IntRange(min=1), default=31, show_default=True,
              help="Context length N (tokens before the query).")  # fmt: skip
@click.option("--spectrum", type=click.Choice(SPECTRA), default="linear", show_default=True,
              help="linear: λ ∝ 1..D, tr Λ = 1; white: Λ = I/D; power: λ_d ∝ d^-exponent.")  # fmt: skip
@click.option(
    "--exponent", type=float, default=1.0, show_default=True, help="For --spectrum power."
)
@click.option("--heads", type=click.IntRange(min=1), default=None,
              help="Heads H [default: D]; attn-s needs H ≥ D.")  # fmt: skip
@click.option("--rotate", type=click.IntRange(min=0), default=None, metavar="SEED",
              help="Rotate the eigenvectors of Λ by the data rotation of SEED [default: none].")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def fixed_points_cmd(
    model: str, dim: int, context: int, spectrum: str, exponent: float, heads: int | None,
    rotate: int | None, as_json: bool,
) -> None:  # fmt: skip
    """Fixed points of the population loss, built as weights: Γ(S) for every subset S of
    eigen-directions, its loss and the norm of the model's own population gradient there.
    attn-s: all 2^D are fixed points M(S); attn-m: only S = ∅ (the saddle M_0) and S = all
    (the global minimum Γ*), since its loss is convex in Γ and one head realises any Γ
    (docstring of fastdyn.models.icl.fixed_points)."""
    import numpy as np

    from .fixed_points import FIXED_TOL, fixed_points
    from .problem import rotation, spectrum_eigenvalues

    if model == "attn-s" and heads is not None and heads < dim:
        raise ConfigError(
            f"--heads: attn-s needs H ≥ D = {dim} (one head per direction), got {heads}"
        )
    try:
        lam = spectrum_eigenvalues(dim, spectrum, exponent)
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    vecs = np.eye(dim) if rotate is None else rotation(dim, rotate)
    fps = fixed_points(model, lam, vecs, context, heads)
    n_fixed = sum(f.is_fixed for f in fps)
    if as_json:
        out = {
            "model": model, "dim": dim, "context": context, "spectrum": spectrum,
            "eigenvalues": np.sort(lam)[::-1].tolist(), "heads": dim if heads is None else heads,
            "tolerance": FIXED_TOL, "n_subsets": len(fps), "n_fixed": n_fixed,
            "points": [{"subset": [d + 1 for d in f.subset], "m": len(f.subset), "loss": f.loss,
                        "grad_norm": f.grad_norm, "fixed": f.is_fixed} for f in fps],
        }  # fmt: skip
        click.echo(json.dumps(out, indent=2))
        return
    ev = ", ".join(f"{v:.5g}" for v in np.sort(lam)[::-1])
    click.echo(f"{model}, D = {dim}, N = {context}, spectrum {spectrum}: eigenvalues {ev}")
    click.echo(f"{'S (eigen-directions, 1 = largest λ)':<36s} {'|S|':>3s} {'L(M(S))':>10s} "
               f"{'|grad L|':>10s}  fixed point")  # fmt: skip
    for f in fps:
        s = "{" + ",".join(str(d + 1) for d in f.subset) + "}"
        click.echo(f"{s:<36s} {len(f.subset):>3d} {f.loss:>10.5f} {f.grad_norm:>10.2e}  "
                   f"{'yes' if f.is_fixed else 'no'}")  # fmt: skip
    click.echo(f"{n_fixed} of {len(fps)} subsets are fixed points (|grad L| ≤ {FIXED_TOL:g})")
