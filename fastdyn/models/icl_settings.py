"""Settings of one in-context-regression training run, the model it builds and its theory series
(runs: :func:`fastdyn.drive.icl_run.run_icl` in memory, the trained-model driver into a file).

Frozen dataclasses (defaults: spec §5, Fig. 1 — ATTN_M, D = 4, N = 31, H = 8, P = 5000,
init 1e-6, lr 1e-3, 6001 full-batch GD epochs). Every field is validated on construction and a bad
value raises ``ValueError("section.field: what is allowed, got X")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config.schema import OPTIMIZERS
from ..problems import icl as icl_data

MODELS = ("attn-m", "attn-s", "mlp-cubic")


def _posint(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name}: must be a positive integer, got {v!r}")


def _choice(name: str, v, allowed) -> None:
    if v not in allowed:
        raise ValueError(f"{name}: one of {', '.join(map(str, allowed))}, got {v!r}")


def _finite(name: str, v, lo=None, lo_open=False, hi=None) -> None:
    ok = (
        isinstance(v, (int, float, np.floating, np.integer))
        and not isinstance(v, bool)
        and np.isfinite(v)
    )
    if ok and lo is not None:
        ok = v > lo if lo_open else v >= lo
    if ok and hi is not None:
        ok = v <= hi
    if not ok:
        rng = ""
        if lo is not None:
            rng += f" {'>' if lo_open else '>='} {lo}"
        if hi is not None:
            rng += f" and <= {hi}"
        raise ValueError(f"{name}: must be a finite number{rng}, got {v!r}")


@dataclass(frozen=True)
class DataSettings:
    """The data set (spec §1). ``D`` token dimension, ``N`` context length (N+1 tokens per
    sequence), ``P`` training sequences; ``spectrum`` linear | white | power | explicit
    (``exponent`` for power, ``eigenvalues`` for explicit); ``rotate``, ``normalize_trace``,
    ``center``, ``whiten`` as the reference code; ``icl_fraction`` in [0, 1]; ``n_test`` sequences in
    each of the IC and IW test sets (0: none); ``population``: train on the population moments
    (needs ``model.reduced``); ``from_file``: an .npz data set (x, y, optional test arrays);
    ``save``: ask the writer to store the data set; ``seed``: None → the run's seed."""

    D: int = 4
    N: int = 31
    P: int = 5000
    spectrum: str = "linear"
    exponent: float = 1.0
    eigenvalues: tuple[float, ...] = ()
    rotate: bool = True
    normalize_trace: bool = True
    center: bool = True
    whiten: bool = True
    icl_fraction: float = 1.0
    n_test: int = 0
    population: bool = False
    from_file: str | None = None
    save: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        _posint("data.D", self.D)
        _posint("data.N", self.N)
        _posint("data.P", self.P)
        _choice("data.spectrum", self.spectrum, icl_data.SPECTRA)
        _finite("data.exponent", self.exponent)
        if self.spectrum == "explicit":
            icl_data.spectrum_eigenvalues(self.D, "explicit", values=self.eigenvalues)
        _finite("data.icl_fraction", self.icl_fraction, 0.0, hi=1.0)
        if (
            isinstance(self.n_test, bool)
            or not isinstance(self.n_test, (int, np.integer))
            or self.n_test < 0
        ):
            raise ValueError(f"data.n_test: must be an integer >= 0, got {self.n_test!r}")
        if self.population and self.from_file:
            raise ValueError(
                f"data.population: cannot be combined with data.from_file = {self.from_file!r}"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, (int, np.integer))
            or self.seed < 0
        ):
            raise ValueError(f"data.seed: must be an integer >= 0, got {self.seed!r}")


