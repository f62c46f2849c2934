"""Multitask in-context regression under the source/capacity condition (the paper's App. H.1):
the t, D and N exponents of trained linear attention approach MSFR's as the spectrum decay τ grows.

Runs data/configs/msfr_source_capacity.toml (msfr-attn, block, merged, GD, Gaussian tokens,
N_s = 32 task types, α = 1.5, ψ = 8, Λ = 1; a task-s token's coordinate c is N(0, ω_k), ω_k = k^-τ,
k = 1 + ((c − s) mod N_s); docs/theory.md) for τ = 1, 2, 4 and the sparse MSFR limit (τ = 0 in the
config: exact sparse features, Gaussian x). Every run's final weights are evaluated on one
held-out set per τ (2·10^4 sequences of all N_s tasks, seed 99: common random numbers, so the
differences between runs carry no test-sampling noise), and the exponents are fitted with
:func:`fastdyn.analysis.fit_power_law` on excess losses, since Gaussian tokens at finite ψ leave a
floor that no size removes:

- D: L(D) − L(D = N_s) over D = 2, 4, 8, 16 (N = 2000, seed 0);
- N: L(N) − L(N = 2000) over N = 25, 50, 100, 200 (D = N_s, seeds 0–3; the N law needs
  N ≲ N_s^α ≈ 181, where unsampled tasks dominate);
- t: L(t) of the reference run (D = N_s, N = 2000; the exact population loss of the sparse run,
  a held-out set of 10^4 sequences for the dense ones) fitted as A t^-p + c over t_half(s = 2) … t_half(s = 16), the leading-order half-rise times.

A non-positive excess (a dense model that overfits: at τ = 1 the D = 32 model, 2112 weights on
2000 sequences, ends worse than D = 16) leaves that exponent NaN (no law). Each dense exponent is
printed beside the sparse run's (MSFR measured the same way on the same sizes and draws), MSFR's
asymptotic law (docs/theory.md: p_t = p_N = (α − 1)/α, p_D = α − 1) and the exponent of the
finite-size expectation of the same sizes (as in scripts/msfr_attn_scaling.py: the tail
Σ_{D<s≤N_s} P(s)/2; the unsampled tasks' E Σ_s P(s)[(1 − P)^N − (1 − P)^N_ref]/2; for t the
leading-order closed form of the same counts, Rademacher H, fitted the same way).
Schedule per run from its counts: η = c/(2 a_1 Λ), c = 0.75 (Gaussian tokens raise the curvature
by (ψ + 2)/ψ over Rademacher's, for which c < 2 is stable), and 2 × the half-rise time of the
rarest sampled represented task (identical for every τ: the counts do not depend on τ).

A τ = 60 run (ω_2 = 2^-60: noise of standard deviation 1e-9) checks the τ → ∞ limit: its training
loss must equal the sparse run's (same x draws).

    python scripts/msfr_source_capacity.py            # full (212 s on 2 shared cores, load 3–5)
    python scripts/msfr_source_capacity.py --quick    # ~10 s
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gallery import CONFIGS, Gallery, plt  # noqa: E402

CONFIG = "msfr_source_capacity.toml"
C_STEP = 0.75


def schedule(sets: dict, factor: float = 2.0, cap: int | None = None) -> tuple[float, int]:
    """(η, epochs) from the run's counts (see the module docstring)."""
    import fastdyn
    from fastdyn.models.msfr.problem import MsfrProblem

    cfg = fastdyn.load_config(CONFIGS / CONFIG, [f"{k}={v}" for k, v in sets.items()])
    p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    ch = p.chunk(0, p.d)
    counts = np.rint(ch.rate * p.n_samples)
    a = ch.rate * ch.psi * (1 + ch.lam**2)
    lr = C_STEP / (2 * a[0] * ch.lam[0])
    f00 = ch.psi * (ch.v0x + ch.lam * ch.v0y) * (ch.w0x + ch.lam * ch.w0y) + ch.v0x * ch.w0x
    samp = counts > 0
    t_half = np.log(ch.lam[samp] / f00[samp] - 1) / (2 * a[samp] * ch.lam[samp])
    epochs = int(math.ceil(factor * t_half.max() / lr))
    return float(lr), epochs if cap is None else min(epochs, cap)


