"""Config sections of an MSFR run with a general per-task H (``model = "msfr-h"``).

The tasks are MSFR's (docs/theory.md, MSFR: the same ``[task]`` keys, power laws or ``task.table``);
each task s has a d×d symmetric H_s = κ_s·M_s, κ_s = ψ_s(1 + Λ_s²), with M_s from ``[h]``: the
eigenvalues ``h.spectrum`` in the eigenvectors ``h.eigenvectors`` (Haar random per task, or the
identity), plus ``h.perturbation``·E_s (E_s a seeded symmetric matrix of unit Frobenius norm); or
M read from ``h.file``. docs/msfr-h.md describes the model and its Riccati closed form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import common
from ...config.schema import (
    ConfigError,
    Section,
    choice,
    integer,
    like,
    number,
    numbers,
    regular_input,
    text,
)
from ..msfr import config as msfr

#: largest d (state 2d per task)
MAX_DIM = 8


@dataclass(frozen=True)
class TaskSection(msfr.TaskSection):
    """[task]: the MSFR task distribution (docs/theory.md, MSFR); with RK4 every task is integrated at the step
    of the fastest, so the defaults (n_tasks, psi0) are small."""

    n_tasks: int = like(msfr.TaskSection, "n_tasks", 30, hi=10**8)
    psi0: float = like(msfr.TaskSection, "psi0", 10.0)
    x_dist: str = like(
        msfr.TaskSection,
        "x_dist",
        options=("rademacher",),
        help="unused: H_s is given by [h] (kept so that MSFR task sections validate unchanged)",
    )


@dataclass(frozen=True)
class HSection(Section, prefix="h."):
    """[h]: the per-task d×d matrix H_s, in units of κ_s = ψ_s(1 + Λ_s²)."""

    dim: int = integer(2, 1, MAX_DIM, help="d: v_s, w_s ∈ R^d, H_s is d×d")
    spectrum: tuple = numbers(
        (),
        0.0,
        help="the d eigenvalues of H_s/κ_s; [] = [1, 0, …, 0] (a rank-1 projector: MSFR's leading order)",
    )
    eigenvectors: str = choice(
        "identity",
        ("identity", "random"),
        help="eigenvectors of H_s: the identity, or Haar-random orthogonal seeded per task index",
    )
    perturbation: float = number(
        0.0,
        0.0,
        1e3,
        help="δ: H_s/κ_s += δ·E_s, E_s a seeded random symmetric matrix of unit Frobenius norm",
    )
    file: str | None = text(
        None,
        help="an .npz with array H of shape (d, d) (every task) or (n_tasks, d, d), in units of κ_s, symmetric; replaces spectrum and eigenvectors",
    )

    def resolve(self, given: frozenset) -> HSection:
        """``h.file`` excludes ``spectrum`` and ``eigenvectors`` (other than their defaults) and sets
        ``dim``; otherwise the spectrum has ``dim`` entries."""
        if self.file is not None:
            # the defaults are accepted (a resolved config, written to a file, round-trips)
            for k, default in (("spectrum", ()), ("eigenvectors", "identity")):
                if k in given and getattr(self, k) != default:
                    raise ConfigError(
                        f"h.{k}: not used with h.file (the file gives H); remove h.{k} or h.file"
                    )
            d = read_h_file(self.file).shape[-1]
            if "dim" in given and self.dim != d:
                raise ConfigError(
                    f"h.dim: h.file {self.file} holds {d}×{d} matrices; leave dim out or set it to {d}, got {self.dim}"
                )
            from dataclasses import replace

            return replace(self, dim=d)
        if self.spectrum:
            if len(self.spectrum) != self.dim:
                raise ConfigError(
                    f"h.spectrum: must have h.dim = {self.dim} eigenvalues, got {len(self.spectrum)}"
                )
            if max(self.spectrum) <= 0.0:
                raise ConfigError(
                    f"h.spectrum: the largest eigenvalue must be > 0, got {list(self.spectrum)}"
                )
        return self

    def eigenvalues(self) -> np.ndarray:
        """The spectrum (the default [1, 0, …, 0] filled in)."""
        if self.spectrum:
            return np.array(self.spectrum, dtype=np.float64)
        out = np.zeros(self.dim)
        out[0] = 1.0
        return out


def read_h_file(path: str) -> np.ndarray:
    """The array ``H`` of an .npz file, checked: float, finite, shape (d, d) or (n, d, d) with
    1 ≤ d ≤ MAX_DIM, symmetric to 1e-12 relative (ConfigError naming h.file otherwise)."""
    import zipfile

    regular_input(path, "h.file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if "H" not in z.files:
                raise ConfigError(
                    f"h.file: {path} has no array 'H' (arrays: {', '.join(z.files) or 'none'})"
                )
            h = np.asarray(z["H"])
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ConfigError(
            f"h.file: {path} cannot be read as .npz ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    if h.ndim not in (2, 3) or h.shape[-1] != h.shape[-2] or not 1 <= h.shape[-1] <= MAX_DIM:
        raise ConfigError(
            f"h.file: H must have shape (d, d) or (n_tasks, d, d) with 1 ≤ d ≤ {MAX_DIM}, got {h.shape}"
        )
    if not np.issubdtype(h.dtype, np.number) or np.iscomplexobj(h):
        raise ConfigError(f"h.file: H must hold real numbers, got dtype {h.dtype}")
    h = h.astype(np.float64)
    if not np.all(np.isfinite(h)):
        raise ConfigError("h.file: H must be finite")
    scale = np.max(np.abs(h)) if h.size else 0.0
    asym = np.max(np.abs(h - np.swapaxes(h, -1, -2))) if h.size else 0.0
    if asym > 1e-12 * max(scale, 1e-300):
        raise ConfigError(f"h.file: H must be symmetric, max |H − Hᵀ| = {asym:.3g}")
    return h


@dataclass(frozen=True)
class InitSection(msfr.InitSection):
    """[init]: initial v_s, w_s ∈ R^d."""

    scheme: str = like(
        msfr.InitSection,
        "scheme",
        help="balanced: v = w = σ0 x_1 (the top eigenvector of H_s); random: i.i.d. N(0, σ0²) entries, seeded per task (MSFR's streams)",
    )


@dataclass(frozen=True)
class TimeSection(msfr.TimeSection):
    """[time]: the output time grid (gradient-flow time t)."""

    t_max: float = like(msfr.TimeSection, "t_max", 300.0)
    n_times: int = like(msfr.TimeSection, "n_times", 128)


@dataclass(frozen=True)
class SolverSection(Section, prefix="solver."):
    """[solver]: the engine's per-task integrators: RK4 at one fixed nominal step for every task,
    or adaptive dopri5 with each task's own steps."""

    integrator: str = choice(
        "rk4",
        ("rk4", "dopri5", "none"),
        help="fixed-step RK4 of the 2d-dim (v, w) flow, per-task adaptive DP5(4), or theory only",
    )
    h: float | str = number(
        "auto",
        0.0,
        1e9,
        lo_open=True,
        extra=("auto",),
        help="nominal RK4 step, one for every task; 'auto' = 1/(steps_per_timescale · max_s (#_s/N) λmax(H_s) (2|Λ_s| + 2|f_s(0)|))",
        units="time",
    )
    steps_per_timescale: int = integer(
        200,
        4,
        10**7,
        help="RK4 steps per 1/((#/N) λmax(H) (2|Λ| + 2|f(0)|)) of the fastest task (h = 'auto')",
    )
    rtol: float = common.rtol()
    atol: float = common.atol()
    max_steps: int = integer(
        100_000_000,
        1,
        10**12,
        help="steps allowed per task: RK4's t_max/h (more is a config error); dopri5's accepted steps (a task that needs more fails the run)",
    )
    fast_path: bool = common.fast_path()


