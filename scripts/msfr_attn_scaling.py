"""Model-size and data-size scaling exponents of trained msfr-attn.

    .venv/bin/python scripts/msfr_attn_scaling.py [--variant gd|adamw|softmax] [--size full|reduced]
                                                  [--scan d|n|both] [--out DIR] [--threads K]

Runs the trained linear (or softmax) self-attention through the public driver on the configs
``data/configs/msfr_attn_scaling_{d,n}.toml`` (α = 2, β = γ = 0), over 5 model sizes D (fixed data)
and 5 data sizes N (D = N_s, several seeds = several draws of the counts), stores every run as HDF5
under ``--out`` and fits the final test loss with :func:`fastdyn.analysis.fit_power_law`:
L ∝ D^-p_D and L ∝ N^-p_N, printed beside the theory (docs/theory.md, models/msfr/scaling.py:
p_D = η = α − 1 = 1, p_N = η/α = 1/2), beside the exponent of the *finite-size expectation* of the
same D, N, N_s values (what the asymptotic law becomes on this window: the exact tail Σ_{s>D} P(s)/2,
and E Σ_s P(s)(1 − P(s))^N/2), and beside the exponent of the *realised* t → ∞ loss of the drawn
counts (Σ_{#_s = 0, s ≤ D} P(s)(Λ − f_s(0))²/2 + the tail): the trained runs must reach it.

Schedules. gd (and softmax, also gd): η from the sampled counts so that 2 a_1 Λ η = c (c = 1.5 for
linear attention: the gd map is stable at f_1 = Λ for c < 2, and contracts there by |1 − c| a step), and epochs so that t_end = 2 × the
block half-rise time ln(Λ/f0 − 1)/(2 a_s Λ) of the rarest sampled represented task (at 2 t_half the
logistic is within f0/Λ ≈ 2 % of Λ). adamw: a fixed number of steps (Adam normalises each weight's
gradient, so a rare task's weights move as fast as a frequent one's: the time law differs, the
t → ∞ loss, and with it the D and N laws, do not). softmax attention has no ψ in its rate (the
softmax normalises over the context), so its step is ψ-fold larger and its epochs rule uses
a_s = #_s (1 + Λ²)/N.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastdyn.analysis import fit_power_law  # noqa: E402
from fastdyn.config.load import apply_sets, from_dict, read_toml, to_toml  # noqa: E402
from fastdyn.drive.run import simulate as run_msfr_attn  # noqa: E402
from fastdyn.h5.reader import load  # noqa: E402
from fastdyn.models.msfr import scaling  # noqa: E402
from fastdyn.models.msfr.problem import MsfrProblem  # noqa: E402

CONFIGS = ROOT / "data" / "configs"

#: the scans: model sizes on the D config, data sizes and seeds on the N config
SIZES = {
    "full": {
        "d": {"sets": [], "values": [4, 8, 16, 32, 64]},
        "n": {"sets": [], "values": [1000, 2000, 4000, 8000, 16000], "seeds": list(range(8))},
    },
    # the test's size: N_s = 200, D = 2 … 32 (N = 1e4); N = 125 … 2000 on N_s = 2000, 4 seeds
    "reduced": {
        "d": {"sets": ["task.n_tasks=200", "task.n_samples=10000"], "values": [2, 4, 8, 16, 32]},
        "n": {
            "sets": ["task.n_tasks=2000"],
            "values": [125, 250, 500, 1000, 2000],
            "seeds": [0, 1, 2, 3],
        },
    },
}

#: optimiser / attention variants: extra --set lines, step rule c (2 a_1 Λ η = c), epochs rule
VARIANTS = {
    "gd": {"sets": [], "c": 1.5, "epochs": "rarest", "psi_rate": True},
    "softmax": {
        "sets": ["attention.softmax=true"],
        "c": 1.0,
        "epochs": "rarest",
        "psi_rate": False,
    },
    "adamw": {
        "sets": ['optim.name="adamw"', "optim.lr=0.003", "optim.weight_decay=1e-5"],
        "epochs": 3000,
    },
}


def initial_f(ch) -> np.ndarray:
    """f_s(0) = v0ᵀ H_s w0 of every task of a problem chunk (Rademacher H, docs/theory.md)."""
    return ch.psi * (ch.v0x + ch.lam * ch.v0y) * (ch.w0x + ch.lam * ch.w0y) + ch.v0x * ch.w0x


def schedule(
    cfg_data: dict, variant: dict, factor: float = 2.0, until: int | None = None
) -> tuple[float, int, dict]:
    """(lr, epochs, facts) for one run from its counts (see the module docstring); with ``until``
    the epochs rule takes the rarest sampled task s ≤ ``until`` instead of s ≤ D."""
    cfg = from_dict(cfg_data)
    p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    d = p.d
    ch = p.chunk(0, d)
    counts = np.rint(ch.rate * p.n_samples).astype(np.int64)
    facts = {"unsampled_represented": int(np.sum(counts == 0))}
    if variant["epochs"] != "rarest":
        return float(cfg.optim.lr), int(variant["epochs"]), facts
    psi = ch.psi if variant["psi_rate"] else np.ones(d)
    a = ch.rate * psi * (1 + ch.lam**2)
    lr = variant["c"] / (2 * a[0] * ch.lam[0])
    f00 = initial_f(ch)
    samp = counts > 0
    if until is not None:
        samp &= np.arange(1, d + 1) <= until
    t_half = np.log(ch.lam[samp] / f00[samp] - 1) / (2 * a[samp] * ch.lam[samp])
    epochs = int(math.ceil(factor * t_half.max() / lr))
    return float(lr), epochs, facts


def realised_limit(cfg_data: dict) -> float:
    """The t → ∞ test loss of the drawn counts: unsampled represented tasks keep f_s(0)."""
    cfg = from_dict(cfg_data)
    p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    ch = p.chunk(0, p.d)
    f00 = initial_f(ch)
    never = ch.rate == 0
    return float(
        np.sum(ch.wtest[never] * (ch.lam[never] - f00[never]) ** 2) / 2 + p.tail_losses()[0]
    )


def expected_exponents(size: dict) -> dict[str, float]:
    """Exponents of the finite-size expectation on the scan's own D, N, N_s values (see top)."""
    out = {}
    d_cfg = from_dict(
        apply_sets(read_toml(CONFIGS / "msfr_attn_scaling_d.toml"), size["d"]["sets"])
    )
    s = np.arange(1, d_cfg.task.n_tasks + 1, dtype=float)
    P = s ** -float(d_cfg.task.alpha)
    P /= P.sum()
    D = np.array(size["d"]["values"], dtype=float)
    out["d"] = float(-np.polyfit(np.log(D), np.log([P[int(x) :].sum() / 2 for x in D]), 1)[0])
    n_cfg = from_dict(
        apply_sets(read_toml(CONFIGS / "msfr_attn_scaling_n.toml"), size["n"]["sets"])
    )
    s = np.arange(1, n_cfg.task.n_tasks + 1, dtype=float)
    P = s ** -float(n_cfg.task.alpha)
    P /= P.sum()
    N = np.array(size["n"]["values"], dtype=float)
    out["n"] = float(
        -np.polyfit(np.log(N), np.log([np.sum(P * (1 - P) ** n) / 2 for n in N]), 1)[0]
    )
    return out