def half_rise_times(sets: dict) -> np.ndarray:
    """Leading-order half-rise time of every represented task (the sampled rates)."""
    import fastdyn
    from fastdyn.models.msfr.problem import MsfrProblem

    cfg = fastdyn.load_config(CONFIGS / CONFIG, [f"{k}={v}" for k, v in sets.items()])
    p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
    ch = p.chunk(0, p.d)
    a = ch.rate * ch.psi * (1 + ch.lam**2)
    f00 = ch.psi * (ch.v0x + ch.lam * ch.v0y) * (ch.w0x + ch.lam * ch.w0y) + ch.v0x * ch.w0x
    with np.errstate(divide="ignore"):
        return np.log(ch.lam / f00 - 1) / (2 * a * ch.lam)


def expectations(n_tasks: int, alpha: float, ds, ns, n_ref: int) -> tuple[float, float]:
    """Exponents of the finite-size expectation of the excess losses, Λ = 1: the tail
    Σ_{D<s≤N_s} P(s)/2 over D (the excess over D = N_s), and the unsampled tasks'
    E Σ_s P(s)[(1 − P(s))^N − (1 − P(s))^N_ref]/2 over N (the excess over N_ref)."""
    s = np.arange(1, n_tasks + 1, dtype=float)
    P = s**-alpha
    P /= P.sum()
    pd = -np.polyfit(np.log(ds), np.log([P[int(d) :].sum() / 2 for d in ds]), 1)[0]
    un = [np.sum(P * ((1 - P) ** n - (1 - P) ** n_ref)) / 2 for n in ns]
    pn = -np.polyfit(np.log(ns), np.log(un), 1)[0]
    return float(pd), float(pn)


def fastdyn_cfg(sets: dict):
    import fastdyn

    return fastdyn.load_config(CONFIGS / CONFIG, [f"{k}={v}" for k, v in sets.items()])


class CommonTest:
    """One held-out set per τ (seed 99, n sequences of all N_s tasks, P(s)-distributed), on which
    every run's final weights are evaluated: differences between runs of the same τ are then free
    of test-sampling noise (common random numbers)."""

    def __init__(self, n: int):
        self.n = n
        self.sets: dict[float, object] = {}

    def loss(self, run, tau: float) -> float:
        import fastdyn
        from fastdyn.models.msfr.problem import MsfrProblem
        from fastdyn.models.msfr_attn import kernels as K
        from fastdyn.models.msfr_attn import problem as msfr_seq

        if tau not in self.sets:
            cfg = fastdyn.load_config(CONFIGS / CONFIG, ["seed=99"])
            p = MsfrProblem(cfg.task, cfg.init, cfg.seed)
            self.sets[tau] = msfr_seq.test_set(p, self.n, x_dist="gaussian", tau=tau)
        d = int(run.attrs["n_represented"])
        lay = K.Layout(d, dense=tau > 0)
        th = np.asarray(run["params/theta"], dtype=np.float64)
        return K.loss_and_grad(th, lay, self.sets[tau], np.zeros_like(th))


def fit(x, y, offset: bool = False) -> tuple[float, float]:
    """(p, stderr) of y ∝ x^-p (+ c with ``offset``; least squares in log-log; y may be runs ×
    points), or NaN where no power law can be fitted (an excess loss ≤ 0: the loss is not
    monotone in the size, e.g. a dense model overfitting its training set)."""
    from fastdyn.analysis import fit_power_law

    try:
        f = fit_power_law(np.asarray(x, float), np.asarray(y, float), offset=offset, bootstrap=0)
    except ValueError:
        return math.nan, math.nan
    return float(f.exponent), float(f.stderr)


