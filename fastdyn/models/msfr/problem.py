"""② The MSFR task table (docs/theory.md, MSFR), generated chunk by chunk from the seed.

Task s = 1..N_s has frequency P(s) = s^-α / Z, strength Λ_s = Λ0 s^-γ, context length
ψ_s = max(psi_min, ⌊ψ0 s^-β + ½⌋), training weight #_s/N (= P(s) when N = "inf"), and an initial
state (v0, w0) in its 2-dim [x, y] block. Only tasks s ≤ D (model size) are handed to kernels; the
constant losses of tasks beyond D are summed once by :meth:`MsfrProblem.tail_losses`.

Counts #_s ~ Multinomial(N, P) are drawn exactly and reproducibly in two levels: block totals
#_b ~ Multinomial(N, (P_b)) over fixed blocks of BLOCK tasks, then, within each block,
Multinomial(#_b, P(s)/P_b) from a stream keyed by (seed, block). Both levels are exact
(a multinomial aggregated over groups is multinomial; conditioned on group totals it is
multinomial within groups), and no draw depends on chunking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from ..._jit import PARALLEL, SERIAL
from ...config.schema import ConfigError
from ...problems import rng
from ...reduce import BLOCK, n_blocks
from .task_families import FamilySource, uses_family

INIT_BALANCED = 0
INIT_RANDOM = 1


def default_track(d: int) -> np.ndarray:
    """1, 3, 10, 30, 100, … (≤ D): tasks spread over the decades of s."""
    out = []
    k = 1
    while k <= d:
        out.append(k)
        if 3 * k <= d:
            out.append(3 * k)
        k *= 10
    return np.array(sorted(set(out)), dtype=np.int64)


@dataclass(frozen=True)
class TaskChunk:
    """Per-task arrays (structure of arrays) for tasks s = first+1 … first+n (1-based)."""

    first: int
    lam: np.ndarray
    psi: np.ndarray
    rate: np.ndarray
    wtest: np.ndarray
    v0x: np.ndarray
    v0y: np.ndarray
    w0x: np.ndarray
    w0y: np.ndarray

    @property
    def n(self) -> int:
        return self.lam.shape[0]

    def select(self, local: np.ndarray) -> TaskChunk:
        """The sub-table of the given local indices."""
        return TaskChunk(
            self.first,
            *(
                getattr(self, k)[local]
                for k in ("lam", "psi", "rate", "wtest", "v0x", "v0y", "w0x", "w0y")
            ),
        )


@njit(**PARALLEL)
def _block_prob_sums(n_tasks, alpha, out):
    """out[b] = Σ_{s in block b} s^-α, serial inside a block (deterministic)."""
    nb = out.shape[0]
    for b in prange(nb):
        lo = b * BLOCK
        hi = min(lo + BLOCK, n_tasks)
        acc = 0.0
        for i in range(lo, hi):
            acc += (i + 1.0) ** (-alpha)
        out[b] = acc


#: blocks from this task index on sum s^-x by Euler–Maclaurin instead of term by term (the terms
#: are smooth there: the remainder after the s^(-x-5) term is ~(x/s)^7 relative, below rounding)
EM_FROM = 2**20


def power_sums(lo: np.ndarray, hi: np.ndarray, x: float) -> np.ndarray:
    """Σ_{s=lo}^{hi} s^-x for integer ranges with lo ≥ :data:`EM_FROM` (vectorised), by
    Euler–Maclaurin: the integral (expm1/log1p, no cancellation), the end-point terms and the
    B2, B4, B6 corrections."""
    a = np.asarray(lo, dtype=np.float64)
    b = np.asarray(hi, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        r = np.log1p((b - a) / a)
        integral = (
            r * a ** (1.0 - x) if x == 1.0 else a ** (1.0 - x) * np.expm1((1.0 - x) * r) / (1.0 - x)
        )
        out = integral + 0.5 * (a**-x + b**-x)
        c = -x  # coefficient of the (2k-1)-th derivative of s^-x
        for k, bern in ((1, 1.0 / 6), (2, -1.0 / 30), (3, 1.0 / 42)):
            e = -x - (2 * k - 1)
            out = out + bern / math.factorial(2 * k) * c * (b**e - a**e)
            c *= (-x - 2 * k + 1) * (-x - 2 * k)
    return out


@njit(**SERIAL, inline="always")
def _pow(s, x):
    """s^x, and exactly 1 for x = 0 without calling libm's pow (which returns 1 for any s there, so
    the result is bit-identical; pow is most of the table's cost, and γ = β = 0 is the default)."""
    return 1.0 if x == 0.0 else s**x


