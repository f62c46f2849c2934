"""Config of trained linear self-attention on sampled MSFR sequences (``model = "msfr-attn"``).

TOML layout::

    model = "msfr-attn"
    seed = 0
    [task]       the MSFR task table (models/msfr/config.py TaskSection; n_samples must be finite)
    [init]       balanced | random, scale σ0 (models/msfr/config.py InitSection)
    [data]       feature_noise, tau, n_test, save
    [attention]  kq, rank, softmax, embedding
    [optim]      name, lr, batch_size, weight_decay, beta1, beta2, eps, momentum
    [schedule]   epochs, n_saves, save_steps
    [theory]     compare
    [adapt]      factors (in-context adaptation: test on sequences of strength c·Λ_s)
    [output]     track, save_weights
"""

from __future__ import annotations

from dataclasses import dataclass

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
    like,
    number,
    numbers,
)
from ..msfr import config as msfr
from ..msfr.config import InitSection


@dataclass(frozen=True)
class DataSection(Section, prefix="data."):
    """[data]: the sampled sequences (docs/theory.md, MSFR)."""

    feature_noise: float = number(
        0.0,
        0.0,
        1e3,
        help="σ of N(0, σ²) noise on every off-task feature coordinate (dense: N_s coordinates a token, the model reads the first model_size)",
    )
    tau: float = number(
        0.0,
        0.0,
        1e3,
        help="source/capacity spectrum ω_k = k^-τ, k = 1 + ((c − s) mod N_s), on feature coordinate c of a task-s token (docs/theory.md, App. H.1); 0 = off",
    )
    n_test: int = integer(
        10_000,
        1,
        10**8,
        help="held-out sequences, used where the population loss has no closed form",
    )
    save: bool = flag(
        False, help="store the training sequences (task, offset, x) in the output file"
    )


@dataclass(frozen=True)
class AttentionSection(Section, prefix="attention."):
    """[attention]: the model variant."""

    kq: str = choice("merged", ("merged", "separate"), help="W_KQ, or W_Kᵀ W_Q of rank `rank`")
    rank: int = integer(1, 1, 4096, help="rows r of W_K and W_Q (kq = 'separate')")
    softmax: bool = flag(False, help="softmax over the ψ_s + 1 attention scores")
    embedding: str = choice(
        "block",
        ("block", "shared"),
        help="block: an [x, y] pair per task; shared: one common label coordinate",
    )
    constrained: bool = flag(
        False,
        help="hold v_{s;s} = w_{s;N+1} = 0 (the authors' constrained model: f = ψΛ v_y w_x, adapts exactly, f̃ = Λ̃); block, merged, linear, sparse only",
    )


@dataclass(frozen=True)
class OptimSection(Section, prefix="optim."):
    """[optim]: drive/optim.py optimisers."""

    name: str = common.optimizer()
    lr: float = number(1e-2, 0.0, 1e6, lo_open=True, help="learning rate η (gd: t = η·step)")
    batch_size: int = integer(0, 0, 10**12, help="sequences per minibatch; 0 = full batch")
    weight_decay: float = number(0.0, 0.0, 1e3, help="adam: L2, adamw: decoupled decay λ")
    beta1: float = common.beta1()
    beta2: float = common.beta2()
    eps: float = number(1e-8, 0.0, 1.0, lo_open=True, help="adam ε")
    momentum: float = common.momentum()


@dataclass(frozen=True)
class ScheduleSection(Section, prefix="schedule."):
    """[schedule]: how long, and when to record."""

    epochs: int = integer(1000, 1, 10**10, help="optimiser steps")
    n_saves: int = integer(
        64, 1, 10**6, help="recorded steps, log-spaced in 1..epochs (plus step 0)"
    )
    save_steps: tuple = integers((), 0, help="explicit recorded steps (overrides n_saves)")


@dataclass(frozen=True)
class TheorySection(Section, prefix="theory."):
    """[theory]: comparison curves of the same configuration (block, Rademacher H)."""

    compare: bool = flag(
        True,
        help="write /theory/loss/test (closed form, exact level) and /ode/loss/test (msfr-core gd map, t = η·step)",
    )


