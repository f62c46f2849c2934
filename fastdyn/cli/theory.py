"""``fastdyn theory exponents|plateaus``: tables of theory predictions (no files involved)."""

from __future__ import annotations

import json

import click

from ._common import UserError, guarded

SPECTRA = ("linear", "white", "power")

_ROWS = (
    ("time", "time t", "t", "eta/kappa_t"),
    ("model_size", "model size D", "D", "eta"),
    ("data", "data N (t -> inf)", "N", "eta/alpha"),
    ("compute", "compute C = tD", "C", "eta/(kappa_t+1)"),
)


@click.group("theory")
def command() -> None:
    """Theory predictions: MSFR scaling exponents, ATTN plateau losses."""


@command.command("exponents")
@click.option("--alpha", type=float, required=True, help="Zipf exponent α (P(s) ∝ s^-α).")
@click.option("--beta", type=float, default=0.0, show_default=True, help="Context exponent β.")
@click.option("--gamma", type=float, default=0.0, show_default=True, help="Strength exponent γ.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guarded
def exponents_cmd(alpha: float, beta: float, gamma: float, as_json: bool) -> None:
    """MSFR scaling laws (Lyu, Wang, Zhu, ICLR 2025): L ∝ x^-p for x = t, D, N, C, and D*(C)."""
    from ..models.msfr.scaling import exponents

    try:
        ex = exponents(alpha, beta, gamma)
    except ValueError as e:
        raise UserError(str(e)) from None
    eta, kt = ex.eta, ex.kappa_t
    num = {
        "time": f"{eta:g}/{kt:g}",
        "model_size": f"{eta:g}",
        "data": f"{eta:g}/{alpha:g}",
        "compute": f"{eta:g}/{kt + 1:g}",
    }
    if as_json:
        out = ex.to_dict()
        out["laws"] = {
            key: {
                "exponent": getattr(ex, key),
                "power": -getattr(ex, key),
                "expr": expr,
                "value_expr": f"-{num[key]}",
            }  # fmt: skip
            for key, _, _, expr in _ROWS
        }
        out["laws"]["d_star"] = {"exponent": ex.d_star, "power": ex.d_star,
                                 "expr": "1/(kappa_t+1)", "value_expr": f"1/{kt + 1:g}"}  # fmt: skip
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"alpha = {alpha:g}, beta = {beta:g}, gamma = {gamma:g}:  "
               f"eta = alpha + 2 gamma - 1 = {eta:g},  kappa_t = alpha + beta + gamma = {kt:g}")  # fmt: skip
    click.echo(f"{'resource':<20s} {'law':<28s} {'power':>10s}")
    for key, name, sym, expr in _ROWS:
        p = getattr(ex, key)
        click.echo(f"{name:<20s} {f'L ∝ {sym}^-({expr})':<28s} {-p:>10.6f}   = -{num[key]}")
    click.echo(
        f"{'optimal size D*(C)':<20s} {'D* ∝ C^(1/(kappa_t+1))':<28s} {ex.d_star:>10.6f}   = 1/{kt + 1:g}"
    )


@command.command("plateaus")
@click.option("--dim", "dim", type=click.IntRange(min=1), required=True, help="Token dimension D.")
@click.option("--context", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Context length N (tokens before the query).")  # fmt: skip
@click.option("--spectrum", type=click.Choice(SPECTRA), default="linear", show_default=True,
              help="linear: λ ∝ 1..D, tr Λ = 1; white: Λ = I/D; power: λ_d ∝ d^-exponent.")  # fmt: skip
@click.option(
    "--exponent", type=float, default=1.0, show_default=True, help="For --spectrum power."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guarded
def plateaus_cmd(dim: int, context: float, spectrum: str, exponent: float, as_json: bool) -> None:
    """ATTN_S plateau losses L(M_m), m = 0..D, and the ATTN_M minimum L* (Zhang et al., ICML 2025)."""
    from ..analysis.compare import plateau_table

    try:
        tab = plateau_table(dim, context, spectrum, exponent)
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    if as_json:
        click.echo(json.dumps(tab, indent=2))
        return
    lam = ", ".join(f"{v:.5g}" for v in tab["eigenvalues"])
    click.echo(f"D = {dim}, N = {context:g}, spectrum {spectrum}: eigenvalues {lam}")
    click.echo(f"{'m':>4s}  {'L(M_m)':>10s}")
    for m, L in enumerate(tab["plateaus"]):
        click.echo(f"{m:>4d}  {L:>10.5f}")
    click.echo(f"L* (ATTN_M global minimum) = {tab['loss_star']:.5f}")
