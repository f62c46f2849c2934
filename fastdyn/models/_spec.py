"""The kernel interface, in prose, and what a model declares (:class:`ModelEntry`).

Every model, built in or installed, declares one :class:`ModelEntry` under its config name and
exposes it through the ``fastdyn.models`` entry-point group (:mod:`fastdyn.plugins`). Drivers,
writers, sweeps, the config loader and the CLI look models up by name and never special-case one.

Roles (one per kind of model, identical across models):

- ODE models: ``n_state``, ``init(params, seed, first_index, state)``,
  ``rhs(t, state, params, d_state)``, ``loss(state, params, out)``.
- Closed forms: ``theory(times, params, out)``.
- Trained models: ``n_params(config)``, ``init(config, seed, weights)``,
  ``loss_and_grad(weights, data, grad) -> loss``.

Kernels take flat float64 arrays in structure-of-arrays layout (task or sample index fastest),
allocate nothing that outlives the call and hold no Python objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..core.device import Device

if TYPE_CHECKING:  # annotations only: importing the model interface loads no numpy
    import numpy as np


def stored_value(run: Any, key: str, default: Any = None) -> Any:
    """A dotted value of the config stored with ``run`` (``"task.alpha"``), ``default`` if absent.

    Analysis hooks get runs as read from files; this is how they read their config."""
    node = run.config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def stored_number(value: Any) -> float:
    """A stored config number that may be the text "inf" → float (NaN if not a number)."""
    if isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


@dataclass(frozen=True)
class Theory:
    """A theory exponent p (L ∝ x^-p) and where it comes from; ``d_star`` (q in D* ∝ C^q) for
    compute fits; ``regime`` ("small", "large", "mixed", or "" when the law does not depend on
    it) and one line ``regime_text`` saying which tasks the fit sees and which law that makes."""

    exponent: float
    source: str
    d_star: float | None = None
    regime: str = ""
    regime_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "exponent": self.exponent,
            "source": self.source,
            "d_star": self.d_star,
            "regime": self.regime,
            "regime_text": self.regime_text,
        }


@dataclass(frozen=True)
class NoLaw:
    """A plain statement that no law applies to this fit (why, one line): what a
    :class:`ScalingTheory` returns instead of a :class:`Theory` when it has the run's laws but
    none holds here (e.g. a task family without a closed form over the fitted window)."""

    reason: str


@dataclass(frozen=True)
class Cutoff:
    """Where a run's loss leaves its power law for a model reason (e.g. the finite task count):
    ``time`` (the run's time units), ``name`` (a few words, in warnings) and ``text`` (one line)."""

    time: float
    name: str
    text: str


class ScalingTheory(Protocol):
    """A model's scaling laws, shown beside ``fastdyn fit`` and ``plot --kind scaling|frontier``.

    Runs are passed as read from files (``run.config``, ``run.attrs``, ``run.path``). ``x`` is one
    of ``resources`` ("time", "model_size", "n_samples", "compute"); exponents are p in L ∝ x^-p.
    Where the model knows that no law applies, ``exponent``, ``time_theory`` and
    ``frontier_theory`` may return a :class:`NoLaw` saying why instead of None.
    """

    resources: tuple[str, ...]

    def exponent(self, run: Any, x: str, regime: str = "small") -> Theory | NoLaw | None:
        """The law for ``x`` (None where the model has none for this run)."""
        ...

    def resource(self, run: Any, x: str) -> float:
        """The config value of ``x`` ("model_size", "n_samples") of one run of a scan."""
        ...

    def cutoff(self, run: Any, fraction: float) -> Cutoff | None:
        """Where an automatic time window must end (None: nowhere in particular)."""
        ...

    def time_theory(self, run: Any, window: tuple[float, float]) -> Theory | NoLaw | None:
        """The time law for a fit over ``window`` (e.g. in the regime of the tasks seen there)."""
        ...

    def frontier_theory(
        self, runs: Sequence[Any], model_sizes: np.ndarray, notes: list[str]
    ) -> Theory | NoLaw | None:
        """The compute law of runs that differ in model size; one-line caveats go to ``notes``."""
        ...


@dataclass(frozen=True)
class RunHooks:
    """What the drivers and the config loader ask of a model.

    - ``setup(cfg, device)``: the :class:`OdeMaths` (an ODE model's maths; the driver builds the
      rest) or :class:`TrainedSetup` that the driver of the entry's ``kind`` runs; ``device`` is
      the :class:`fastdyn.core.device.Device` the driver resolved (models never import ``drive``).
    - ``schema``: the root config dataclass (its fields declared with :mod:`fastdyn.config.schema`
      rules), validated by :func:`fastdyn.config.load.from_dict` when ``model`` names the entry.
    - ``devices``: where it runs (:class:`~fastdyn.core.device.Device` values; names such as
      ``"cuda"`` are taken as their Device); ``check_device(cfg)`` raises a ConfigError for a
      config path that has no CUDA kernel (None: every path has one).
    """

    setup: Callable[..., TrainedSetup | OdeMaths]
    schema: type
    devices: tuple[Device, ...] = (Device.CPU,)
    check_device: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(Device.of(d) for d in self.devices))