@dataclass(frozen=True)
class AdaptSection(Section, prefix="adapt."):
    """[adapt]: in-context adaptation (spec msfr.md §2): the trained weights tested on sequences of
    task s whose context tokens carry another strength Λ̃_s = c·Λ_s (query target Λ̃_s x_q)."""

    factors: tuple = numbers(
        (),
        0.0,
        1e6,
        lo_open=True,
        help="strength factors c (Λ̃_s = c·Λ_s); each streams /adapt/loss/test and /adapt/tasks/f beside the formula Λ(1 + Λ̃Λ)²/(1 + Λ²)²",
    )


@dataclass(frozen=True)
class OutputSection(Section, prefix="output."):
    """[output]: what is stored besides the losses."""

    track: tuple = common.track("tasks s whose f_s(t) are stored; [] = 1, 3, 10, 30, … ≤ D")
    save_weights: bool = flag(
        True,
        help="store the final weights: named arrays /params/weights/* and the flat vector /params/theta",
    )
    checkpoint_every: float | str = common.checkpoint_every(
        'resume state (weights, optimiser state) written to /checkpoint at a save step every this many seconds (60, "60s") or optimiser steps ("100 steps"); 0 = at every save; "off" = only when a signal stops the run'
    )
    keep_checkpoint: bool = common.keep_checkpoint()


@dataclass(frozen=True)
class TaskSection(msfr.TaskSection):
    """[task]: the MSFR task table (docs/theory.md, MSFR), sampled: 1000 task types and N = 10 000 training
    sequences by default (n_samples must be finite)."""

    n_tasks: int = like(msfr.TaskSection, "n_tasks", 1000)
    n_samples: float | str = like(
        msfr.TaskSection,
        "n_samples",
        10_000.0,
        extra=(),
        help="training sequences N (finite: msfr-attn trains on sampled sequences)",
    )


@dataclass(frozen=True)
class MsfrAttnConfig(Section):
    """A whole msfr-attn run."""

    model: str = common.model_key("msfr-attn")
    seed: int = common.seed("seed of every random draw (counts, data, init, minibatches)")
    device: str = common.device("where the kernels run (msfr-attn: cpu only; docs/cuda.md)")
    task: TaskSection = TaskSection()
    init: InitSection = InitSection()
    data: DataSection = DataSection()
    attention: AttentionSection = AttentionSection()
    optim: OptimSection = OptimSection()
    schedule: ScheduleSection = ScheduleSection()
    theory: TheorySection = TheorySection()
    adapt: AdaptSection = AdaptSection()
    output: OutputSection = OutputSection()

    def check(self) -> None:
        check_supported(self)
        if self.data.feature_noise > 0 and self.data.tau > 0:
            raise ConfigError("data.tau: choose feature_noise or tau, not both")
        dense = self.data.feature_noise > 0 or self.data.tau > 0
        a = self.attention
        if a.constrained and (a.embedding != "block" or a.kq != "merged" or a.softmax or dense):
            raise ConfigError(
                "attention.constrained: needs attention.embedding = 'block', kq = 'merged', softmax = false and no data.feature_noise/tau"
            )
        if self.adapt.factors and dense:
            raise ConfigError(
                "adapt.factors: needs exact sparse features (no data.feature_noise or data.tau)"
            )
        if self.adapt.factors and a.softmax and self.task.x_dist != "rademacher":
            raise ConfigError(
                "adapt.factors: softmax attention is evaluated exactly only for task.x_dist = 'rademacher'"
            )
        if self.optim.batch_size > int(float(self.task.n_samples)):
            raise ConfigError(
                f"optim.batch_size: must be ≤ task.n_samples ({int(float(self.task.n_samples))}), got {self.optim.batch_size}"
            )
        common.check_save_steps(self.schedule, name_step=False)
        common.check_track(self)
        _check_memory(self)


