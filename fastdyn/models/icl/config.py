"""Config of the in-context regression models (``model = "attn-m" | "attn-s" | "mlp-cubic"``).

TOML layout (defaults: docs/theory.md, ICL, Fig. 1)::

    model = "attn-m"
    seed = 0
    [data]          D, N, P, spectrum, exponent, eigenvalues, rotate, normalize_trace, center,
                    whiten, icl_fraction, n_test, population, from_file, save, seed
    [attention]     H, R, softmax, attention_scale, loss, reduced, ic_only
    [init]          scheme, scale, from_file, seed
    [optim]         name, lr, batch_size, momentum, beta1, beta2, eps, weight_decay
    [schedule]      epochs, save_every, save_steps
    [output]        checkpoint_every (seconds, "60s", or "<n> steps"; 0 = at every save),
                    keep_checkpoint, diagnostics, snapshots

:class:`IclConfig` is the whole file; :attr:`IclConfig.settings` is the same run as the
:class:`ICLSettings` that the models and ``run_icl`` take (its ``model`` section is ``[attention]``
plus the model's name: TOML cannot have both ``model = "…"`` and a ``[model]`` table). Every
section is a :class:`~fastdyn.config.schema.Section`, so building one directly in Python checks it
with the same rules and one-line errors, named as in the TOML (``attention.H: …``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ...config import common
from ...config.device import check_supported
from ...config.schema import (
    ConfigError,
    Section,
    check_memory,
    choice,
    flag,
    integer,
    integers,
    number,
    numbers,
    regular_input,
    text,
)

#: the ICL models, by the name a config's ``model`` gives
MODELS = ("attn-m", "attn-s", "mlp-cubic")
#: the token covariance spectra of ``problem.py``
SPECTRA = ("linear", "white", "power", "explicit")
#: the help of ``seed`` (the run's, in the file and in :class:`ICLSettings`)
SEED_HELP = "seed of every random draw (data, init, minibatches)"


@dataclass(frozen=True)
class DataSettings(Section, prefix="data."):
    """[data]: the data set (spec icl.md §1)."""

    D: int = integer(4, 1, 10**6, help="token dimension: x ∈ R^D")
    N: int = integer(
        31, 1, 10**6, help="context length (N labelled tokens and a query)", units="tokens"
    )
    P: int = integer(5000, 1, 10**10, help="training sequences")
    spectrum: str = choice(
        "linear",
        SPECTRA,
        help="eigenvalues of Λ: linear ∝ D..1, white (all equal), power d^-exponent, explicit (data.eigenvalues)",
    )
    exponent: float = number(1.0, help="power spectrum: λ_d ∝ d^-exponent")
    eigenvalues: tuple[float, ...] = numbers(
        (), help="explicit spectrum: the D positive eigenvalues of Λ"
    )
    rotate: bool = flag(True, help="rotate Λ's eigenbasis by a random orthogonal matrix")
    normalize_trace: bool = flag(True, help="scale the eigenvalues to tr Λ = 1")
    center: bool = flag(True, help="centre the tokens across sequences (per position)")
    whiten: bool = flag(True, help="whiten the fresh task vectors (zero mean, identity covariance)")
    icl_fraction: float = number(
        1.0,
        0.0,
        1.0,
        help="fraction of sequences with a fresh task vector; the rest use the in-weight w_fix",
    )
    n_test: int = integer(
        0, 0, 10**10, help="sequences in each of the in-context and in-weight test sets; 0 = none"
    )
    population: bool = flag(False, help="train on the population moments (needs attention.reduced)")
    from_file: str | None = text(
        None, help=".npz data set (x, y, optional test arrays) instead of drawing one"
    )
    save: bool = flag(False, help="store the data set in the output file")
    seed: int | None = common.section_seed("the data draw")

    def check(self) -> None:
        if self.spectrum == "explicit" and (
            len(self.eigenvalues) != self.D or any(v <= 0 for v in self.eigenvalues)
        ):
            raise ConfigError(
                f"data.eigenvalues: need {self.D} positive finite numbers for spectrum 'explicit', got {list(self.eigenvalues)}"
            )
        if self.population and self.from_file:
            raise ConfigError(
                f"data.population: cannot be combined with data.from_file = {self.from_file!r}"
            )


@dataclass(frozen=True)
class AttentionSettings(Section, prefix="attention."):
    """[attention]: the architecture (spec icl.md §2); the model itself is the top-level ``model``."""

    H: int = integer(8, 1, 10**6, help="heads (hidden units for mlp-cubic)")
    R: int = integer(1, 1, 10**6, help="key/query rank of every head (attn-s)")
    softmax: bool = flag(False, help="softmax attention (attn-m, attn-s)")
    attention_scale: str = choice(
        "N", ("N", "1"), help='ρ in 1/ρ: "N" (the paper) or "1" (the reference code)'
    )
    loss: str = choice(
        "last",
        ("last", "cumulative"),
        help="last token, or the mean over prefixes n = 1..N of the error predicting token n+1",
    )
    reduced: bool = flag(False, help="sufficient-statistics path (linear models only)")
    ic_only: bool = flag(
        False, help="hold the in-weight blocks at zero (scalar key entries for attn-s)"
    )

    def check(self) -> None:
        if self.softmax and self.reduced:
            raise ConfigError(
                "attention.reduced: the reduced path exists for linear models only, got true with softmax"
            )


@dataclass(frozen=True)
class ModelSettings(AttentionSettings):
    """[attention] with the model's ``name`` (the top-level ``model`` of the TOML)."""

    name: str = choice("attn-m", MODELS, key="model", help="the model")

    def check(self) -> None:
        super().check()
        if self.softmax and self.name == "mlp-cubic":
            raise ConfigError(
                "attention.softmax: only for attn-m and attn-s, got true with mlp-cubic"
            )