@njit(**SERIAL, inline="always")
def _init_task(idx, lk, scheme, scale, seed):
    """(v0x, v0y, w0x, w0y) of task index ``idx`` (0-based) with strength ``lk``: balanced
    v0 = w0 = scale·(1, Λ)/√(1+Λ²), or random normals from the per-task init streams."""
    if scheme == INIT_BALANCED:
        nrm = 1.0 / math.sqrt(1.0 + lk * lk)
        a = scale * nrm
        b = scale * lk * nrm
        return a, b, a, b
    # np.int64(k): a literal k would compile rng.normal once per constant
    return (
        scale * rng.normal(seed, idx, rng.STREAM_INIT_V, np.int64(0)),
        scale * rng.normal(seed, idx, rng.STREAM_INIT_V, np.int64(1)),
        scale * rng.normal(seed, idx, rng.STREAM_INIT_W, np.int64(0)),
        scale * rng.normal(seed, idx, rng.STREAM_INIT_W, np.int64(1)),
    )


@njit(**PARALLEL)
def _fill(
    first,
    alpha,
    inv_z,
    lam0,
    gamma,
    psi0,
    beta,
    psi_min,
    scheme,
    scale,
    seed,
    lam,
    psi,
    wtest,
    v0x,
    v0y,
    w0x,
    w0y,
):
    n = lam.shape[0]
    for i in prange(n):
        s = first + i + 1.0
        p = _pow(s, -alpha) * inv_z
        wtest[i] = p
        lk = lam0 * _pow(s, -gamma)
        lam[i] = lk
        ps = math.floor(psi0 * _pow(s, -beta) + 0.5)
        psi[i] = max(float(psi_min), ps)
        v0x[i], v0y[i], w0x[i], w0y[i] = _init_task(first + i, lk, scheme, scale, seed)


@njit(**PARALLEL)
def _tail_partials(
    first, n, alpha, inv_z, lam0, gamma, counts, inv_n, use_counts, out_test, out_train
):
    """Per-block Σ P(s) Λ_s²/2 and Σ (#_s/N) Λ_s²/2 for tasks first+1..first+n (untrained, f = 0)."""
    nb = out_test.shape[0]
    for b in prange(nb):
        lo = b * BLOCK
        hi = min(lo + BLOCK, n)
        at = 0.0
        ar = 0.0
        for i in range(lo, hi):
            s = first + i + 1.0
            p = _pow(s, -alpha) * inv_z
            lk = lam0 * _pow(s, -gamma)
            at += 0.5 * p * lk * lk
            w = counts[i] * inv_n if use_counts else p
            ar += 0.5 * w * lk * lk
        out_test[b] = at
        out_train[b] = ar


@njit(**PARALLEL)
def _block_sums_of(w, out):
    """out[b] = Σ w in block b, serial inside a block (the order of :func:`_block_prob_sums`)."""
    n = w.shape[0]
    for b in prange(out.shape[0]):
        lo = b * BLOCK
        hi = min(lo + BLOCK, n)
        acc = 0.0
        for i in range(lo, hi):
            acc += w[i]
        out[b] = acc


@njit(**PARALLEL)
def _fill_cols(
    first, w, inv_z, strength, psi_col, scheme, scale, seed, lam, psi, wtest, v0x, v0y, w0x, w0y
):
    """:func:`_fill` from table columns (the same operations on the tabulated values)."""
    n = lam.shape[0]
    for i in prange(n):
        wtest[i] = w[i] * inv_z
        lk = strength[i]
        lam[i] = lk
        psi[i] = psi_col[i]
        v0x[i], v0y[i], w0x[i], w0y[i] = _init_task(first + i, lk, scheme, scale, seed)


@njit(**PARALLEL)
def _tail_partials_cols(w, strength, inv_z, counts, inv_n, use_counts, out_test, out_train):
    """:func:`_tail_partials` from table columns."""
    n = w.shape[0]
    for b in prange(out_test.shape[0]):
        lo = b * BLOCK
        hi = min(lo + BLOCK, n)
        at = 0.0
        ar = 0.0
        for i in range(lo, hi):
            p = w[i] * inv_z
            lk = strength[i]
            at += 0.5 * p * lk * lk
            c = counts[i] * inv_n if use_counts else p
            ar += 0.5 * c * lk * lk
        out_test[b] = at
        out_train[b] = ar