@dataclass(frozen=True)
class ModelSettings:
    """The model (spec §2). ``name`` attn-m | attn-s | mlp-cubic; ``H`` heads (hidden units for
    mlp-cubic); ``R`` key/query rank (attn-s); ``softmax`` (attention models);
    ``attention_scale`` "N" (ρ = N, paper) | "1" (ρ = 1, reference code); ``loss`` "last" |
    "cumulative" (mean over prefix lengths n = 1..N of the error predicting token n+1);
    ``reduced``: sufficient-statistics path (spec §3, linear models); ``ic_only``: hold the
    in-weight blocks 𝐯_i, 𝐮_i (scalar key entries for attn-s) at zero in the full model."""

    name: str = "attn-m"
    H: int = 8
    R: int = 1
    softmax: bool = False
    attention_scale: str = "N"
    loss: str = "last"
    reduced: bool = False
    ic_only: bool = False

    def __post_init__(self) -> None:
        _choice("model.name", self.name, MODELS)
        _posint("model.H", self.H)
        _posint("model.R", self.R)
        _choice("model.attention_scale", self.attention_scale, ("N", "1"))
        _choice("model.loss", self.loss, ("last", "cumulative"))
        if self.softmax and self.name == "mlp-cubic":
            raise ValueError("model.softmax: only for attn-m and attn-s, got true with mlp-cubic")
        if self.softmax and self.reduced:
            raise ValueError(
                "model.reduced: the reduced path exists for linear models only, got true with softmax"
            )


@dataclass(frozen=True)
class InitSettings:
    """Initial weights: ``scheme`` "paper" | "reference" (spec §2), ``scale`` (std), or
    ``from_file`` (.npz with the paper-layout arrays W_V, W_KQ | W_V, W_K, W_Q | W1, w2);
    ``seed``: None → the run's seed."""

    scheme: str = "reference"
    scale: float = 1e-6
    from_file: str | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        _choice("init.scheme", self.scheme, ("paper", "reference"))
        _finite("init.scale", self.scale, 0.0)


@dataclass(frozen=True)
class OptimSettings:
    """Optimiser: ``name`` gd | sgd | adam | adamw, ``lr`` (η; paper time t/τ = 2η·step),
    ``batch_size`` (sgd; None = full batch), ``momentum`` (sgd), ``beta1``, ``beta2``, ``eps``,
    ``weight_decay`` (adam: L2 in the gradient; adamw: decoupled)."""

    name: str = "gd"
    lr: float = 1e-3
    batch_size: int | None = None
    momentum: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _choice("optim.name", self.name, OPTIMIZERS)
        _finite("optim.lr", self.lr, 0.0, lo_open=True)
        if self.batch_size is not None:
            _posint("optim.batch_size", self.batch_size)
        _finite("optim.momentum", self.momentum, 0.0, hi=0.999999)
        _finite("optim.beta1", self.beta1, 0.0, hi=0.999999)
        _finite("optim.beta2", self.beta2, 0.0, hi=0.999999)
        _finite("optim.eps", self.eps, 0.0, lo_open=True)
        _finite("optim.weight_decay", self.weight_decay, 0.0)


@dataclass(frozen=True)
class ScheduleSettings:
    """``epochs``: optimiser updates (full batch: epochs); saves at steps 0, ``save_every``, … and
    at ``epochs`` (the weights after that many updates), or at ``save_steps`` when given."""

    epochs: int = 6001
    save_every: int = 10
    save_steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _posint("schedule.epochs", self.epochs)
        _posint("schedule.save_every", self.save_every)
        for s in self.save_steps:
            if (
                isinstance(s, bool)
                or not isinstance(s, (int, np.integer))
                or not 0 <= s <= self.epochs
            ):
                raise ValueError(f"schedule.save_steps: integers in [0, {self.epochs}], got {s!r}")

    def steps(self) -> np.ndarray:
        if self.save_steps:
            return np.unique(np.asarray(self.save_steps, dtype=np.int64))
        s = np.arange(0, self.epochs + 1, self.save_every, dtype=np.int64)
        return np.unique(np.append(s, self.epochs))


@dataclass(frozen=True)
class OutputSettings:
    """``checkpoint_every``: the resume state is written at the first save after this many seconds
    (a number or "60s") or optimiser steps ("500 steps") since the last one; 0 = at every save."""

    checkpoint_every: float | str = 60.0

    def __post_init__(self) -> None:
        from ..config.schema import parse_every

        parse_every(self.checkpoint_every, "output.checkpoint_every")