@dataclass(frozen=True)
class AnalysisHooks:
    """What ``fit`` and ``plot`` ask of a model about its runs (runs as read from files).

    - ``default_series``: what ``fit``/``plot`` use without ``--y``; ``loss_levels``: datasets of
      reference levels drawn on loss plots; ``drop_times``: a dataset of the predicted times of
      the drops between the levels of ``loss_levels[0]`` (entry m: the drop onto level m + 1;
      ``fit`` prints it beside each measured drop).
    - ``task_strengths(run, index)``: Λ_s of the tracked tasks ``index`` (1-based), for ``plot
      --kind tasks`` (None when the model has none).
    - ``scaling``: the :class:`ScalingTheory` shown beside ``fit``.
    - ``param_targets(run)``: the values the ``params/`` series approach, dashed on ``plot --kind
      weights``.
    - ``fit_note``: a warning shown with every ``fit`` of the model's runs, where a power law is
      not what its losses follow (e.g. plateaus and drops).
    """

    default_series: tuple[str, ...] = ("loss/test",)
    loss_levels: tuple[str, ...] = ()
    drop_times: str | None = None
    task_strengths: Callable[[Any, np.ndarray], np.ndarray | None] | None = None
    scaling: ScalingTheory | None = None
    param_targets: Callable[[Any], dict[str, np.ndarray]] | None = None
    fit_note: str | None = None


@dataclass(frozen=True)
class WarmupHooks:
    """What ``fastdyn warmup`` (and a first ``fastdyn simulate``) asks of a model to fill numba's
    cache.

    - ``sizes``: ``--set`` overrides that shrink any preset of the model to a few steps;
    - ``variants``: (label, preset, overrides) runs that reach the kernels its presets do not.
    - ``precompile(cfg)``: kernels of a run of ``cfg`` for a second process: those it reaches
      last (a trained model's kernels of the steps after the first, which the driver waits for
      before the first optimiser update), or, with ``compile_here``, those it reaches first
      (MSFR's closed form), as (kernel, signature) pairs: an
      ``@njit(cache=True)`` dispatcher or its dotted name ``"package.module:name"``, and numba's
      text of the argument types the run passes it, ``"(float64[::1], int64, …)"``
      (:mod:`fastdyn._precompile`). On a cold cache ``fastdyn simulate`` compiles them in a
      second process while the run compiles the rest, and ``fastdyn warmup`` beside its runs;
      empty when the run has one phase. An ODE model on the generic solver needs none: the
      driver declares the integrator it builds from the model's functions.
    - ``compile_here(cfg)``: pairs as above that the run compiles itself, at once, while the
      second process compiles ``precompile``'s; with them the ODE driver waits for the second
      process before its first kernel call (after the set-up), so ``precompile`` may name the
      kernels reached first (MSFR: the closed form beside, the integrator here, two halves of
      about equal compile time). None or empty (for that config): ``precompile`` names the
      kernels reached last.
    """

    sizes: tuple[str, ...] = ()
    variants: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    precompile: Callable[[Any], Sequence[tuple[Any, str]]] | None = None
    compile_here: Callable[[Any], Sequence[tuple[Any, str]]] | None = None


