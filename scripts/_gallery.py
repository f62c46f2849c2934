"""Shared plumbing of the gallery scripts (scripts/msfr_*.py, scripts/icl_*.py).

Every script runs its configs through the public API (:func:`fastdyn.load_config`,
:func:`fastdyn.simulate`, :func:`fastdyn.load`, :mod:`fastdyn.analysis.compare`), writes HDF5 and
PNG into ``results/gallery/<script>/``, copies the PNG into the tracked ``data/gallery/`` only when
asked (``--update-gallery``, full runs), prints a table of measured key numbers beside theory, and writes the same
rows as JSON (``results/gallery/<script>/summary.json``) for the README and the quick test.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "data" / "configs"
GALLERY = ROOT / "data" / "gallery"


@dataclass
class Row:
    """One key number: measured beside theory, |difference| and the tolerance it is held to."""

    name: str
    measured: float
    theory: float
    tol: float
    kind: str = "abs"  # "abs": |m - t| <= tol; "rel": |m - t| <= tol * |t|; "info": no theory
    note: str = ""

    @property
    def diff(self) -> float:
        return self.measured - self.theory

    @property
    def ok(self) -> bool | None:
        if self.kind == "info":
            return None
        if not (math.isfinite(self.measured) and math.isfinite(self.theory)):
            return False
        bound = self.tol * abs(self.theory) if self.kind == "rel" else self.tol
        return abs(self.diff) <= bound

    def to_dict(self) -> dict:
        d = asdict(self)
        d["diff"] = self.diff
        d["ok"] = self.ok
        return d


class Gallery:
    """Argument parsing, runs, rows and the summary of one gallery script."""

    def __init__(self, name: str, doc: str, argv: list[str] | None = None) -> None:
        p = argparse.ArgumentParser(prog=f"scripts/{name}.py", description=doc.splitlines()[0])
        p.add_argument("--quick", action="store_true", help="reduced sizes (seconds): for the test")
        p.add_argument("--out", default=None, help="output folder [results/gallery/NAME]")
        p.add_argument(
            "--update-gallery",
            action="store_true",
            help="also copy the PNGs into the tracked data/gallery/ (full runs only)",
        )
        p.add_argument("--no-gallery", action="store_true", help=argparse.SUPPRESS)  # the default
        p.add_argument("--threads", type=int, default=None, help="numba threads [all cores]")
        p.add_argument(
            "--vector",
            choices=("pdf", "svg"),
            default=None,
            help="also write each figure as PDF or SVG (vector output, beside the PNG)",
        )
        self.args = p.parse_args(argv)
        self.name = name
        self.quick = self.args.quick
        default = ROOT / "results" / "gallery" / (name + ("_quick" if self.quick else ""))
        self.out = Path(self.args.out) if self.args.out else default
        self.out.mkdir(parents=True, exist_ok=True)
        self.rows: list[Row] = []
        self.pngs: list[Path] = []
        self.notes: list[str] = []
        self.t0 = time.perf_counter()
        if self.args.threads:
            import numba

            numba.set_num_threads(self.args.threads)

    # -- runs ------------------------------------------------------------------------------------
    def run(self, config: str, sets: dict | None = None, tag: str | None = None):
        """Simulate ``data/configs/<config>`` with ``--set`` overrides; return the loaded run."""
        import fastdyn

        sets = sets or {}
        cfg = fastdyn.load_config(CONFIGS / config, [f"{k}={_toml(v)}" for k, v in sets.items()])
        out = self.out / f"{tag or Path(config).stem}.h5"
        if out.exists():
            out.unlink()
        t = time.perf_counter()
        outcome = fastdyn.simulate(cfg, out)
        dt = time.perf_counter() - t
        print(f"  ran {config} {_fmt_sets(sets)} -> {out.name}: {outcome} ({dt:.1f} s)", flush=True)
        if not str(outcome).startswith("complete"):
            raise SystemExit(f"{self.name}: run {out} did not complete: {outcome}")
        return fastdyn.load(out)

    # -- results ---------------------------------------------------------------------------------
    def row(self, name, measured, theory, tol, kind="abs", note="") -> Row:
        r = Row(name, float(measured), float(theory), float(tol), kind, note)
        self.rows.append(r)
        return r

    def info(self, name, measured, note="") -> Row:
        """A measured number with no theory to hold it to (printed, never checked)."""
        r = Row(name, float(measured), math.nan, math.nan, "info", note)
        self.rows.append(r)
        return r

    def figure(self, fig, stem: str) -> Path:
        """Save ``fig`` as results PNG (150 dpi: readable when zoomed; 80 gave 512×352 pixels), with
        ``--vector`` also as PDF/SVG, and with ``--update-gallery`` (full runs) copy the PNG to
        data/gallery/."""
        import matplotlib.pyplot as plt

        png = self.out / f"{stem}.png"
        fig.savefig(png, dpi=150)
        if self.args.vector:
            fig.savefig(png.with_suffix(f".{self.args.vector}"))
        plt.close(fig)
        self.pngs.append(png)
        if not self.quick and self.args.update_gallery:
            GALLERY.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, GALLERY / png.name)
        return png

    def finish(self) -> dict:
        wall = time.perf_counter() - self.t0
        print(f"\n{self.name}{' (quick)' if self.quick else ''}: measured vs theory")
        print(
            f"  {'key number':<46s} {'measured':>12s} {'theory':>12s} {'diff':>11s} {'tol':>10s}  ok"
        )
        for r in self.rows:
            tol = f"{r.tol:g}" + ("·|th|" if r.kind == "rel" else "")
            ok = "n/a" if r.ok is None else "yes" if r.ok else "NO"
            if r.kind == "info":
                print(
                    f"  {r.name:<46s} {r.measured:>12.5g} {'—':>12s} {'—':>11s} {'—':>10s}  {ok}{'  ' + r.note if r.note else ''}"
                )
                continue
            print(f"  {r.name:<46s} {r.measured:>12.5g} {r.theory:>12.5g} {r.diff:>+11.3g} {tol:>10s}  "
                  f"{ok}{'  ' + r.note if r.note else ''}")  # fmt: skip
        for n in self.notes:
            print(f"  note: {n}")
        print(f"  run time: {wall:.1f} s (wall clock)")
        summary = {
            "script": self.name,
            "quick": self.quick,
            "wall_s": wall,
            "rows": [r.to_dict() for r in self.rows],
            "pngs": [str(p) for p in self.pngs],
            "notes": self.notes,
            "command": " ".join(["python", f"scripts/{self.name}.py", *sys.argv[1:]]),
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary


def icl_train_set_minimum(config: str, sets: dict, m: int | None = None) -> float:
    """Least-squares minimum of the in-context train loss over Γ on the run's own train set
    (:func:`gamma_least_squares`)."""
    return gamma_least_squares(config, sets, m)["train"]


def gamma_least_squares(config: str, sets: dict, m: int | None = None) -> dict[str, float]:
    """Least-squares fit of the in-context predictor ŷ = x_qᵀ Γ b on the run's own train set.

    With the in-weight blocks at zero, linear attention predicts ŷ = x_qᵀ Γ b, b = Σ_n y_n x_n,
    with Γ = Σ_h v_h W_K,hᵀ W_Q,h: ATTN_M (H ≥ 1 full heads) spans every D×D Γ, so its class is
    the linear regression of y_q on the D² features vec(x_q bᵀ) and the minimum is one solve.
    ``m`` restricts Γ to U_m C U_mᵀ (U_m: the top-m eigenvectors of the population Λ, C free
    m×m), the class of the ATTN_S saddle M_m; since a finite-data saddle may also tilt its
    subspace, this is an upper bound on that plateau's train loss. Loss = mean (y_q − ŷ)²,
    fastdyn's convention (docs/theory.md, ICL), so Γ = 0 gives the train set's mean y_q². Returns the
    train minimum ("train") and the fitted predictor's loss on each test set ("test_ic", …)."""
    import fastdyn
    from fastdyn.models.icl import settings as st

    cfg = fastdyn.load_config(CONFIGS / config, [f"{k}={_toml(v)}" for k, v in sets.items()])
    data = st.load_data(cfg.settings)
    D, N = data.D, data.N
    U = data.eigvecs[:, np.argsort(data.eigvals)[::-1][:m]] if m is not None else None

    def features(tokens: np.ndarray, labels: np.ndarray) -> np.ndarray:
        xq = tokens[:, N, :D]
        b = np.einsum("pn,pnd->pd", labels[:, :N], tokens[:, :N, :D])
        if U is not None:
            xq, b = xq @ U, b @ U
        return (xq[:, :, None] * b[:, None, :]).reshape(len(xq), -1)

    y = data.labels[:, N]
    F = features(data.tokens, data.labels)
    if F.shape[1] == 0:
        return {"train": float(np.mean(y * y))} | {
            f"test_{k}": float(np.mean(lab[:, N] ** 2)) for k, (_, lab) in data.tests.items()
        }
    coef, *_ = np.linalg.lstsq(F, y, rcond=None)
    out = {"train": float(np.mean((y - F @ coef) ** 2))}
    for name, (tok, lab) in data.tests.items():
        out[f"test_{name}"] = float(np.mean((lab[:, N] - features(tok, lab) @ coef) ** 2))
    return out