@dataclass(frozen=True)
class InitSettings(Section, prefix="init."):
    """[init]: initial weights (spec icl.md §2)."""

    scheme: str = choice(
        "reference",
        ("paper", "reference"),
        help="reference: as the reference code, in-weight entries start at zero; paper: every trained entry drawn (mlp-cubic: the same under both)",
    )
    scale: float = number(1e-6, 0.0, help="standard deviation of the initial weights")
    from_file: str | None = text(
        None,
        help=".npz with the paper-layout arrays (W_V, W_KQ | W_V, W_K, W_Q | W1, w2) instead of drawing them",
    )
    seed: int | None = common.section_seed("the initial weights")
    match: str | None = text(
        None,
        help="'attn-m' (mlp-cubic only): start from the function of attn-m's draw with the same seed and scale (scheme 'reference': W1_i = vec(U_i), w2_i = v_i); omitted = the model's own draw",
    )

    def check(self) -> None:
        if self.match not in (None, "attn-m"):
            raise ConfigError(f"init.match: must be 'attn-m' or omitted, got {self.match!r}")


@dataclass(frozen=True)
class TestSettings(Section, prefix="test."):
    """[test]: evaluation beyond the training distribution."""

    context_lengths: tuple | None = integers(
        None,
        1,
        100_000,
        help="context lengths N′ at which the test loss is streamed (/loss/test_context); population runs exactly, others on data.n_test fresh in-context sequences per N′",
    )


@dataclass(frozen=True)
class OptimSettings(Section, prefix="optim."):
    """[optim]: drive/optim.py optimisers."""

    name: str = common.optimizer()
    lr: float = number(1e-3, 0.0, lo_open=True, help="learning rate η (paper time t/τ = 2η·step)")
    batch_size: int | None = integer(
        None, 1, 10**10, help="sgd, adam, adamw: sequences per minibatch; omitted = full batch"
    )
    momentum: float = common.momentum()
    beta1: float = common.beta1()
    beta2: float = common.beta2()
    eps: float = number(1e-8, 0.0, lo_open=True, help="adam ε")
    weight_decay: float = number(
        0.0, 0.0, help="adam: L2 in the gradient; adamw: decoupled decay λ"
    )


@dataclass(frozen=True)
class ScheduleSettings(Section, prefix="schedule."):
    """[schedule]: saves at steps 0, ``save_every``, … and at ``epochs`` (the weights after that
    many updates), or at ``save_steps`` when given."""

    epochs: int = integer(
        6001, 1, 10**12, help="optimiser updates (full batch: epochs)", units="steps"
    )
    save_every: int = integer(10, 1, 10**12, help="steps between saves", units="steps")
    save_steps: tuple[int, ...] = integers((), 0, help="explicit save steps (override save_every)")

    def check(self) -> None:
        common.check_save_steps(self)

    def steps(self) -> np.ndarray:
        """The save steps, increasing."""
        if self.save_steps:
            return np.unique(np.asarray(self.save_steps, dtype=np.int64))
        s = np.arange(0, self.epochs + 1, self.save_every, dtype=np.int64)
        return np.unique(np.append(s, self.epochs))

    @property
    def save_count(self) -> int:
        """How many saves :meth:`steps` makes, at most (counted, not built: what the memory
        estimate charges for)."""
        return len(self.save_steps) or self.epochs // self.save_every + 2