def _stored(out: Path, cfg):
    """The run already stored at ``out`` if it completed with exactly this config, else None."""
    if not out.is_file():
        return None
    try:
        run = load(out)
    except (OSError, ValueError):
        return None
    return run if run.status == "complete" and run.attrs.get("config") == to_toml(cfg) else None


def run_one(
    base: str,
    sets: list[str],
    variant: dict,
    out: Path,
    reuse: bool = False,
    until: int | None = None,
) -> dict:
    """One run through the public driver (or, with ``reuse``, the identical stored one); returns
    its final test loss, limit, lr, epochs and the run's own wall time."""
    data = apply_sets(read_toml(CONFIGS / base), sets + variant["sets"])
    lr, epochs, facts = schedule(data, variant, variant.get("factor", 2.0), until)
    data = apply_sets(data, [f"optim.lr={lr!r}", f"schedule.epochs={epochs}"])
    cfg = from_dict(data)
    run = _stored(out, cfg) if reuse else None
    reused = run is not None
    if not reused:
        run_msfr_attn(cfg, out, overwrite=True)  # a stored run that did not match: replaced
        run = load(out)
    status = run.status
    wall = float(dict(run.attrs.get("timings", {})).get("total", math.nan))  # the run's own time
    return {
        "file": str(out), "status": status, "lr": lr, "epochs": epochs, "wall_s": wall, "reused": reused,
        "loss_test": float(run["loss/test"][-1]), "loss_train": float(run["loss/train"][-1]),
        "limit": realised_limit(data), **facts,
    }  # fmt: skip


def scan(
    variant_name: str | dict,
    size_name: str | dict,
    which: str,
    out_dir: Path,
    n_seeds=None,
    reuse=False,
    log=print,
) -> dict:
    """Run one scan ('d' or 'n'); fit the exponent of the final test loss and of the limit.
    ``variant_name``/``size_name`` name an entry of VARIANTS/SIZES, or are such an entry."""
    size = dict((SIZES[size_name] if isinstance(size_name, str) else size_name)[which])
    if n_seeds and "seeds" in size:
        size["seeds"] = size["seeds"][:n_seeds]
    variant = VARIANTS[variant_name] if isinstance(variant_name, str) else variant_name
    base = f"msfr_attn_scaling_{which}.toml"
    key = "task.model_size" if which == "d" else "task.n_samples"
    seeds = size.get("seeds", [None])
    rows = []
    for seed in seeds:
        row = []
        for v in size["values"]:
            sets = list(size["sets"]) + [f"{key}={v}"]
            tag = f"{which}{v}"
            if seed is not None:
                sets.append(f"seed={seed}")
                tag += f"_seed{seed}"
            r = run_one(base, sets, variant, out_dir / f"{tag}.h5", reuse)
            log(f"  {which}={v:>6} seed={seed}: L_test={r['loss_test']:.5g} limit={r['limit']:.5g} "
                f"lr={r['lr']:.3g} epochs={r['epochs']} {r['wall_s']:.1f}s {r['status']}{' (stored)' if r['reused'] else ''}")  # fmt: skip
            row.append(r)
        rows.append(row)
    x = np.array(size["values"], dtype=float)
    y = np.array([[r["loss_test"] for r in row] for row in rows])
    lim = np.array([[r["limit"] for r in row] for row in rows])
    fit = fit_power_law(x, y if len(seeds) > 1 else y[0], bootstrap=1000, seed=0)
    fit_lim = fit_power_law(x, lim if len(seeds) > 1 else lim[0], bootstrap=0)
    return {
        "exponent": fit.exponent, "stderr": fit.stderr, "ci": list(fit.ci),
        "bootstrap": fit.bootstrap_method, "limit_exponent": fit_lim.exponent,
        "max_rel_gap_to_limit": float(np.max(np.abs(y / lim - 1))),
        "wall_s": float(sum(r["wall_s"] for row in rows for r in row)), "runs": rows,
    }  # fmt: skip