class ModelEntry:
    """One model, as its package declares it (the ``fastdyn.models`` entry point's object).

    A small base class with grouped defaults (as xarray's ``BackendEntrypoint``): a model either
    instantiates it with the parts it has, ``ModelEntry(name=…, kind=…, summary=…,
    run=RunHooks(…), analysis=AnalysisHooks(…))``, or subclasses it and sets them as class
    attributes. Whatever is not given keeps the default of its group.

    - ``name``: the config's ``model``; ``kind``: ``"ode"`` or ``"trained"`` (which driver runs
      it); ``summary``: one line for ``fastdyn config models``; ``default``: the model of a config
      without a ``model`` key (one built-in model declares it).
    - ``run`` (:class:`RunHooks`, required): setup, config schema, devices.
    - ``analysis`` (:class:`AnalysisHooks`): default series, levels and laws for ``fit``/``plot``.
    - ``warmup`` (:class:`WarmupHooks`): what ``fastdyn warmup`` runs, and what a first
      ``fastdyn simulate`` compiles beside the run.

    ``fastdyn theory`` commands are not entry fields: a package declares them in the
    ``fastdyn.theory`` entry-point group (name → click command), so ``--help`` loads no model.
    """

    KINDS = ("ode", "trained")

    name: str
    kind: str
    summary: str
    default: bool = False
    run: RunHooks
    analysis: AnalysisHooks = AnalysisHooks()
    warmup: WarmupHooks = WarmupHooks()

    def __init__(self, **parts: Any) -> None:
        known = {"name", "kind", "summary", "default", "run", "analysis", "warmup"}
        unknown = sorted(set(parts) - known)
        if unknown:
            raise TypeError(
                f"ModelEntry: unknown part {unknown[0]!r}; parts: {', '.join(sorted(known))}"
            )
        for key, value in parts.items():
            object.__setattr__(self, key, value)
        missing = [k for k in ("name", "kind", "summary", "run") if not hasattr(self, k)]
        if missing:
            raise TypeError(f"ModelEntry: {missing[0]!r} is required")
        if self.kind not in self.KINDS:
            raise ValueError(
                f"ModelEntry {self.name!r}: kind must be 'ode' or 'trained', got {self.kind!r}"
            )
        for key, group in (("run", RunHooks), ("analysis", AnalysisHooks), ("warmup", WarmupHooks)):
            if not isinstance(getattr(self, key), group):
                raise TypeError(
                    f"ModelEntry {self.name!r}: {key} must be given as {group.__name__}(…)"
                )

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"ModelEntry {self.name!r} is read-only ({key})")

    def __repr__(self) -> str:
        return f"<ModelEntry {self.name!r} ({self.kind})>"

    def setup(self, cfg: Any, device: Device) -> TrainedSetup | OdeMaths:
        """What the driver of this entry's ``kind`` runs for ``cfg`` (``run.setup``)."""
        return self.run.setup(cfg, device)


@dataclass(slots=True, kw_only=True, eq=False)
class Prepared:
    """A trained model's prepared data: what its ``loss_and_grad(theta, prep, grad, idx)`` reads,
    built once by its setup. The trained-model driver reads only the attributes below; a model
    subclasses this with its own documented fields (slotted dataclasses: a misspelt field raises
    AttributeError, and there are no dict keys to add on the fly).

    - ``n_samples``: the number of training samples, from which a minibatch ``idx`` (indices
      0..n_samples−1) is drawn; 0 where there are none (a population expectation).
    - ``kind`` (class attribute): a short label of the preparation, for messages and tests.
    - ``full_batch`` (class attribute): the loss is a closed form of the data's moments, with no
      per-sample terms: the driver never draws minibatches from it, and runs GD through the
      model's ``fused_gd(theta, prep, lr, n, losses)`` where the model has one.
    """

    n_samples: int
    kind: ClassVar[str] = "samples"
    full_batch: ClassVar[bool] = False