@dataclass(frozen=True)
class OutputSettings(Section, prefix="output."):
    """[output]: resume state and the opt-in streamed diagnostics and weight snapshots."""

    checkpoint_every: float | str = common.checkpoint_every(
        'resume state written at the first save this many seconds (60, "60s") or optimiser steps ("500 steps") after the last one; 0 = at every save; "off" = only when a signal stops the run'
    )
    keep_checkpoint: bool = common.keep_checkpoint()
    diagnostics: bool | None = flag(
        None,
        help="stream head alignment (/diagnostics/head_cosine*: pairwise cosine of the heads' functions v_i U_i) and the in-weight norms |𝐯_i|, |𝐮_i| (/diagnostics/in_weight_norm_*) at every save; omitted = false",
    )
    snapshots: bool | None = flag(
        None,
        help="store the weights in paper layout at every save (/params/snapshots/<name>, as /params/final/<name>); omitted = false (large: n_params per save)",
    )


def _check_run(
    model: ModelSettings,
    data: DataSettings,
    optim: OptimSettings,
    init: InitSettings | None = None,
    test: Any = None,
    schedule: Any = None,
) -> None:
    """Rules across sections of one ICL run, on the sizes of the data actually used: with
    ``data.from_file`` those of the file's ``x`` (P, N+1, D), not the ``data`` defaults."""
    D, P, where = data.D, data.P, ""
    if init is not None and init.from_file:
        regular_input(init.from_file, "init.from_file")
    if data.from_file:
        from ...config.npz_shape import npz_array_shape

        regular_input(data.from_file, "data.from_file")
        shape = npz_array_shape(data.from_file, "x")
        if shape is not None and len(shape) == 3:
            P, D = shape[0], shape[2]
            where = f" (from data.from_file {data.from_file!r})"
    if model.name == "attn-s":
        if model.R > D:
            raise ConfigError(
                f"attention.R: must be ≤ data.D = {D}{where} for attn-s, got {model.R}"
            )
        if model.H * model.R < D:
            raise ConfigError(
                f"attention.H: H*R must be ≥ data.D = {D}{where} for attn-s, got H*R = {model.H * model.R}"
            )
    if data.population and not model.reduced:
        raise ConfigError("data.population: needs attention.reduced = true, got reduced = false")
    if init is not None and init.match is not None and model.name != "mlp-cubic":
        raise ConfigError(
            f"init.match: only for model = 'mlp-cubic' (its start from attn-m's draw), got model = {model.name!r}"
        )
    if init is not None and init.match is not None and init.from_file:
        raise ConfigError("init.match: cannot be combined with init.from_file")
    if optim.batch_size is not None and optim.name == "gd":
        raise ConfigError(
            "optim.batch_size: not with optim.name = 'gd' (full-batch gradient descent); use 'sgd', 'adam' or 'adamw' for minibatches, or omit it"
        )
    if optim.batch_size is not None and model.reduced:
        raise ConfigError(
            "optim.batch_size: not with attention.reduced = true (its loss comes from the data's moments, always the full batch); omit it, or set attention.reduced = false"
        )
    if optim.batch_size is not None and not data.population and optim.batch_size > P:
        raise ConfigError(
            f"optim.batch_size: must be ≤ data.P = {P}{where}, got {optim.batch_size}"
        )
    _check_memory(model, _file_sizes(data, P, D, where), optim, test, schedule)


def _file_sizes(data: DataSettings, P: int, D: int, where: str) -> Any:
    """``data`` as the memory estimate sees it: with ``data.from_file``, the file's P, N and D
    (read from its header, never its contents), counted like a drawn data set."""
    if not where:
        return data
    from types import SimpleNamespace

    from ...config.npz_shape import npz_array_shape

    shape = npz_array_shape(data.from_file, "x")
    values = {f.name: getattr(data, f.name) for f in fields(data)}
    new = {"P": P, "D": D, "N": shape[1] - 1, "from_file": None, "source": where.strip()}
    return SimpleNamespace(**(values | new))


