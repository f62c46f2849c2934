"""MSFR's ``fastdyn theory`` command: ``exponents``, the scaling laws of spec msfr.md §6 and the
local exponents of a task table or family (registered through the entry's ``commands``)."""

from __future__ import annotations

import json

import click

from ...config.schema import ConfigError

__all__ = ["exponents_cmd"]

_ROWS = (
    ("time", "time t", "t", "eta/kappa_t"),
    ("model_size", "model size D", "D", "eta"),
    ("data", "data N (t -> inf)", "N", "eta/alpha"),
    ("compute", "compute C = tD", "C", "eta/(kappa_t+1)"),
)


def _crossover_line(gamma: float, strength0: float | None) -> str:
    """Where Λ_s = Λ0 s^-gamma crosses 1, and which side the tasks s >= 1 lie on."""
    from .scaling import LARGE_AT, crossover

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


@click.command("exponents")
@click.option(
    "--alpha",
    type=float,
    default=None,
    help="Zipf exponent α (P(s) ∝ s^-α); or give --config/--set for local exponents.",
)
@click.option("--beta", type=float, default=0.0, show_default=True, help="Context exponent β.")
@click.option("--gamma", type=float, default=0.0, show_default=True, help="Strength exponent γ.")
@click.option("--strength0", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Λ0 (Λ_s = Λ0 s^-γ): states the crossover s× and the regime of s ≥ 1.")  # fmt: skip
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="An MSFR config (a task table, a named family or power laws): local exponents from its P, Λ, ψ.")  # fmt: skip
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config value (implies local exponents).")  # fmt: skip
@click.option(
    "--window",
    default=None,
    metavar="S_LO:S_HI",
    help="Tasks whose local slopes are fitted (with --config/--set).",
)
@click.option("--time", "at_time", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Fit over the decade of tasks around the learned-task cutoff s_c(t) (with --config/--set).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def exponents_cmd(
    alpha: float | None, beta: float, gamma: float, strength0: float | None, config_path: str | None,
    sets: tuple, window: str | None, at_time: float | None, as_json: bool,
) -> None:  # fmt: skip
    """MSFR scaling laws (Lyu, Wang, Zhu, ICLR 2025; docs/theory.md): L ∝ x^-p for x = t, D, N, C, and D*(C), in the
    regimes Λ_s ≪ 1 (kappa_t = α+β+γ) and Λ_s ≫ 1 (kappa_t = α+β+3γ), and their crossover. With --config/--set
    (a task table or named family): local exponents from the fitted slopes of P, Λ, ψ, the tail loss and the
    emergence times over a window of tasks (--window, or around s_c(--time)), the regime stated."""
    from .scaling import crossover, regime_exponents

    if config_path is not None or sets:
        if alpha is not None:
            raise ConfigError(
                "--alpha: give either --alpha (power laws) or --config/--set (local exponents), not both"
            )
        _local(config_path, sets, window, at_time, as_json)
        return
    if window is not None or at_time is not None:
        raise ConfigError(
            "--window/--time: need --config or --set (local exponents of a table or family)"
        )
    if alpha is None:
        raise ConfigError(
            "--alpha: missing; give --alpha (power laws) or --config/--set (a table or family: local exponents)"
        )
    try:
        both = regime_exponents(alpha, beta, gamma)
    except ValueError as e:
        raise ConfigError(str(e)) from None
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


def _local(config_path, sets, window, at_time, as_json) -> None:
    """``theory exponents --config/--set``: :func:`fastdyn.models.msfr.local_laws.local_laws`."""
    import math

    from ...config import load_config
    from ...config.presets import resolve
    from .local_laws import CURVED, local_laws, tail_and_cutoff
    from .problem import MsfrProblem

    cfg = load_config(resolve(config_path) if config_path else None, list(sets))
    task = getattr(cfg, "task", None)
    if task is None or not hasattr(task, "strength_law"):
        raise ConfigError(
            f"--config: local exponents need an MSFR config (model msfr or msfr-attn), got model {cfg.model!r}"
        )
    if getattr(cfg.init, "scheme", "balanced") != "balanced":
        click.echo(
            "note: emergence times assume balanced small init; init.scheme is random", err=True
        )
    prob = MsfrProblem(task, cfg.init, cfg.seed)
    n = prob.n_tasks
    blk, s_c = tail_and_cutoff(prob, float(cfg.init.scale), at_time)
    if window is not None and at_time is not None:
        raise ConfigError("--window: give --window or --time, not both")
    if window is not None:
        try:
            lo, hi = (int(float(v)) for v in window.split(":"))
        except ValueError:
            raise ConfigError(
                f"--window: must be S_LO:S_HI (task indices), got {window!r}"
            ) from None
    elif at_time is not None:
        c = max(s_c, 1)
        lo, hi = max(1, int(c / math.sqrt(10))), min(n, max(int(c * math.sqrt(10)), 2))
    else:
        lo, hi = min(10, n - 1), max(min(10, n - 1) + 1, n // 10)
    if not 1 <= lo < hi <= n:
        raise ConfigError(f"--window: needs 1 ≤ S_LO < S_HI ≤ n_tasks = {n}, got {lo}:{hi}")
    try:
        ll = local_laws(prob, lo, hi, float(cfg.init.scale), blk=blk)
    except ValueError as e:
        raise ConfigError(f"--window: {e}") from None
    from .task_families import describe

    what = f"task.table {task.table}" if task.table is not None else describe(task)
    if as_json:
        out = ll.to_dict()
        out.update(source=what, n_tasks=n, s_c=s_c if at_time is not None else None, t=at_time)
        click.echo(json.dumps(out, indent=2))
        return
    names = {
        "small": "Λ_s ≪ 1",
        "large": "Λ_s ≫ 1",
        "mixed": "mixed (Λ_s spans the regimes: neither all ≤ 1/2 nor all ≥ 2)",
    }
    head = f"{what}, N_s = {n}: local slopes over tasks s = {ll.s_lo} … {ll.s_hi}"
    if at_time is not None:
        head += f" (the decade around s_c(t = {at_time:g}) = {s_c})"
    click.echo(head)
    em = ll.emerging
    if em.n != em.s_hi - em.s_lo + 1:  # the slopes are fitted over the tasks that emerge
        click.echo(f"  emerging: {em.text}; every slope below is fitted over the tasks that emerge")
    click.echo(f"  P(s): alpha_w = {ll.alpha_w:.4g}   Λ_s: gamma_w = {ll.gamma_w:.4g} (Λ_s {ll.lam_lo:.3g} … {ll.lam_hi:.3g})"
               f"   ψ_s: beta_w = {ll.beta_w:.4g}")  # fmt: skip
    click.echo(
        f"  tail T(s) = Σ_(s'>s) P Λ²/2: eta_w = {ll.eta_w:.4g};  emergence t_s: kappa_w = {ll.kappa_w:.4g}"
    )
    constant = ll.lam_hi <= ll.lam_lo * (1 + 1e-12)  # Λ_s the same for every task: no regime
    if constant:
        click.echo(
            f"  regime: none (Λ_s = {ll.lam_lo:.4g} for every task: both regimes give the same laws)"
        )
    else:
        click.echo(f"  regime: {names[ll.regime]}")
    click.echo(f"{'resource':<20s} {'local law':<28s} {'exponent'}")
    for key, name, sym, _ in _ROWS:
        expr = {
            "time": "eta_w/kappa_w",
            "model_size": "eta_w",
            "data": "eta_w/alpha_w",
            "compute": "eta_w/(kappa_w+1)",
        }[key]
        click.echo(f"{name:<20s} {'L ∝ ' + sym + '^-(' + expr + ')':<28s} {-getattr(ll, key):.6f}")
    (e0, e1), (k0, k1), (p0, p1) = ll.halves["eta_w"], ll.halves["kappa_w"], ll.halves["time"]
    if ll.power_law:
        click.echo(f"power law over the window: the slopes of its halves agree within 10 % "
                   f"(eta_w {e0:.4g} / {e1:.4g}, kappa_w {k0:.4g} / {k1:.4g})")  # fmt: skip
    elif abs(p0 - p1) <= CURVED * max(abs(p0), abs(p1)):
        # eta_w and kappa_w steepen together (an exponential family): t keeps one law, D does not
        click.echo(f"no single power law in model size over the window: eta_w {e0:.4g} → {e1:.4g} and "
                   f"kappa_w {k0:.4g} → {k1:.4g} from its lower to its upper half, so the exponents of D and C are the "
                   f"window's tangent only; the time law holds over the whole window (exponent {p0:.4g} and "
                   f"{p1:.4g}): the tail and the emergence times steepen together")  # fmt: skip
    else:
        click.echo(f"no single power law over the window: the local slope changes (eta_w {e0:.4g} → {e1:.4g}, "
                   f"kappa_w {k0:.4g} → {k1:.4g}, time exponent {p0:.4g} → {p1:.4g} from its lower to its upper half); "
                   f"the exponents above are the window's tangent only")  # fmt: skip
    click.echo(f"prediction over the window: L falls from {ll.loss_lo:.4g} to {ll.loss_hi:.4g} as t goes from "
               f"{ll.t_lo:.4g} to {ll.t_hi:.4g} ({'tasks ' + str(ll.s_lo) + ' … ' + str(ll.s_hi) if em.n == ll.s_hi - ll.s_lo + 1 else str(em.n) + ' tasks'} emerge), slope -{ll.time:.4g}")  # fmt: skip
    if ll.regime_law is not None:
        r = ll.regime_law
        click.echo(f"power-law formula at the local exponents ({'Λ_s constant' if constant else (names[r['regime']] if ll.regime != 'mixed' else 'mixed; nearest ' + names[r['regime']].split(' (')[0])}): time {-r['time']:.4g} = "
                   f"-{r['eta']:.4g}/{r['kappa_t']:.4g}, model size {-r['model_size']:.4g}, data {-r['data']:.4g} "
                   f"(eta = alpha_w + 2 gamma_w - 1; assumes the slopes hold beyond the window"
                   f"{'' if ll.power_law else ', which they do not here: not this window’s law'})")  # fmt: skip
    else:
        click.echo(f"power-law formula at the local exponents: none ({ll.regime_law_error})")
