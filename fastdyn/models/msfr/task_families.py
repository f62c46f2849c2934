"""① Named MSFR task families: ``task.frequency_law`` and ``task.strength_law`` (docs/task-tables.md).

Beside the built-in power laws, P(s) and Λ_s can follow a named family, chosen in the config (no
code is evaluated). Every value is a formula of the task index s (and, for ``lognormal``, of a
draw keyed by (seed, s)), so a family is read like a task table: :class:`FamilySource` computes
rows a … b−1 on demand (:meth:`FamilySource.read`), chunk by chunk, never an N_s array.

| key | law | parameters |
|---|---|---|
| ``frequency_law = "power"`` | P(s) ∝ s^-α | ``alpha`` |
| ``"exponential"`` | P(s) ∝ e^-(s−1)/s0 | ``frequency_decay`` (s0) |
| ``"broken-power"`` | P(s) ∝ s^-α for s ≤ s_b, s_b^(α2−α) s^-α2 beyond (continuous) | ``alpha``, ``alpha2``, ``frequency_break`` (s_b) |
| ``strength_law = "power"`` | Λ_s = Λ0 s^-γ | ``strength0``, ``gamma`` |
| ``"exponential"`` | Λ_s = Λ0 e^-(s−1)/s0 | ``strength0``, ``strength_decay`` (s0) |
| ``"broken-power"`` | Λ_s = Λ0 s^-γ for s ≤ s_b, Λ0 s_b^(γ2−γ) s^-γ2 beyond | ``strength0``, ``gamma``, ``gamma2``, ``strength_break`` (s_b) |
| ``"lognormal"`` | Λ_s = Λ0 s^-γ e^(σ z_s), z_s ~ N(0, 1) per task | ``strength0``, ``gamma`` (default 0), ``strength_sigma`` (σ) |

ψ_s stays ψ_s = max(psi_min, ⌊ψ0 s^-β + ½⌋). The power pieces are computed with exactly the numpy
operations a power-law task table is written with (``s**-alpha``, ``strength0 * s**-gamma``), so a
family whose laws are both "power" would reproduce the built-in bit for bit; the problem uses its
own built-in path then (the default is unchanged).

The lognormal draws z_s are the Box–Muller normal of the counter-based hash of
``fastdyn.problems.rng`` keyed by (seed, s − 1, :data:`STREAM_STRENGTH`), written here in numpy
(uint64 arithmetic wraps) so that this layer needs no kernels; ``tests/problems/test_task_families.py``
checks it against the kernel's :func:`fastdyn.problems.rng.normal`.
"""

from __future__ import annotations

import math

import numpy as np

from ...config.schema import ConfigError

FREQUENCY_LAWS = ("power", "exponential", "broken-power")
STRENGTH_LAWS = ("power", "exponential", "broken-power", "lognormal")
#: the rng stream of the lognormal strength draws (rng.py uses 1–4, msfr_seq.py 5–6)
STREAM_STRENGTH = 9

#: parameters each law reads (a parameter given for a law that does not read it is an error)
FREQUENCY_USES = {
    "power": ("alpha",),
    "exponential": ("frequency_decay",),
    "broken-power": ("alpha", "alpha2", "frequency_break"),
}
STRENGTH_USES = {
    "power": ("strength0", "gamma"),
    "exponential": ("strength0", "strength_decay"),
    "broken-power": ("strength0", "gamma", "gamma2", "strength_break"),
    "lognormal": ("strength0", "gamma", "strength_sigma"),
}
FAMILY_KEYS = ("frequency_law", "strength_law", "frequency_decay", "frequency_break", "alpha2",
               "strength_decay", "strength_break", "gamma2", "strength_sigma")  # fmt: skip
_FORMULA = {
    ("frequency", "power"): "P(s) ∝ s^-α",
    ("frequency", "exponential"): "P(s) ∝ e^-(s−1)/s0",
    ("frequency", "broken-power"): "P(s) ∝ s^-α up to s_b, s^-α2 beyond",
    ("strength", "power"): "Λ_s = Λ0 s^-γ",
    ("strength", "exponential"): "Λ_s = Λ0 e^-(s−1)/s0",
    ("strength", "broken-power"): "Λ_s = Λ0 s^-γ up to s_b, s^-γ2 beyond",
    ("strength", "lognormal"): "Λ_s = Λ0 s^-γ e^(σ z_s)",
}


def uses_family(task) -> bool:
    """True when P or Λ is a named family other than the built-in power law."""
    return (
        getattr(task, "frequency_law", "power") != "power"
        or getattr(task, "strength_law", "power") != "power"
    )


def describe(task) -> str:
    """ "task.strength_law = 'exponential'" (the laws that are not the power law)."""
    parts = [f"task.{k}_law = {getattr(task, k + '_law')!r}" for k in ("frequency", "strength")
             if getattr(task, k + "_law") != "power"]  # fmt: skip
    return ", ".join(parts) or "the power laws"