#: the cumulative linear-attention loss reads every prefix's packed S_n, x_n and y_n prepared once
#: (:func:`prefix_moment_bytes`) up to this many bytes per data set; a larger set keeps only its
#: tokens and the kernel rebuilds the prefix sums each step (``fastdyn.models.icl.attn_m.kernels``)
PREFIX_BYTES_MAX = 2**30


def prefix_moment_bytes(P: int, N: int, D: int) -> float:
    """Bytes of the prepared prefix moments of the cumulative linear-attention loss: P·N rows of
    packed S_n ((D+1)(D+2)/2), x_n (D) and y_n, float64."""
    return 8.0 * P * N * ((D + 1) * (D + 2) / 2 + D + 1)


#: the largest NQ = NP·D (folded linear-attention weights) whose data moments are taken: G then
#: takes ≤ 8 MB and the partials of one pass of MOMENT_BLOCKS_AT_ONCE blocks ≤ 134 MB
MOMENT_NQ_MAX = 1024
#: blocks of rows whose partial moments are held at once while the moments are taken
MOMENT_BLOCKS_AT_ONCE = 16


#: a full-batch loss from the moments below MOMENT_FLOOR × (its y2 term) is recomputed from the
#: rows: the moment form's round-off is a few ulp of y2, so near an exact fit (a loss ≲ 1e-16 y2)
#: it would stall at that floor or turn negative; above this floor its relative error is ≲ 1e-9
MOMENT_FLOOR = 1e-6


def moments_pay(rows: int, nq: int) -> bool:
    """Whether a full-batch loss that is quadratic in ``nq`` numbers is cheaper from the set's
    moments than by its ``rows`` rows: nq ≤ MOMENT_NQ_MAX and a step's O(nq²) at most an eighth
    of the per-row O(rows·nq) (nq ≤ rows/4; the moments cost ≈ nq/4 per-row steps once)."""
    return nq <= MOMENT_NQ_MAX and 4 * nq <= rows