@dataclass
class TrainedSetup:
    """What a trained model hands the trained-model driver (``drive/trained.py``) for one run.

    Built by the entry's ``setup(cfg, device)`` from a validated config; the driver owns the
    optimiser, the step loop, streaming, checkpoints, resume, signals, divergence, progress and
    status. Time is ``t = time_per_step · step``; ``time_units`` and ``time_long_name`` (the
    ``/time`` attributes) state that convention in the file when it is not the default one.

    - ``model``: ``n_params``, ``loss_and_grad(theta, prep, grad, idx) -> loss`` (``idx`` None: the
      full training set), ``loss_value(theta, prep)``; optionally ``fused_gd`` and ``gd_steps``
      (GD steps in one compiled call) and ``optimizer_steps`` (the other optimisers' steps, full
      batch or minibatches, in one compiled call; :mod:`fastdyn.drive.train`).
    - ``prep``: the prepared training data (a :class:`Prepared`).
    - ``observe(theta) -> (losses, weights)``: what is measured at a save besides the train loss.
    - ``row(i, step, losses, weights) -> {series: row}``: row ``i`` of every series in ``series``.
    - ``final(theta) -> {path: array}``: datasets written when the run ends.
    - ``dims`` / ``axes``: the names of the datasets' axes (HDF5 dimension scales, so that netCDF
      readers show e.g. ``head`` rather than an index), see the fields below.
    """

    model: Any
    prep: Prepared
    theta: np.ndarray
    optim: Any  # a config section: name, lr, beta1, beta2, eps, weight_decay, momentum
    batch_size: int | None
    epochs: int
    save_steps: np.ndarray
    time_per_step: float
    seed: int
    series: dict[str, tuple[int, ...]]
    observe: Callable[[np.ndarray], tuple[dict[str, float], dict[str, np.ndarray]]]
    row: Callable[[int, int, dict[str, float], dict[str, np.ndarray]], dict[str, np.ndarray]]
    final: Callable[[np.ndarray], dict[str, np.ndarray]]
    static: dict[str, np.ndarray] = field(default_factory=dict)
    #: static dataset → (scale label, axis of every series it labels | {series: axis})
    scales: dict[str, tuple[str, int | dict[str, int]]] | None = None
    #: dataset → the names of its axes (after the row axis of a series; every axis of a static or
    #: final dataset; None: an index axis), one dimension scale per name shared by every dataset
    #: on it (:func:`fastdyn.h5.writer._attach_named`); ``axes``: name → its long_name
    dims: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    axes: dict[str, str] = field(default_factory=dict)
    #: dataset → (units, long_name) where the file format's defaults do not say what it is
    descriptions: dict[str, tuple[str, str]] = field(default_factory=dict)
    extra_attrs: dict[str, Any] = field(default_factory=dict)
    time_units: str | None = None
    time_long_name: str | None = None
    checkpoint_every: Any = 60.0


@dataclass(frozen=True)
class FastPath:
    """A model's specialised integrator for one ``solver.integrator`` (e.g. MSFR's lane-vectorised
    kernels), registered in :attr:`OdeMaths.fast_paths`; the driver runs it instead of its generic
    solver when ``solver.fast_path`` is true (the default). It works on its own chunks and its own
    state, so it supplies both:

    - ``chunk(first, n)``: tasks first+1 … first+n as its kernels take them (an object with
      ``first`` and ``n``);
    - ``new_state(chunks, n)``: the state of ``n`` tasks holding ``chunks``;
      ``advance(chunk, state, times, steps, local_track, test_partials, train_partials, f)``:
      integrate the chunk through one segment of output times (gd: step indices ``steps``),
      adding the block partials of L_test and L_train and writing f of the tracked tasks;
    - ``save_state(state) -> {name: array}`` (shapes in ``checkpoint``: ``{name: (shape,
      dtype)}``), ``restore(state, arrays, chunks, rows_done, last_step)`` (ValueError if they do
      not fit);
    - ``summary(state) -> {name: count}`` (stored as ``solver_<name>`` root attributes) and
      ``failure(counts) -> text or None`` (tasks that did not finish);
    - optionally ``zero_loss(chunk)`` (the divergence reference: a bound of the chunk's test loss
      at the start), ``theory(chunk, times, local_track) -> (test_partials, train_partials, f)``
      (the closed form's block partials, computed by its own kernels), and ``resident()`` /
      ``to_host()``: a context for the whole run inside which the state may live on the GPU, and
      the call that copies it back before the driver reads it (no-ops by default).
    """

    chunk: Callable[[int, int], Any]
    new_state: Callable[[Any, int], Any]
    advance: Callable[..., None]
    save_state: Callable[[Any], dict[str, np.ndarray]]
    restore: Callable[..., None]
    checkpoint: dict[str, tuple[tuple[int, ...], Any]]
    summary: Callable[[Any], dict[str, int]]
    failure: Callable[[dict[str, int]], str | None]
    zero_loss: Callable[[Any], float] | None = None
    theory: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
    resident: Callable[[], Any] = contextlib.nullcontext
    to_host: Callable[[], None] = lambda: None