def check_given(task, given: frozenset) -> None:
    """One-line ConfigError for a parameter given (with a value other than its default) beside a
    law that does not read it, and for a
    family whose strengths underflow to 0 (or overflow) inside 1 … n_tasks."""
    for kind, uses in (("frequency", FREQUENCY_USES), ("strength", STRENGTH_USES)):
        law = getattr(task, kind + "_law")
        read = uses[law]
        for other, keys in uses.items():
            for k in keys:
                if k in given and k not in read and not is_default(task, k):
                    raise ConfigError(
                        f"task.{k}: not used with task.{kind}_law = {law!r} ({_FORMULA[kind, law]}); "
                        f"remove task.{k}, or set task.{kind}_law = {other!r}"
                    )
    law = task.strength_law
    if law in ("exponential", "broken-power"):
        # monotone pieces: the extremes are at s = 1, s_b and N_s
        pts = sorted(
            {1.0, float(task.n_tasks), min(float(task.strength_break), float(task.n_tasks))}
        )
        vals = _strength(task, np.array(pts), None, 0)
        bad = ~(np.isfinite(vals) & (vals >= np.finfo(np.float64).tiny))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            key = "strength_decay" if law == "exponential" else "gamma2"
            raise ConfigError(
                f"task.{key}: {_FORMULA['strength', law]} gives Λ_s = {vals[i]:.3g} at s = {pts[i]:.0f} "
                f"(must be a normal float > 0 for every task ≤ n_tasks = {task.n_tasks}); "
                f"raise task.{key if law == 'exponential' else 'strength_break'} or lower task.n_tasks"
            )


def is_default(section, key: str) -> bool:
    """Whether field ``key`` of ``section`` holds its default (a resolved config written back out
    by ``to_toml`` gives every key: only a value that differs from the default was chosen)."""
    import dataclasses

    f = next(f for f in dataclasses.fields(section) if f.name == key)
    return getattr(section, key) == f.default


class FamilySource:
    """The columns of a named family, computed per row range: the interface of
    :class:`fastdyn.models.msfr.task_table.TaskTable` (``n``, ``has_counts``, ``weight_name``,
    :meth:`read`), so the problem reads a family exactly like a table."""

    has_counts = False
    weight_name = "weight"

    def __init__(self, task, seed: int = 0):
        self.task = task
        self.seed = int(seed)
        self.n = int(task.n_tasks)
        self.path = describe(task)

    def read(self, a: int, b: int) -> dict[str, np.ndarray]:
        """Rows a … b−1 (tasks s = a+1 … b) as float64: ``weight``, ``strength``, ``psi``."""
        t = self.task
        s = np.arange(a + 1, b + 1, dtype=np.float64)
        psi = np.maximum(int(t.psi_min), np.floor(float(t.psi0) * s ** -float(t.beta) + 0.5))
        return {"weight": _weight(t, s), "strength": _strength(t, s, np.arange(a, b), self.seed),
                "psi": psi.astype(np.float64)}  # fmt: skip

    def check(self, a: int, cols: dict) -> None:
        """One line naming the law when a computed value is unusable (P ≥ 0, Λ finite > 0)."""
        for name, v, ok, law in (
            ("weight", cols["weight"], lambda v: np.isfinite(v) & (v >= 0), "frequency"),
            ("strength", cols["strength"], lambda v: np.isfinite(v) & (v > 0), "strength"),
        ):
            bad = np.flatnonzero(~ok(v))
            if bad.size:
                i = int(bad[0])
                what = "P(s)" if name == "weight" else "Λ_s"
                raise ConfigError(
                    f"task.{law}_law: {_FORMULA[law, getattr(self.task, law + '_law')]} gives {what} = {float(v[i])!r} "
                    f"at task s = {a + i + 1}; change its parameters or lower task.n_tasks"
                )


def _broken(s: np.ndarray, x: float, x2: float, sb: float) -> np.ndarray:
    """s^-x for s ≤ s_b, s_b^(x2−x) s^-x2 beyond (continuous at s_b)."""
    return np.where(s <= sb, s**-x, sb ** (x2 - x) * s**-x2)


def _weight(t, s: np.ndarray) -> np.ndarray:
    law = t.frequency_law
    if law == "power":
        return s ** -float(t.alpha)
    if law == "exponential":
        return np.exp(-(s - 1.0) / float(t.frequency_decay))
    return _broken(s, float(t.alpha), float(t.alpha2), float(t.frequency_break))


def _strength(t, s: np.ndarray, idx: np.ndarray | None, seed: int) -> np.ndarray:
    law = t.strength_law
    lam0 = float(t.strength0)
    if law == "power":
        return lam0 * s ** -float(t.gamma)
    if law == "exponential":
        return lam0 * np.exp(-(s - 1.0) / float(t.strength_decay))
    if law == "broken-power":
        return lam0 * _broken(s, float(t.gamma), float(t.gamma2), float(t.strength_break))
    median = lam0 * s ** -float(t.gamma)
    if idx is None:  # extremes of the median only
        return median
    return median * np.exp(float(t.strength_sigma) * normals(seed, idx, STREAM_STRENGTH))


# -- the counter-based normal of fastdyn.problems.rng, vectorised in numpy ----------------------
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_C = np.uint64(0x632BE59BD9B4E019)


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def normals(seed: int, idx: np.ndarray, stream: int) -> np.ndarray:
    """rng.normal(seed, i, stream, 0) for every i in ``idx`` (Box–Muller, cosine branch)."""
    with np.errstate(over="ignore"):
        sd = np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
        h = _mix64(sd * _GOLDEN + np.uint64(stream))
        k = _mix64(h ^ (np.asarray(idx).astype(np.uint64) * _GOLDEN + _C))
        u1 = ((_mix64(k) >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)
        u2 = ((_mix64(k + _GOLDEN) >> np.uint64(11)).astype(np.float64) + 0.5) * (
            1.0 / 9007199254740992.0
        )
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