def uses_moments(rows: int, D: int) -> bool:
    """Whether full-batch linear attention on a set of ``rows`` rows (samples, or prefix rows)
    takes its loss and gradient from the set's moments (``models.icl.attn_m.kernels``, "the data's
    moments"): :func:`moments_pay` for its NQ = (D+1)(D+2)/2·D folded weights."""
    return moments_pay(rows, (D + 1) * (D + 2) // 2 * D)


def moment_bytes(rows: int, D: int) -> float:
    """Bytes of a set's moments (G, b) when it uses them, and of the partials while they are
    taken (0 when it does not)."""
    nq = (D + 1) * (D + 2) // 2 * D
    return 8.0 * (nq * nq + nq) * (1 + MOMENT_BLOCKS_AT_ONCE) if uses_moments(rows, D) else 0.0


def _prefix_bytes(M: int, N: int, D: int) -> float:
    """What the cumulative linear kernel prepares for a set of M samples (0 above the limit):
    the prefix moments and the index of their rows (int64, kept for full-set steps)."""
    b = prefix_moment_bytes(M, N, D)
    return b + 8.0 * M * N if b <= PREFIX_BYTES_MAX else 0.0


#: the defaults against which a size field counts as "large" when naming the one to lower
_TYPICAL = {
    "data.P": 5000,
    "data.N": 31,
    "data.D": 4,
    "data.n_test": 1000,
    "attention.H": 8,
    "attention.R": 1,
    "test.context_lengths": 31,  # the sum of the lengths
    "schedule.save_every": 10**6,  # the number of saves it makes
}


def bytes_needed(
    model: ModelSettings,
    data: DataSettings,
    optim: OptimSettings,
    test: Any = None,
    schedule: Any = None,
) -> list[tuple[float, tuple[str, ...]]]:
    """Estimated peak memory of an ICL run as (bytes, the fields it grows with) terms: the data
    sets (tokens, labels and the draw's temporaries), what the kernels prepare from them (packed
    X Xᵀ, the cumulative loss's prefix moments up to :data:`PREFIX_BYTES_MAX`, cubic features,
    sufficient statistics), per-block partial sums, the weights with their gradient, optimiser
    moments, checkpoint copies and paper layout, and the D×D matrices (Λ, its rotation, Γ, Γ*);
    with ``test`` the test sets at ``test.context_lengths`` (all kept prepared, the largest drawn at
    once); with ``schedule`` the save-step arrays (8 bytes per save, a few copies). Pass a
    ``data.from_file`` run through :func:`_file_sizes` first."""
    D, N, P, H, R, nt = data.D, data.N, data.P, model.H, model.R, data.n_test
    T = N if model.loss == "cumulative" else 1
    K = D * D
    f8 = 8.0
    terms: list[tuple[float, tuple[str, ...]]] = []
    # (samples, field, copies): the training set, and the two test sets (in- and out-of-weight),
    # each prepared on its own (the prefix-row limit applies per set)
    sets = [] if data.population or data.from_file else [(P, "data.P", 1), (nt, "data.n_test", 2)]
    if data.population:
        terms.append((3 * f8 * K * K, ("data.D",)))  # E[z zᵀ] (D², D²), its kron temporary, the sum
    features = model.name == "mlp-cubic" or model.reduced
    for M, name, copies in sets:
        if M == 0:
            continue
        terms.append(
            (copies * f8 * M * (N + 1) * (4 * D + 2), (name, "data.N", "data.D"))
        )  # kept + draw temporaries
        if features:
            fields = (name, "data.N", "data.D") if T > 1 else (name, "data.D")
            terms.append((copies * f8 * M * T * (K + 1), fields))
            if name == "data.P":  # the training set's statistics (test sets keep their rows)
                terms.append((f8 * (K * K + K) * moments_pay(M * T, K), ("data.D",)))
        elif not model.softmax and model.loss == "last":
            terms.append((copies * f8 * M * ((D + 1) * (D + 2) / 2 + D + 1), (name, "data.D")))
            if name == "data.P":  # the training set's moments (test sets keep their rows)
                terms.append((moment_bytes(M, D), ("data.D",)))
        elif not model.softmax:
            terms.append((copies * _prefix_bytes(M, N, D), (name, "data.N", "data.D")))
            if name == "data.P" and _prefix_bytes(M, N, D):
                terms.append((moment_bytes(M * N, D), ("data.D",)))
    batch = optim.batch_size or P
    blocks = 0.0 if data.population else math.ceil(max(batch, nt) / 1024)
    if features:
        terms.append((f8 * (blocks + 2) * (1 + K + K * K), ("data.D",)))
    elif model.softmax:
        terms.append((f8 * blocks * (1 + H * (D + 1) ** 2), ("attention.H", "data.D")))
    else:  # the cumulative loss's blocks hold prefix rows (N per sample)
        rows_blocks = 0.0 if data.population else math.ceil(max(batch, nt) * T / 1024)
        terms.append((f8 * rows_blocks * (1 + (D + 1) * (D + 2) / 2 * D), ("data.D",)))
    if model.name == "attn-s":
        n_full = H * (D + 1) * (2 * R + 1) + H * (D + 1) * D  # θ blocks, paper layout, W^KᵀW^Q
        fields = ("attention.H", "attention.R", "data.D")
    elif model.name == "attn-m":
        n_full = H * (D + 1) ** 2
        fields = ("attention.H", "data.D")
    else:
        n_full = H * (K + 1)
        fields = ("attention.H", "data.D")
    terms.append((12 * f8 * n_full, fields))  # θ, grad, init std, moments, checkpoints, layout
    terms.append((10 * f8 * K, ("data.D",)))
    lengths = [int(n) for n in (getattr(test, "context_lengths", None) or ())]
    if lengths and not data.population:
        for n in lengths:  # each length's prepared test set stays for the whole run
            t = n if model.loss == "cumulative" else 1
            if features or model.softmax or model.loss != "cumulative":
                per = f8 * ((t * (K + 1)) if features else ((D + 1) * (D + 2) / 2 + D + 1))
                b = nt * per
            else:  # tokens kept, prefix moments prepared
                b = f8 * nt * (n + 1) * (D + 1) + _prefix_bytes(nt, n, D)
            terms.append((b, ("test.context_lengths", "data.n_test")))
        top = max(lengths)  # the tokens of one length, drawn and packed at once
        terms.append((f8 * nt * (top + 1) * (4 * D + 2), ("test.context_lengths", "data.n_test")))
    if schedule is not None:
        terms.append((4 * f8 * schedule.save_count, ("schedule.save_every",)))
    return terms


#: the process itself: Python, numpy, numba, h5py and the compiled kernels (measured ~150 MiB)
_PROCESS = 256 * 2**20


def _check_memory(
    model: ModelSettings, data: Any, optim: OptimSettings, test: Any = None, schedule: Any = None
) -> None:
    terms = bytes_needed(model, data, optim, test, schedule)
    need = _PROCESS + sum(b for b, _ in terms)
    _, fields = max(terms)
    lengths = tuple(getattr(test, "context_lengths", None) or ())
    saves = schedule.save_count if schedule is not None else 0
    value = {
        "data.P": data.P,
        "data.N": data.N,
        "data.D": data.D,
        "data.n_test": data.n_test,
        "attention.H": model.H,
        "attention.R": model.R,
        "test.context_lengths": sum(lengths),
        "schedule.save_every": saves,
    }
    source = getattr(data, "source", "")  # sizes read from data.from_file
    shown = value | {f: f"{value[f]} {source}" for f in ("data.P", "data.N", "data.D") if source}
    shown |= {
        "test.context_lengths": f"{len(lengths)} lengths up to {max(lengths, default=0)}",
        "schedule.save_every": f"{getattr(schedule, 'save_every', 0)} ({saves} saves)",
    }
    name = max(fields, key=lambda f: value[f] / _TYPICAL[f])
    others = sorted({f for _, fs in terms for f in fs if f != name and value[f] > _TYPICAL[f]})
    fix = "raise it or lower schedule.epochs" if name == "schedule.save_every" else f"lower {name}"
    check_memory(
        need, name, f"with {name} = {shown[name]} the data sets, prepared arrays and weights",
        fix + (f" (or {', '.join(others)})" if others else ""),
    )  # fmt: skip


@dataclass(frozen=True)
class ICLSettings(Section):
    """One ICL run as the models and ``run_icl`` take it: the sections, the model (``[attention]``
    plus the name) and the run's ``seed``."""

    data: DataSettings = DataSettings()
    model: ModelSettings = ModelSettings()
    init: InitSettings = InitSettings()
    optim: OptimSettings = OptimSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    seed: int = common.seed(SEED_HELP, hi=None)
    output: OutputSettings = OutputSettings()
    test: TestSettings = TestSettings()

    def check(self) -> None:
        _check_run(self.model, self.data, self.optim, self.init, self.test, self.schedule)


@dataclass(frozen=True)
class IclConfig(Section):
    """A whole ICL config file; :attr:`settings` is the run it describes."""

    model: str = choice("attn-m", MODELS, help="the model")
    seed: int = common.seed(SEED_HELP, hi=None)
    device: str = common.device("where the kernels run (cuda: attn-m, attn-s; docs/cuda.md)")
    data: DataSettings = DataSettings()
    attention: AttentionSettings = AttentionSettings()
    init: InitSettings = InitSettings()
    optim: OptimSettings = OptimSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    output: OutputSettings = OutputSettings()
    test: TestSettings = TestSettings()

    def check(self) -> None:
        if type(self.attention) is not AttentionSettings:
            raise ConfigError(
                "attention: must be an AttentionSettings (the model's name is the top-level `model`)"
            )
        _check_run(self.model_settings, self.data, self.optim, self.init, self.test, self.schedule)
        if self.test.context_lengths and not self.data.population and self.data.n_test == 0:
            raise ConfigError(
                "test.context_lengths: needs data.n_test > 0 (fresh in-context sequences per N′) or data.population = true"
            )
        check_supported(self)

    @property
    def model_settings(self) -> ModelSettings:
        """``[attention]`` with the model's name."""
        a = self.attention
        return ModelSettings(name=self.model, **{f.name: getattr(a, f.name) for f in fields(a)})

    @property
    def settings(self) -> ICLSettings:
        """The run as :class:`ICLSettings` (what ``run_icl`` and the models take)."""
        return ICLSettings(
            data=self.data, model=self.model_settings, init=self.init, optim=self.optim,
            schedule=self.schedule, seed=self.seed, output=self.output, test=self.test,
        )  # fmt: skip