def mean_tokens(task) -> float:
    """E[ψ_s + 1] under P(s) ∝ s^-α: exact over the first 2^20 tasks, the rest by a geometric
    quadrature (midpoint of 4096 log-spaced bins, weighted by the integers each holds). With
    ``task.table`` or a named family: streamed over its rows, weighted by its counts when it has them."""
    from ..msfr.task_families import FamilySource, uses_family

    if task.table is not None or uses_family(task):
        from ..msfr.task_table import open_table

        tab = open_table(task.table) if task.table is not None else FamilySource(task)
        num = den = 0.0
        for a in range(0, tab.n, 1 << 18):
            cols = tab.read(a, min(a + (1 << 18), tab.n))
            wt = cols["counts"] if tab.has_counts else cols["weight"]
            num += float(np.sum(wt * (cols["psi"] + 1)))
            den += float(np.sum(wt))
        return num / den if den > 0 else 1.0
    n = task.n_tasks
    head = np.arange(1, min(n, 2**20) + 1, dtype=np.float64)
    s, w = head, np.ones_like(head)
    if n > 2**20:
        edges = np.unique(np.floor(np.geomspace(2**20 + 1, n + 1, 4097)))
        mid = np.sqrt(edges[:-1] * edges[1:])
        s, w = np.concatenate([head, mid]), np.concatenate([w, np.diff(edges)])
    p = w * np.exp(-task.alpha * np.log(s))
    psi = np.maximum(task.psi_min, np.floor(task.psi0 * np.exp(-task.beta * np.log(s)) + 0.5))
    return float((p * (psi + 1)).sum() / p.sum())


def bytes_needed(cfg: MsfrAttnConfig) -> tuple[float, float, float, float]:
    """Estimated peak memory of an msfr-attn run as (training sequences, test sequences, task
    tables, weights and process):
    4-byte tokens (times n_tasks with feature noise) plus 16 bytes of index per sequence (and, for
    sparse linear attention, each sequence's stored S2 and query, 16 bytes); per task
    the table, counts and theory (≈ 12 float64) and the weights with their gradient, optimiser
    state, checkpoints and comparison (≈ 12 copies); the process itself (256 MiB)."""
    t, a = cfg.task, cfg.attention
    dense = cfg.data.feature_noise > 0 or cfg.data.tau > 0
    per_token = 6.0 * (1 + (t.n_tasks if dense else 0))  # float32 and temporaries
    tokens = mean_tokens(t)
    n = float(t.n_samples)
    r = a.rank if a.kq == "separate" else 1
    d_tok = t.d + 1 if a.embedding == "shared" else 2 * t.d
    n_params = d_tok * (1 + t.d) if dense else (d_tok + t.d) * (r + 1) + 2 * t.d
    per = tokens * per_token + 64  # task, length, offset and their temporaries
    sums = 0.0 if dense or a.softmax else 16.0  # S2 and q (float64) of each sequence
    return (
        n * (per + sums),
        cfg.data.n_test * (per + sums),
        8.0 * 12 * t.n_tasks,
        8.0 * 12 * n_params + 384 * 2**20,
    )


def _check_memory(cfg: MsfrAttnConfig) -> None:
    t = cfg.task
    terms = dict(
        zip(
            ("task.n_samples", "data.n_test", "task.n_tasks", "task.model_size"),
            bytes_needed(cfg),
            strict=True,
        )
    )
    field = max(terms, key=terms.__getitem__)
    what, fix = {
        "task.n_samples": (f"task.n_samples = {float(t.n_samples):g} training sequences", "lower task.n_samples (or task.psi0)"),
        "data.n_test": (f"data.n_test = {cfg.data.n_test} test sequences", "lower data.n_test"),
        "task.n_tasks": (f"task.n_tasks = {t.n_tasks} task types", "lower task.n_tasks"),
        "task.model_size": (f"D = {t.d} represented tasks", "lower task.model_size or task.n_tasks"),
    }[field]  # fmt: skip
    check_memory(sum(terms.values()), field, f"{what} (tokens, tables, weights)", fix)