@dataclass(frozen=True)
class ICLSettings:
    """One ICL run: data, model, init, optimiser, schedule and the run's ``seed``."""

    data: DataSettings = field(default_factory=DataSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    init: InitSettings = field(default_factory=InitSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    seed: int = 0
    output: OutputSettings = field(default_factory=OutputSettings)

    def __post_init__(self) -> None:
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, (int, np.integer))
            or self.seed < 0
        ):
            raise ValueError(f"seed: must be an integer >= 0, got {self.seed!r}")
        m, d = self.model, self.data
        if m.name == "attn-s":
            if m.R > d.D:
                raise ValueError(f"model.R: must be <= data.D = {d.D}, got {m.R}")
            if m.H * m.R < d.D:
                raise ValueError(
                    f"model.H: H*R must be >= data.D = {d.D} for attn-s, got H*R = {m.H * m.R}"
                )
        if d.population and not m.reduced:
            raise ValueError("data.population: needs model.reduced = true, got reduced = false")
        if self.optim.batch_size is not None and not d.population and self.optim.batch_size > d.P:
            raise ValueError(
                f"optim.batch_size: must be <= data.P = {d.P}, got {self.optim.batch_size}"
            )


def build_model(settings: ICLSettings, D: int | None = None, N: int | None = None):
    """The model object for ``settings`` (D, N override the data section, e.g. from a file)."""
    from .attn_m import AttnM
    from .attn_s import AttnS
    from .mlp_cubic import MLPCubic

    m = settings.model
    D = settings.data.D if D is None else D
    N = settings.data.N if N is None else N
    kw = dict(
        softmax=m.softmax,
        attention_scale=m.attention_scale,
        loss=m.loss,
        reduced=m.reduced,
        ic_only=m.ic_only,
    )
    if m.name == "attn-m":
        return AttnM(D, m.H, N, **kw)
    if m.name == "attn-s":
        return AttnS(D, m.H, N, R=m.R, **kw)
    return MLPCubic(D, m.H, N, **kw)


def load_data(settings: ICLSettings) -> icl_data.ICLData:
    """The data set of ``settings`` (generated from the seed or read from ``data.from_file``)."""
    d = settings.data
    if d.from_file:
        return icl_data.load_npz(d.from_file)
    return icl_data.generate(
        d.D, d.N, d.P, spectrum=d.spectrum, exponent=d.exponent, eigenvalues=d.eigenvalues,
        rotate=d.rotate, normalize_trace=d.normalize_trace, center=d.center, whiten=d.whiten,
        icl_fraction=d.icl_fraction, n_test=d.n_test, seed=settings.seed if d.seed is None else d.seed,
    )  # fmt: skip


def theory_series(
    model, eigvals: np.ndarray, eigvecs: np.ndarray, settings: ICLSettings, time: np.ndarray
) -> dict:
    """The matching theory: plateau levels L(M_m), L*, Γ* (paper units) and, for attn-m/mlp-cubic
    with Λ ∝ I and the last-token loss, the Eq. 10 σ(t) and loss on the saved times."""
    from .attn_m import theory as tm

    N = model.N
    out = {
        "plateau_losses": tm.plateau_losses(eigvals, N),
        "L_star": np.array(tm.loss_star(eigvals, N)),
        "Gamma_star": tm.gamma_star(eigvals, eigvecs, N),
        "eigvals": np.asarray(eigvals, dtype=np.float64),
    }
    lam = np.asarray(eigvals)
    if (
        model.name in ("attn-m", "mlp-cubic")
        and model.loss == "last"
        and np.allclose(lam, lam[0], rtol=1e-12)
    ):
        a0 = tm.eq10_a0_random(model.H, settings.init.scale)
        if a0 > 0:
            sig = tm.eq10_sigma(time, float(lam[0]), model.D, N, a0, model.kappa)
            out["eq10_sigma"] = sig
            out["eq10_loss"] = tm.eq10_loss(sig, float(lam[0]), model.D, N)
    return out