def time_law(out_dir: Path, d: int = 32, log=print) -> dict:
    """Half-rise step of tasks 1, 2, 4, … ≤ D under gd and adamw on the D config (model size D):
    the slope of log t_half against log s (gd theory: t_s ∝ 1/a_s ∝ s^α = s²) and of L(t)."""
    track = [1 << k for k in range(d.bit_length()) if (1 << k) <= d]
    res = {}
    for name in ("gd", "adamw"):
        v = VARIANTS[name]
        sets = [f"task.model_size={d}", "schedule.n_saves=400", f"output.track={track}"]
        r = run_one("msfr_attn_scaling_d.toml", sets, v, out_dir / f"tlaw_{name}_d{d}.h5")
        run = load(r["file"])
        st, f = run["step"].astype(float), run["tasks/f"]
        half = []
        for j in range(f.shape[1]):
            k = int(np.argmax(f[:, j] >= 0.5))  # Λ = 1: first recorded step past Λ/2
            half.append(float(st[k]) if f[k, j] >= 0.5 and k > 0 else math.nan)
        ok = np.isfinite(half)
        slope = float(np.polyfit(np.log(np.array(track)[ok]), np.log(np.array(half)[ok]), 1)[0])
        res[name] = {"track": track, "half_rise_step": half, "slope": slope, "lr": r["lr"]}
        log(f"  {name}: lr={r['lr']:.3g}  half-rise step of s={track}: "
            f"{[round(h) if math.isfinite(h) else None for h in half]}  slope d log t_half / d log s = {slope:.3f}")  # fmt: skip
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="gd")
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    ap.add_argument("--scan", choices=("d", "n", "both", "tlaw"), default="both",
                    help="tlaw: half-rise times of tasks 1, 2, 4, … under gd and adamw")  # fmt: skip
    ap.add_argument("--out", default="runs/msfr_attn_scaling", help="folder for the HDF5 runs")
    ap.add_argument("--threads", type=int, default=None, help="numba threads (default: all)")
    ap.add_argument(
        "--seeds", type=int, default=None, help="use only the first K seeds of the N scan"
    )
    ap.add_argument("--reuse", action="store_true", help="keep stored runs of identical config")
    a = ap.parse_args(argv)
    if a.threads:
        import numba

        numba.set_num_threads(a.threads)
    out = Path(a.out) / f"{a.variant}_{a.size}"
    out.mkdir(parents=True, exist_ok=True)
    if a.scan == "tlaw":
        res = time_law(out)
        (out / "tlaw.json").write_text(json.dumps(res, indent=1))
        return res
    ex = scaling.exponents(2.0, 0.0, 0.0)
    theory = {"d": ex.model_size, "n": ex.data}
    expect = expected_exponents(SIZES[a.size])
    t0 = time.perf_counter()
    res = {"variant": a.variant, "size": a.size, "command": " ".join(sys.argv)}
    for which in ("d", "n") if a.scan == "both" else (a.scan,):
        print(f"{a.variant} {a.size}: {'model size D' if which == 'd' else 'data size N'} scan")
        r = scan(a.variant, a.size, which, out, a.seeds, a.reuse)
        r |= {"theory": theory[which], "finite_size_expectation": expect[which]}
        res[which] = r
    res["wall_s"] = time.perf_counter() - t0
    print(f"\n{'':8} {'fitted p':>16} {'95% CI':>18} {'theory':>7} {'finite-size':>11} {'realised':>9} {'max |L/L∞-1|':>13}")  # fmt: skip
    for which in ("d", "n"):
        if which in res:
            r = res[which]
            print(f"{'L ~ ' + which.upper() + '^-p':8} {r['exponent']:9.4f} ± {r['stderr']:.4f} "
                  f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] {r['theory']:7.3f} {r['finite_size_expectation']:11.4f} "
                  f"{r['limit_exponent']:9.4f} {r['max_rel_gap_to_limit']:13.2e}")  # fmt: skip
    print(f"run time {res['wall_s']:.1f} s; runs in {out}")
    (out / "summary.json").write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