#: rows per pass over a task table (a multiple of BLOCK; bounds the memory of a pass)
TABLE_STEP = 256 * BLOCK


def check_columns(path: str, a: int, cols: dict) -> None:
    """One-line ConfigError naming ``task.table``, the column and the row (1-based) of the first
    bad value among rows a+1 … of ``cols``: weights finite ≥ 0, strengths finite > 0, ψ whole
    numbers in [1, 1e9], counts whole numbers ≥ 0."""
    from .task_table import err

    rules = {
        "weight": (lambda v: np.isfinite(v) & (v >= 0), "a finite number ≥ 0"),
        "strength": (lambda v: np.isfinite(v) & (v > 0), "a finite number > 0"),
        "psi": (
            lambda v: np.isfinite(v) & (v >= 1) & (v <= 1e9) & (v == np.floor(v)),
            "a whole number of tokens ≥ 1 and ≤ 1e9",
        ),
        "counts": (lambda v: np.isfinite(v) & (v >= 0) & (v == np.floor(v)), "a whole number ≥ 0"),
    }
    for name, v in cols.items():
        ok, what = rules[name]
        bad = np.flatnonzero(~ok(v))
        if bad.size:
            i = int(bad[0])
            raise err(path, f"column {name}, row {a + i + 1}: must be {what}, got {float(v[i])!r}")