def main(argv: list[str] | None = None) -> dict:
    from fastdyn.models.msfr import scaling, theory
    from fastdyn.models.msfr.problem import MsfrProblem

    g = Gallery("msfr_source_capacity", __doc__, argv)
    q = g.quick
    taus = [0.0, 2.0] if q else [0.0, 1.0, 2.0, 4.0]
    ds = [2, 4, 8] if q else [2, 4, 8, 16]
    ns = [25, 50, 100] if q else [25, 50, 100, 200]
    seeds = [0] if q else [0, 1, 2, 3]
    n_ref = 400 if q else 2000
    cap = 150 if q else None
    ns_tasks, alpha = 32, 1.5
    ex = scaling.exponents(alpha)
    common = CommonTest(4000 if q else 20000)
    lean = {"data.n_test": 1000, "schedule.n_saves": 4}

    def run(sets: dict, tag: str, extra: dict = lean):
        lr, ep = schedule(sets, cap=cap)
        return g.run(CONFIG, extra | sets | {"optim.lr": lr, "schedule.epochs": ep}, tag=tag)

    # the reference run: D = N_s, N = n_ref (the D and N scans' large-size end, and the t law)
    ref_sets = {"task.model_size": ns_tasks, "task.n_samples": n_ref, "seed": 0}
    th = half_rise_times(ref_sets)
    window = (th[1], th[15]) if not q else (th[0], th[3])
    p = MsfrProblem(fastdyn_cfg(ref_sets).task, fastdyn_cfg(ref_sets).init, 0)
    ch = p.chunk(0, p.d)
    cols = (ch.lam, ch.psi, ch.rate, ch.wtest, ch.v0x, ch.v0y, ch.w0x, ch.w0y)

    res: dict[float, dict] = {}
    for tau in taus:
        r = run(
            ref_sets | {"data.tau": tau},
            f"tau{tau:g}_ref",
            {"data.n_test": 10000, "schedule.n_saves": 40},
        )
        l_ref = common.loss(r, tau)
        t, lt = np.asarray(r.time), np.asarray(r["loss/test"])
        m = (t >= window[0]) & (t <= window[1])
        p_t = fit(t[m], lt[m], offset=True)
        if tau == 0.0:
            lo = theory.loss_curves(t, *cols, "leading")[0]
            exp_t = fit(t[m], lo[m], offset=True)[0]
        ld = [
            common.loss(
                run(ref_sets | {"data.tau": tau, "task.model_size": d}, f"tau{tau:g}_d{d}"), tau
            )
            for d in ds
        ]
        ln = np.empty((len(seeds), len(ns)))
        for i, sd in enumerate(seeds):
            for j, n in enumerate(ns):
                sets = ref_sets | {"data.tau": tau, "task.n_samples": n, "seed": sd}
                ln[i, j] = common.loss(run(sets, f"tau{tau:g}_n{n}_seed{sd}"), tau)
        p_d = fit(ds, np.array(ld) - l_ref)
        p_n = fit(ns, ln - l_ref if len(seeds) > 1 else ln[0] - l_ref)
        res[tau] = {
            "t": p_t[0],
            "D": p_d[0],
            "N": p_n[0],
            "se_t": p_t[1],
            "se_D": p_d[1],
            "se_N": p_n[1],
            "ld": ld,
            "ln": ln,
            "ref": l_ref,
            "curve": (t, lt),
        }
        print(f"  τ = {tau:g}: L_ref = {l_ref:.4f}  p_t = {p_t[0]:.3f} ± {p_t[1]:.3f}  p_D = {p_d[0]:.3f} ± {p_d[1]:.3f}  "
              f"p_N = {p_n[0]:.3f} ± {p_n[1]:.3f}", flush=True)  # fmt: skip
    exp_d, exp_n = expectations(ns_tasks, alpha, ds, ns, n_ref)

    # τ → ∞: τ = 60 is MSFR to ~1e-9 (noise std 2^-30); same x draws, so the same training loss
    lim = ref_sets | {"task.model_size": ds[-1]}
    r60 = run(lim | {"data.tau": 60.0}, "tau60")
    r0 = run(lim | {"data.tau": 0.0}, "tau0_check")
    l60, l0 = float(np.asarray(r60["loss/train"])[-1]), float(np.asarray(r0["loss/train"])[-1])
    # rounding (different summation orders in the two kernels) through the GD steps, and the
    # 1e-9 noise: measured 1.0e-12 (full) and 8.5e-12 (quick) relative; held to 1e-7
    g.row("τ = 60 vs sparse MSFR: final L_train", l60, l0, 1e-7, "rel")

    sp = res[0.0]
    g.info("MSFR sparse: p_t (offset fit in the window)", sp["t"], f"asymptotic {ex.time:.3f}")
    g.info("MSFR sparse: p_D (excess over D = N_s)", sp["D"], f"asymptotic {ex.model_size:.3f}")
    g.info("MSFR sparse: p_N (excess over N_ref)", sp["N"], f"asymptotic {ex.data:.3f}")
    # the realised MSFR excess losses are not the finite-size expectation's (finite ψ with
    # Gaussian x, partly learned rare tasks): printed beside it, not held to it
    for k, e in (("t", exp_t), ("D", exp_d), ("N", exp_n)):
        g.info(f"MSFR sparse: p_{k} − finite-size expectation", sp[k] - e, f"expectation {e:.3f}")
    gaps = {}
    for tau in taus[1:]:
        for k in ("t", "D", "N"):
            gap = res[tau][k] - sp[k]
            gaps[(tau, k)] = gap
            g.info(f"τ = {tau:g}: p_{k} − p_{k}(MSFR)", gap, f"p_{k} = {res[tau][k]:.3f}")
    if not q:
        # τ = 4 against MSFR measured the same way: tolerance 3 combined standard errors of the
        # two log-log fits (the fits' own scatter; no theory gives the τ = 4 correction's size)
        for k in ("t", "D", "N"):
            se = math.hypot(res[4.0]["se_" + k], sp["se_" + k])
            g.row(f"τ = 4: p_{k} vs MSFR's (3 fit s.e.)", res[4.0][k], sp[k], 3 * se)
        # the paper's claim (App. H.1, Fig. 5): the laws approach MSFR's as τ grows. Checked as
        # Σ|gap(τ = 4)| ≤ Σ|gap(τ = 1)| over the exponents finite at both (a ratio ≤ 1)
        ks = [
            k
            for k in ("t", "D", "N")
            if np.isfinite(gaps[(1.0, k)]) and np.isfinite(gaps[(4.0, k)])
        ]
        if ks:
            s1 = sum(abs(gaps[(1.0, k)]) for k in ks)
            s4 = sum(abs(gaps[(4.0, k)]) for k in ks)
            g.row(f"Σ|p − p(MSFR)| at τ = 4 over τ = 1 ({', '.join(ks)})", s4 / s1, 0.0, 1.0)
        else:
            g.notes.append("no exponent finite at both τ = 1 and τ = 4: gap ratio not checked")
    g.notes.append(
        f"finite-size expectation: p_t = {exp_t:.3f} (leading-order closed form, Rademacher H, "
        f"window t = {window[0]:.3g}…{window[1]:.3g}), p_D = {exp_d:.3f} (D = {ds}), "
        f"p_N = {exp_n:.3f} (N = {ns}); asymptotic p_t = {ex.time:.3f}, p_D = {ex.model_size:.3f}, "
        f"p_N = {ex.data:.3f}"
    )

    pl = plt()
    fig, ax = pl.subplots(1, 3, figsize=(13, 4))
    for k, tau in enumerate(taus):
        lab = "MSFR (sparse)" if tau == 0 else f"τ = {tau:g}"
        t, lt = res[tau]["curve"]
        ax[0].loglog(t[t > 0], lt[t > 0], color=f"C{k}", label=lab)
        ax[1].loglog(ds, np.array(res[tau]["ld"]) - res[tau]["ref"], "o-", color=f"C{k}", label=lab)
        ax[2].loglog(ns, res[tau]["ln"].mean(0) - res[tau]["ref"], "o-", color=f"C{k}", label=lab)
    for a in window:
        ax[0].axvline(a, color="k", ls=":", lw=1)
    ax[0].set_xlabel("t = η·step")
    ax[0].set_ylabel(f"test loss (D = N_s = {ns_tasks}, N = {n_ref})")
    ax[1].set_xlabel("model size D")
    ax[1].set_ylabel(f"L(D) − L(D = N_s) (N = {n_ref})")
    ax[2].set_xlabel("data size N")
    ax[2].set_ylabel(f"L(N) − L(N = {n_ref}) (D = N_s, seed mean)")
    ax[0].legend(fontsize=7)
    fig.suptitle("Source/capacity in-context regression → MSFR as τ grows (App. H.1)")
    fig.tight_layout()
    g.figure(fig, "msfr_source_capacity")
    return g.finish()


if __name__ == "__main__":
    main()