@dataclass
class OdeMaths:
    """A per-task ODE model as its maths only: the driver owns everything else.

    ``n_tasks`` independent tasks s = 1 … n_tasks, each with ``k`` parameters p and ``n_state``
    state variables y. The model gives three ``@njit`` functions of one task (``cache=True``):

    - ``rhs(p, y, dy)``: dy/dt;
    - ``observe(p, y) -> f``: the scalar stored for tracked tasks (``tasks/f``);
    - ``loss(p, y) -> (test_term, train_term)``: the task's terms of L_test and L_train;

    and two table functions for tasks first+1 … first+n: ``params(first, n)`` → (k, n) float64
    and ``init(first, n)`` → (n_state, n) float64 (deterministic in the task index, so a run
    split by task index or resumed is bit-identical). ``theory(params, times)`` → (test_terms,
    train_terms, f), each (n, T), is the closed form when there is one.

    The driver (``drive/ode_maths.py``) owns the state array (n_state × n_tasks), time and the
    output grid ``times``, the per-task step sizes and integrator counters, checkpoints and
    ``--resume``, the stop flag, the split run and the integrator: ``solver`` is a section with
    ``integrator`` ("rk4": classical RK4 at the nominal step ``h``; "dopri5": adaptive
    Dormand–Prince 5(4) per task, ``rtol``, ``atol``; "none": the closed form only) and
    ``max_steps`` (per task), and ``fast_path`` (default true: run the model's registered
    :class:`FastPath` for ``integrator`` when it has one). ``output`` holds ``chunk_tasks``,
    ``times_per_segment`` and ``checkpoint_every`` (``fastdyn.config.ode`` defines both sections
    once for every such model). ``steps``: the output step indices of a discrete (gd) run,
    ``times = η · steps``. ``cause()``: the likely cause of a divergence, one line, when the model
    knows better than the integrator's generic advice.
    """

    n_tasks: int
    n_state: int
    rhs: Callable[..., Any]
    observe: Callable[..., Any]
    loss: Callable[..., Any]
    params: Callable[[int, int], np.ndarray]
    init: Callable[[int, int], np.ndarray]
    times: np.ndarray
    track: np.ndarray
    solver: Any
    output: Any
    theory: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, ...]] | None = None
    tail: tuple[float, float] = (0.0, 0.0)
    static: dict[str, np.ndarray] = field(default_factory=dict)
    extra_attrs: dict[str, Any] = field(default_factory=dict)
    #: dataset → (units, long_name) of the datasets in ``static`` (what each holds)
    descriptions: dict[str, tuple[str, str]] = field(default_factory=dict)
    steps: np.ndarray | None = None
    cause: Callable[[], str] | None = None
    #: options of the generic fixed-step solver (``@njit`` functions of one task, like ``rhs``):
    #: ``rate_scale(p, y) -> σ``, the task's fastest rate (1/time) at the start: rk4 then steps
    #: each task at h_s = 1/(solver.steps_per_timescale · σ_s) (σ ≤ 0 or non-finite: the task
    #: never moves); ``residual(p, y) -> (r, scale)``: the settling rule freezes a task after a
    #: step with |r| ≤ solver.settle_tol · |scale| and |r| not above the previous step's
    rate_scale: Callable[..., Any] | None = None
    residual: Callable[..., Any] | None = None
    #: ``solver.integrator`` → the model's specialised integrator for it
    fast_paths: dict[str, FastPath] = field(default_factory=dict)


def register(entry: ModelEntry) -> ModelEntry:
    """Add ``entry`` in this process (tests, notebooks); installed models come from entry points
    (:mod:`fastdyn.plugins`)."""
    from .. import plugins

    return plugins.register(entry)


def get(name: str) -> ModelEntry:
    """The entry of model ``name`` (KeyError naming the known models otherwise)."""
    from .. import plugins

    return plugins.get(name)


def names() -> list[str]:
    """Every model's name, sorted."""
    from .. import plugins

    return plugins.names()