class MsfrProblem:
    """The task table of one MSFR config, generated on demand in chunks of whole blocks."""

    def __init__(self, task, init, seed: int):
        self.task = task
        self.init = init
        self.seed = int(seed)
        self.n_tasks = int(task.n_tasks)
        self.d = int(task.d)
        self.source = None
        if getattr(task, "table", None) is not None:
            from .task_table import open_table

            self._init_table(open_table(task.table))
            return
        if uses_family(task):  # a named family: read like a table, its rows computed per chunk
            self._init_table(FamilySource(task, self.seed))
            return
        nb = n_blocks(self.n_tasks)
        near = min(nb, n_blocks(EM_FROM))  # blocks summed term by term
        self._block_p = np.zeros(nb)
        _block_prob_sums(min(self.n_tasks, near * BLOCK), float(task.alpha), self._block_p[:near])
        for g in range(near, nb, 2**16):  # bounded temporaries
            lo = np.arange(g, min(g + 2**16, nb), dtype=np.float64) * BLOCK
            self._block_p[g : g + len(lo)] = power_sums(
                lo + 1, np.minimum(lo + BLOCK, self.n_tasks), float(task.alpha)
            )
        self.z = float(_ordered_sum(self._block_p))
        self.finite_n = task.n_samples != "inf"
        self.n_samples = math.inf if not self.finite_n else int(float(task.n_samples))
        self._block_counts = None
        if self.finite_n:
            probs = self._block_p / self._block_p.sum()
            self._block_counts = rng.generator(self.seed, 7).multinomial(self.n_samples, probs)

    def _init_table(self, src) -> None:
        """One pass over ``task.table`` (or a named family's computed rows, ``src`` a
        :class:`~fastdyn.models.msfr.task_families.FamilySource`): check every value, sum the weights
        per block (the normaliser Z in the built-in's order) and, with a counts column, the
        counts per block."""
        from .task_table import err

        task = self.task
        self.source = src
        family = isinstance(src, FamilySource)
        if not family and src.n != self.n_tasks:
            raise err(
                task.table,
                f"has {src.n} rows but task.n_tasks = {self.n_tasks}; leave n_tasks out or set it to {src.n}",
            )
        nb = n_blocks(self.n_tasks)
        self._block_p = np.zeros(nb)
        block_c = np.zeros(nb, dtype=np.int64) if src.has_counts else None
        for a in range(0, self.n_tasks, TABLE_STEP):
            b = min(a + TABLE_STEP, self.n_tasks)
            cols = src.read(a, b)
            if family:
                src.check(a, cols)
            else:
                check_columns(task.table, a, cols)
            _block_sums_of(cols["weight"], self._block_p[a // BLOCK : n_blocks(b)])
            if block_c is not None:
                c = cols["counts"].astype(np.int64)
                block_c[a // BLOCK : n_blocks(b)] = np.add.reduceat(c, np.arange(0, b - a, BLOCK))
        self.z = float(_ordered_sum(self._block_p))
        if family and not (self.z > 0 and math.isfinite(self.z)):
            raise ConfigError(
                f"task.frequency_law: the weights of {src.path} sum to {self.z!r}; change its parameters"
            )
        if not self.z > 0 or not math.isfinite(self.z):
            raise err(
                task.table,
                f"column {src.weight_name}: weights must have a finite sum > 0, got {self.z!r}",
            )
        self.finite_n = src.has_counts or task.n_samples != "inf"
        self._block_counts = None
        if src.has_counts:
            self.n_samples = int(block_c.sum())
            if self.n_samples < 1:
                raise err(
                    task.table,
                    "column counts: sums to 0; the training set needs at least one sequence",
                )
            self._block_counts = block_c
        elif self.finite_n:
            self.n_samples = int(float(task.n_samples))
            probs = self._block_p / self._block_p.sum()
            self._block_counts = rng.generator(self.seed, 7).multinomial(self.n_samples, probs)
        else:
            self.n_samples = math.inf

    def weights(self, first: int, n: int) -> np.ndarray:
        """Unnormalised weights of tasks first+1..first+n (s^-α, or the table's or family's column)."""
        if self.source is not None:
            return self.source.read(first, first + n)["weight"]
        s = np.arange(first + 1, first + n + 1, dtype=np.float64)
        return s ** (-float(self.task.alpha))

    def lam_psi(self, first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(Λ_s, ψ_s as int64 tokens) of tasks first+1..first+n."""
        if self.source is not None:
            cols = self.source.read(first, first + n)
            return cols["strength"].copy(), cols["psi"].astype(np.int64)
        t = self.task
        s = np.arange(first + 1, first + n + 1, dtype=np.float64)
        lam = float(t.strength0) * s ** (-float(t.gamma))
        psi = np.maximum(
            int(t.psi_min), np.floor(float(t.psi0) * s ** (-float(t.beta)) + 0.5)
        ).astype(np.int64)
        return lam, psi

    def counts(self, first: int, n: int) -> np.ndarray:
        """Exact multinomial counts #_s for tasks first+1..first+n (first on a block boundary);
        a table's counts column as it stands."""
        if first % BLOCK:
            raise ValueError("counts: first must be a multiple of BLOCK")
        if self.source is not None and self.source.has_counts:
            return self.source.read(first, first + n)["counts"].astype(np.int64)
        out = np.zeros(n, dtype=np.int64)
        for b in range(first // BLOCK, n_blocks(first + n)):
            if self._block_counts[b] == 0:
                continue  # every count of the block is 0 (and its stream is its own: skipping it changes nothing)
            lo = b * BLOCK
            hi = min(lo + BLOCK, self.n_tasks)
            p = self.weights(lo, hi - lo)
            c = rng.generator(self.seed, 8, b).multinomial(int(self._block_counts[b]), p / p.sum())
            a, e = max(lo, first), min(hi, first + n)
            out[a - first : e - first] = c[a - lo : e - lo]
        return out

    def chunk(self, first: int, n: int) -> TaskChunk:
        """Task table for s = first+1 … first+n (n ≤ D − first)."""
        t, it = self.task, self.init
        arrs = [np.empty(n) for _ in range(8)]
        lam, psi, rate, wtest, v0x, v0y, w0x, w0y = arrs
        scheme = INIT_BALANCED if it.scheme == "balanced" else INIT_RANDOM
        init = (scheme, float(it.scale), self.seed)  # the initial weights' scheme, σ0 and seed
        filled = (lam, psi, wtest, v0x, v0y, w0x, w0y)  # what both fillers write
        if self.source is not None:
            cols = self.source.read(first, first + n)
            weight, strength = cols["weight"], cols["strength"]
            _fill_cols(first, weight, 1.0 / self.z, strength, cols["psi"], *init, *filled)
        else:
            laws = (float(t.alpha), 1.0 / self.z, float(t.strength0), float(t.gamma))
            lengths = (float(t.psi0), float(t.beta), int(t.psi_min))
            _fill(first, *laws, *lengths, *init, *filled)
        if self.finite_n:
            rate[:] = self.counts(first, n) / float(self.n_samples)
        else:
            rate[:] = wtest
        return TaskChunk(first, lam, psi, rate, wtest, v0x, v0y, w0x, w0y)

    def chunks(self, chunk_tasks: int):
        """Iterate (first, n) over tasks 1..D in chunks that start on block boundaries."""
        step = max(BLOCK, (int(chunk_tasks) // BLOCK) * BLOCK)
        for first in range(0, self.d, step):
            yield first, min(step, self.d - first)

    def tail_losses(self, chunk_tasks: int = 1 << 20) -> tuple[float, float]:
        """(test, train) loss of tasks s > D, which the model cannot represent (f_s ≡ 0)."""
        t = self.task
        tot_test = 0.0
        tot_train = 0.0
        step = max(BLOCK, (int(chunk_tasks) // BLOCK) * BLOCK)
        start = (self.d // BLOCK) * BLOCK
        far = (
            max(start, EM_FROM) if self.source is None else self.n_tasks
        )  # chunks from here on: in closed form per block
        for first in range(start, self.n_tasks, step):
            if first >= far:
                far = first
                break
            n = min(step, self.n_tasks - first)
            counts = self.counts(first, n).astype(np.float64) if self.finite_n else np.zeros(n)
            inv_n = 1.0 / self.n_samples if self.finite_n else 0.0
            pt = np.zeros(n_blocks(n))
            pr = np.zeros(n_blocks(n))
            # tasks in [start, d) are represented: exclude them by zeroing their weight
            lo_local = max(0, self.d - first)
            sub_first = first + lo_local
            if self.source is not None:
                cols = self.source.read(first, first + n)
                pt = np.zeros(n_blocks(n - lo_local))
                pr = np.zeros(n_blocks(n - lo_local))
                _tail_partials_cols(
                    cols["weight"][lo_local:],
                    cols["strength"][lo_local:],
                    1.0 / self.z,
                    counts[lo_local:],
                    inv_n,
                    self.finite_n,
                    pt,
                    pr,
                )
            elif lo_local:
                # recompute only the represented-free part, keeping block alignment for the rest
                pt = np.zeros(n_blocks(n - lo_local))
                pr = np.zeros(n_blocks(n - lo_local))
                _tail_partials(
                    sub_first,
                    n - lo_local,
                    float(t.alpha),
                    1.0 / self.z,
                    float(t.strength0),
                    float(t.gamma),
                    counts[lo_local:],
                    inv_n,
                    self.finite_n,
                    pt,
                    pr,
                )
            else:
                _tail_partials(
                    first,
                    n,
                    float(t.alpha),
                    1.0 / self.z,
                    float(t.strength0),
                    float(t.gamma),
                    counts,
                    inv_n,
                    self.finite_n,
                    pt,
                    pr,
                )
            tot_test += _ordered_sum(pt)
            tot_train += _ordered_sum(pr)
        else:
            return tot_test, tot_train
        test, train = self._far_tail(max(far, self.d), self.n_tasks)
        return tot_test + test, tot_train + train

    def _far_tail(self, a: int, b: int) -> tuple[float, float]:
        """(test, train) loss of tasks a+1..b (a ≥ EM_FROM): Σ P(s) Λ_s²/2 by :func:`power_sums`
        per block; the train loss sums #_s Λ_s²/(2N) over the blocks that hold any sequence."""
        t = self.task
        alpha, gamma, lam0 = float(t.alpha), float(t.gamma), float(t.strength0)
        b0, b1 = a // BLOCK, n_blocks(b)
        sums = np.empty(b1 - b0)
        for g in range(b0, b1, 2**16):  # bounded temporaries
            blocks = np.arange(g, min(g + 2**16, b1), dtype=np.float64)
            lo = np.maximum(blocks * BLOCK, a) + 1
            hi = np.minimum((blocks + 1) * BLOCK, b)
            sums[g - b0 : g - b0 + len(blocks)] = power_sums(lo, hi, alpha + 2.0 * gamma)
        test = 0.5 * lam0 * lam0 / self.z * _ordered_sum(sums)
        if not self.finite_n:
            return test, test
        train = 0.0
        for blk in (b0 + np.flatnonzero(self._block_counts[b0:b1])).tolist():
            first = blk * BLOCK
            n = min(BLOCK, self.n_tasks - first)
            c = self.counts(first, n).astype(np.float64)
            s = np.arange(first + 1, first + n + 1, dtype=np.float64)
            keep = s > a
            train += float(np.sum(c[keep] * (lam0 * s[keep] ** -gamma) ** 2)) * 0.5 / self.n_samples
        return test, train


def _ordered_sum(a: np.ndarray) -> float:
    """Σ a in index order (deterministic; numpy's pairwise sum is too, but this states it)."""
    acc = 0.0
    for x in a.tolist():
        acc += x
    return acc