def attn_m_least_squares(config: str, sets: dict) -> dict[str, float]:
    """The converged reference of full ATTN_M (in-weight blocks included) on the run's own data.

    Linear ATTN_M predicts ŷ = (1/ρ) Σ_ab S_ab (M x_q)_ab with S = Σ_j x̂_j x̂_jᵀ over all N+1
    tokens and M_abc = Σ_i r_ia B_ibc (models/icl/attn_m/kernels.py); with H ≥ D+1 heads M spans
    every tensor, so the class is linear regression of y_q on the (D+1)(D+2)/2 · D features
    S_ab x_q,c. Returns the least-squares train minimum ("train") and that predictor's loss on
    each test set ("test_ic", "test_iw"): the t → ∞ limit of gradient descent from a small init
    (full-rank features: a unique minimiser)."""
    import fastdyn
    from fastdyn.models.icl import settings as st
    from fastdyn.models.icl.attn_m.kernels import pack_S

    cfg = fastdyn.load_config(CONFIGS / config, [f"{k}={_toml(v)}" for k, v in sets.items()])
    data = st.load_data(cfg.settings)
    D, N = data.D, data.N

    def features(tokens: np.ndarray) -> np.ndarray:
        S = np.empty((tokens.shape[0], (D + 1) * (D + 2) // 2))
        pack_S(np.ascontiguousarray(tokens), S)
        return (S[:, :, None] * tokens[:, N, None, :D]).reshape(tokens.shape[0], -1)

    F, y = features(data.tokens), data.labels[:, N]
    coef, *_ = np.linalg.lstsq(F, y, rcond=None)
    out = {"train": float(np.mean((y - F @ coef) ** 2))}
    for name, (tok, lab) in data.tests.items():
        out[f"test_{name}"] = float(np.mean((lab[:, N] - features(tok) @ coef) ** 2))
    return out


def cumulative_least_squares(config: str, sets: dict) -> dict[str, float]:
    """Least-squares minima of the *cumulative* train loss (mean over prefixes n = 1..N of the
    error predicting token n+1, models/icl/attn_m/kernels.py) on the run's own train set.

    At prefix n linear ATTN_M predicts ŷ_n = (1/ρ_n) Σ_ab S_n,ab (M x_q,n)_ab, S_n = Σ_{j≤n} x̂_j x̂_jᵀ
    plus the query's (label hidden), ρ_n = n ("N") or 1: one regression of all P·N targets on the
    (D+1)(D+2)/2 · D features S_n,ab x_q,n,c (the full class; H ≥ D+1 heads span it), and on the
    D² in-context features vec(x_q,n b_nᵀ)/ρ_n, b_n = Σ_{j≤n} y_j x_j (the Γ class: in-weight
    blocks at zero). Returns {"full": …, "gamma": …}: a run that learns in context, and slowly
    some in-weight directions, ends between the two."""
    import fastdyn
    from fastdyn.models.icl import settings as st
    from fastdyn.models.icl.attn_m.kernels import pair_index

    cfg = fastdyn.load_config(CONFIGS / config, [f"{k}={_toml(v)}" for k, v in sets.items()])
    data = st.load_data(cfg.settings)
    D, N = data.D, data.N
    x, y = data.tokens[:, :, :D], data.labels
    per_n = cfg.settings.model.attention_scale == "N"
    a, b = pair_index(D + 1)
    full, gam, tgt = [], [], []
    bsum = np.cumsum(y[:, :N, None] * x[:, :N], axis=1)
    for n in range(1, N + 1):
        ctx = np.concatenate([x[:, :n], y[:, :n, None]], axis=2)
        q = np.concatenate([x[:, n], np.zeros((len(x), 1))], axis=1)
        S = np.einsum("pja,pjb->pab", ctx, ctx) + q[:, :, None] * q[:, None, :]
        w = 1.0 / n if per_n else 1.0
        full.append(w * (S[:, a, b][:, :, None] * x[:, n, None, :]).reshape(len(x), -1))
        gam.append(w * (x[:, n, :, None] * bsum[:, n - 1, None, :]).reshape(len(x), -1))
        tgt.append(y[:, n])
    t = np.concatenate(tgt)
    out = {}
    for name, F in (("full", np.concatenate(full)), ("gamma", np.concatenate(gam))):
        coef, *_ = np.linalg.lstsq(F, t, rcond=None)
        out[name] = float(np.mean((t - F @ coef) ** 2))
    return out


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v in ("inf", "all") else json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


def _fmt_sets(sets: dict) -> str:
    def short(v) -> str:
        if isinstance(v, (list, tuple)) and len(v) > 6:
            return f"[{v[0]}, {v[1]}, …, {v[-1]}] ({len(v)} values)"
        return str(v)

    return " ".join(f"{k}={short(v)}" for k, v in sets.items())


def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def crossing_time(t: np.ndarray, y: np.ndarray, level: float, decreasing: bool = True) -> float:
    """First time y crosses ``level`` (log-t linear interpolation; nan if never)."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    hit = np.nonzero(y <= level)[0] if decreasing else np.nonzero(y >= level)[0]
    if hit.size == 0:
        return math.nan
    i = int(hit[0])
    if i == 0:
        return float(t[0])
    t0, t1, y0, y1 = t[i - 1], t[i], y[i - 1], y[i]
    w = (level - y0) / (y1 - y0) if y1 != y0 else 1.0
    if t0 > 0:
        return float(math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0))))
    return float(t0 + w * (t1 - t0))


def log_steps(epochs: int, n: int) -> list[int]:
    """About ``n`` log-spaced save steps 0, 1, …, epochs (for schedule.save_steps)."""
    s = np.unique(np.round(np.geomspace(1, epochs, n)).astype(int))
    return [0, *s.tolist()]


def plateaus(
    t: np.ndarray, L: np.ndarray, rate: float, min_points: int
) -> list[tuple[float, float, float]]:
    """Segments where the loss is flat on a log-time axis: |d ln L / d ln t| < ``rate`` for at
    least ``min_points`` consecutive saves (t > 0). Returns (median loss, start, end) in time order.
    """
    t, L = np.asarray(t, float), np.asarray(L, float)
    keep = t > 0
    t, L = t[keep], L[keep]
    d = np.abs(np.gradient(np.log(L), np.log(t)))
    flat = d < rate
    out, i = [], 0
    while i < len(L):
        if flat[i]:
            j = i
            while j + 1 < len(L) and flat[j + 1]:
                j += 1
            if j - i + 1 >= min_points:
                out.append((float(np.median(L[i : j + 1])), float(t[i]), float(t[j])))
            i = j + 1
        else:
            i += 1
    return out


def slow_points(t: np.ndarray, L: np.ndarray, k: int) -> list[tuple[float, float, float]]:
    """The ``k`` deepest local minima of the log-log slope |d ln L/d ln t| (t > 0): the saddles a
    saddle-to-saddle curve pauses at. Returns (loss, time, slope) for each, in time order."""
    t, L = np.asarray(t, float), np.asarray(L, float)
    keep = t > 0
    t, L = t[keep], L[keep]
    d = np.abs(np.gradient(np.log(L), np.log(t)))
    i = np.arange(1, len(d) - 1)
    mins = i[(d[i] <= d[i - 1]) & (d[i] <= d[i + 1])].tolist()
    if d[-1] <= d[-2]:
        mins.append(len(d) - 1)
    if d[0] <= d[1]:
        mins.insert(0, 0)
    best = sorted(sorted(mins, key=lambda j: d[j])[:k])
    return [(float(L[j]), float(t[j]), float(d[j])) for j in best]


def drops(
    t: np.ndarray, L: np.ndarray, rate: float = 0.5, min_fall: float = 0.1
) -> list[tuple[float, float, float, float]]:
    """Loss drops: maximal runs of saves with |d ln L/d ln t| > ``rate`` (t > 0) that lower ln L by
    at least ``min_fall``, separated by slower phases. Returns (t_start, t_end, L_before, L_after)
    for each, in time order: one drop for an abrupt single transition, several for saddle-to-saddle."""
    t, L = np.asarray(t, float), np.asarray(L, float)
    keep = t > 0
    t, L = t[keep], L[keep]
    fast = np.abs(np.gradient(np.log(L), np.log(t))) > rate
    out, i = [], 0
    while i < len(L):
        if not fast[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(L) and fast[j + 1]:
            j += 1
        a, b = max(i - 1, 0), min(j + 1, len(L) - 1)
        if math.log(L[a] / L[b]) >= min_fall:
            out.append((float(t[a]), float(t[b]), float(L[a]), float(L[b])))
        i = j + 1
    return out


def band_pauses(
    t: np.ndarray, L: np.ndarray, levels: np.ndarray
) -> list[tuple[float, float, float]]:
    """For each theory level L_m (decreasing), the slowest point of the curve inside the loss band
    between the midpoints to the neighbouring levels: (loss, time, |d ln L/d ln t|), or nans when
    the curve never enters the band. A curve that pauses at L_m has its slowest point there."""
    t, L = np.asarray(t, float), np.asarray(L, float)
    keep = t > 0
    t, L = t[keep], L[keep]
    d = np.abs(np.gradient(np.log(L), np.log(t)))
    lv = np.asarray(levels, float)
    out = []
    for m, v in enumerate(lv):
        hi = math.inf if m == 0 else 0.5 * (lv[m - 1] + v)
        lo = -math.inf if m == len(lv) - 1 else 0.5 * (lv[m + 1] + v)
        idx = np.nonzero((L > lo) & (L <= hi))[0]
        if idx.size == 0:
            out.append((math.nan, math.nan, math.nan))
            continue
        j = int(idx[np.argmin(d[idx])])
        out.append((float(L[j]), float(t[j]), float(d[j])))
    return out
