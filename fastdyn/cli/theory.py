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


def _crossover_line(gamma: float, strength0: float | None) -> str:
    """Where Λ_s = Λ0 s^-gamma crosses 1, and which side the tasks s >= 1 lie on."""
    from ..models.msfr.scaling import LARGE_AT, crossover

    if gamma == 0:
        return ("crossover: none (gamma = 0): Λ_s = Λ0 for every task, 1 + Λ_s² is the same for "
                "all, and both regimes give the same laws")  # fmt: skip
    lo, hi = ("small", "large") if gamma < 0 else ("large", "small")
    names = {"small": "Λ_s ≪ 1", "large": "Λ_s ≫ 1"}
    head = (f"crossover: Λ_s = 1 at s× = Λ0^(1/gamma) = Λ0^{1 / gamma:.4g}; "
            f"{names[lo]} for s ≪ s×, {names[hi]} for s ≫ s×")  # fmt: skip
    if strength0 is None:
        return head + " (give --strength0 for s×)"
    sx = crossover(strength0, gamma)
    lam1 = strength0  # Λ_1
    if sx is not None and sx <= 1 / LARGE_AT ** (1 / abs(gamma)):
        where = f"every task s ≥ 1 has {names[hi]} (Λ_1 = {lam1:g})"
    else:
        where = f"tasks s ≪ {sx:.4g} have {names[lo]}, s ≫ {sx:.4g} {names[hi]}"
    return f"{head}; Λ0 = {strength0:g}: s× = {sx:.4g}, {where}"


@command.command("exponents")
@click.option("--alpha", type=float, required=True, help="Zipf exponent α (P(s) ∝ s^-α).")
@click.option("--beta", type=float, default=0.0, show_default=True, help="Context exponent β.")
@click.option("--gamma", type=float, default=0.0, show_default=True, help="Strength exponent γ.")
@click.option("--strength0", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Λ0 (Λ_s = Λ0 s^-γ): states the crossover s× and the regime of s ≥ 1.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guarded
def exponents_cmd(
    alpha: float, beta: float, gamma: float, strength0: float | None, as_json: bool
) -> None:
    """MSFR scaling laws (Lyu, Wang, Zhu, ICLR 2025; docs/theory.md): L ∝ x^-p for x = t, D, N, C, and D*(C), in the
    regimes Λ_s ≪ 1 (kappa_t = α+β+γ) and Λ_s ≫ 1 (kappa_t = α+β+3γ), and their crossover."""
    from ..models.msfr.scaling import crossover, regime_exponents

    try:
        both = regime_exponents(alpha, beta, gamma)
    except ValueError as e:
        raise UserError(str(e)) from None
    ex = both["small"]
    eta = ex.eta

    def num(e) -> dict[str, str]:
        kt = e.kappa_t
        return {"time": f"{eta:g}/{kt:g}", "model_size": f"{eta:g}", "data": f"{eta:g}/{alpha:g}",
                "compute": f"{eta:g}/{kt + 1:g}", "d_star": f"1/{kt + 1:g}"}  # fmt: skip

    def laws(e) -> dict[str, dict]:
        n = num(e)
        out = {key: {"exponent": getattr(e, key), "power": -getattr(e, key), "expr": expr,
                     "value_expr": f"-{n[key]}"} for key, _, _, expr in _ROWS}  # fmt: skip
        out["d_star"] = {"exponent": e.d_star, "power": e.d_star, "expr": "1/(kappa_t+1)",
                         "value_expr": n["d_star"]}  # fmt: skip
        return out

    big = both["large"]
    if as_json:
        out = ex.to_dict()
        out["laws"] = laws(ex)
        out["regimes"] = {
            "small": {
                "condition": "Λ_s ≪ 1",
                "kappa_t_expr": "alpha+beta+gamma",
                "kappa_t": ex.kappa_t,
                "laws": laws(ex),
            },  # fmt: skip
            "large": {
                "condition": "Λ_s ≫ 1",
                "kappa_t_expr": "alpha+beta+3*gamma",
                "kappa_t": alpha + beta + 3 * gamma,
                "laws": laws(big) if not isinstance(big, str) else None,
                "error": big if isinstance(big, str) else None,
            },  # fmt: skip
        }
        sx = None if strength0 is None else crossover(strength0, gamma)
        out["crossover"] = {"expr": "strength0^(1/gamma)", "strength0": strength0, "s_x": sx,
                            "text": _crossover_line(gamma, strength0)}  # fmt: skip
        click.echo(json.dumps(out, indent=2))
        return
    kb = alpha + beta + 3 * gamma
    click.echo(f"alpha = {alpha:g}, beta = {beta:g}, gamma = {gamma:g}:  "
               f"eta = alpha + 2 gamma - 1 = {eta:g};  kappa_t = alpha + beta + gamma = "
               f"{ex.kappa_t:g} (Λ_s ≪ 1), alpha + beta + 3 gamma = {kb:g} (Λ_s ≫ 1)")  # fmt: skip
    click.echo(f"{'resource':<20s} {'law':<28s} {'Λ_s ≪ 1':<24s} {'Λ_s ≫ 1'}")
    ns = num(ex)
    nb = None if isinstance(big, str) else num(big)
    rows = [(k, name, f"L ∝ {sym}^-({expr})", -1) for k, name, sym, expr in _ROWS]
    rows.append(("d_star", "optimal size D*(C)", "D* ∝ C^(1/(kappa_t+1))", 1))
    for key, name, law, sign in rows:
        cell = f"{sign * getattr(ex, key):.6f} = {'-' if sign < 0 else ''}{ns[key]}"
        if nb is None:
            cb = "n/a (kappa_t <= 0)" if key in ("time", "compute", "d_star") else cell
        else:
            cb = f"{sign * getattr(big, key):.6f} = {'-' if sign < 0 else ''}{nb[key]}"
        click.echo(f"{name:<20s} {law:<28s} {cell:<24s} {cb:<24s}".rstrip())
    click.echo(_crossover_line(gamma, strength0))


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