@dataclass(frozen=True)
class TheorySection(Section, prefix="theory."):
    """[theory]: the closed form written beside the simulation."""

    level: str = choice(
        "leading",
        ("leading", "none"),
        help="the Riccati closed form with μ, Π from H's eigen-decomposition (exact when H² = μH), or none",
    )


@dataclass(frozen=True)
class OutputSection(msfr.OutputSection):
    """[output]: as MSFR's, with smaller kernel calls (the generic RK4 steps every task at the
    fastest task's step)."""

    chunk_tasks: int = like(msfr.OutputSection, "chunk_tasks", 65_536)


@dataclass(frozen=True)
class MsfrHConfig(Section):
    """A whole MSFR run with a general H_s."""

    model: str = common.model_key("msfr-h")
    seed: int = common.seed("seed of every random draw (counts, eigenvectors, perturbations, init)")
    device: str = common.device(
        "where the flow is integrated: cpu, or cuda (the engine's rk4 and dopri5 on the GPU; the closed form stays on the CPU)"
    )
    task: TaskSection = TaskSection()
    h: HSection = HSection()
    init: InitSection = InitSection()
    time: TimeSection = TimeSection()
    solver: SolverSection = SolverSection()
    theory: TheorySection = TheorySection()
    output: OutputSection = OutputSection()

    def check(self) -> None:
        common.check_computes(self)
        common.check_track(self)
        if self.h.file is not None:
            shape = read_h_file(self.h.file).shape
            if len(shape) == 3 and shape[0] != self.task.n_tasks:
                raise ConfigError(
                    f"h.file: H holds {shape[0]} per-task matrices but task.n_tasks = {self.task.n_tasks}"
                )
        if self.solver.integrator == "rk4" and self.solver.h != "auto":
            common.check_step_budget(self, "h", "RK4", " per task")
