"""③ The in-context regression models' setup for the trained-model driver.

:func:`prepare` builds the model object, its prepared training data (or population moments), the
test sets and the initial weights from :class:`fastdyn.models.icl.settings.ICLSettings`;
:func:`setup` wraps them with the file layout into a :class:`TrainedSetup`.

Series (axis 0 = save step; ``/time`` = t/τ = 2η·step, ``/step`` the optimiser step):
``/loss/train`` (and ``/loss/test_ic``, ``/loss/test_iw`` when test sets exist),
``/params/value_weights`` (H), ``/params/Gamma`` (D×D, paper units), ``/params/Gamma_eig`` (D: the
projections e_dᵀΓe_d on the eigenvectors of Λ, largest eigenvalue first) and, where the paper's
Eq. 10 applies (ATTN_M / MLP, Λ ∝ I, last-token loss), ``/theory/loss/train``. Static:
``/theory/plateaus`` (L(M_m), m = 0..D), ``/theory/L_star``, ``/theory/Gamma_star``,
``/theory/train_minimum`` (finite data, linear attention, last-token loss: the least-squares
minimum of the train loss on the run's own train set, :mod:`fastdyn.models.icl.train_minimum`),
``/theory/eigvals``, the final weights in paper layout under ``/params/final/``, and with
``data.save`` the data set under ``/data/``. Opt-in (``output.diagnostics``, ``output.snapshots``):
``/diagnostics/…`` (head alignment, in-weight norms) and ``/params/snapshots/…`` (the weights at
every save), see :mod:`fastdyn.models.icl.diagnostics`.

With ``test.context_lengths = [N′, …]``: ``/loss/test_context`` (save × N′, scale
``/test/context_length``), the run's loss (last-token or cumulative) at context length N′ of the
weights it holds — exact population values for ``data.population`` runs, else on ``data.n_test``
fresh in-context sequences per N′ (:func:`fastdyn.models.icl.problem.context_test_set`) — and beside it
``/theory/test_context/L_of_Gamma_star`` = L(Γ*(N); N′), the loss at N′ of the converged reduced
predictor trained at N, and ``/theory/test_context/L_star`` = L*(N′), the best loss at N′.

Rank-one ATTN_S population runs (last-token loss) carry paper Eq. 21 beside ``/params/Gamma_eig``:
``/theory/eq21/Gamma_eig`` (save × D) and ``/theory/eq21/plateau_duration``, ``drop_time``, ``v0``,
``head`` (D,), from the run's initial heads (:func:`eq21_theory`). ``/theory/pcr_loss`` (m = 0..D,
last-token loss): the PCR predictor of M_m's loss — population, or on the IC test set
(:func:`pcr_theory`).

Every axis is named (:data:`AXES`: ``head``, ``row``, ``col``, ``rank``, ``feature``, ``x_row``,
``x_col``, ``eig``, ``plateau``, ``context_length``; with ``data.save`` ``sequence``,
``test_sequence``, ``position``, ``coordinate``): one HDF5 dimension scale per name, shared by every
dataset on it (:func:`dims`; the writer links it into each group that uses it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config.schema import ConfigError
from ...core.device import Device
from .._spec import TrainedSetup
from . import diagnostics as icl_diagnostics
from . import problem as icl_data
from .diagnostics import observer
from .prepared import LinearData, PerSample, Stats
from .settings import ICLSettings, build_model, load_data, theory_series

#: ``/time`` attributes: paper time t/τ with τ dW/dt = −½ ∂L/∂W (spec icl.md §3); a step
#: W ← W − η ∂L/∂W is that flow over Δt/τ = 2η, so t/τ = 2η·step (Eq. 10 is checked on it)
TIME_UNITS = "tau"
TIME_LONG_NAME = (
    "paper time t/tau (tau dW/dt = -1/2 dL/dW; one step of rate learning_rate advances it by "
    "2*learning_rate: t/tau = 2*learning_rate*step)"
)

#: the weights that are recorded as series at every save, not as final datasets
_SERIES_WEIGHTS = ("value_weights", "Gamma", "Gamma_eig")

#: the named axes of the ICL files (HDF5 dimension scales 0, 1, …, one per name, shared by every
#: dataset on it): name → long_name. Lengths: head, other_head H; row, col, coordinate D+1;
#: x_row, x_col, eig D; plateau D+1; rank R; feature D²; sequence P; test_sequence data.n_test;
#: position N+1
AXES = {
    "head": "attention head i (mlp-cubic: hidden unit i)",
    "other_head": "the second head j of a pair of heads (i, j)",
    "row": "row of a (D+1)x(D+1) weight matrix: token coordinate x_1..x_D, then the label y",
    "col": "column of a weight matrix: token coordinate x_1..x_D, then the label y",
    "rank": "rank index r of the separate key and query (R rows each)",
    "feature": "index a*D + b of the cubic feature z = vec(beta x_q^T), z_(a*D+b) = beta_a x_q,b",
    "x_row": "row a of Gamma (D x D on the x coordinates): y_hat = sum_ab beta_a Gamma_ab x_q,b",
    "x_col": "column b of Gamma (D x D on the x coordinates): y_hat = sum_ab beta_a Gamma_ab x_q,b",
    "eig": "eigen-direction d of Lambda, in the order of /theory/eigvals (eigenvector column d)",
    "plateau": "m of the fixed point M_m: the number of eigen-directions learned (0..D)",
    "sequence": "training sequence mu (data.P of them)",
    "test_sequence": "test sequence (data.n_test of them)",
    "position": "token position in a sequence: 0..N-1 the context, N the query",
    "coordinate": "token coordinate: x_1..x_D, then the label y",
}

#: (units, long_name) of the ICL datasets beyond the file format's defaults (Gamma in paper
#: units: y_hat = sum_ab beta_a Gamma_ab x_q,b; times in units of tau, as /time)
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "params/value_weights": (
        "1",
        "value weight v_i of each head: W_V,i's label-row entry on the label (mlp-cubic: output "
        "weight w2_i)",
    ),
    "params/Gamma": (
        "1",
        "the predictor's matrix Gamma (D x D, paper units): y_hat = sum_ab beta_a Gamma_ab x_q,b",
    ),
    "params/Gamma_eig": ("1", "e_d^T Gamma e_d: Gamma along each eigenvector e_d of Lambda"),
    "theory/Gamma_star": (
        "1",
        "Gamma* = (Lambda + (Lambda + tr(Lambda) I)/N)^-1: the global minimum of the population "
        "last-token loss (paper units)",
    ),
    "theory/L_star": (
        "1",
        "L*: the smallest population last-token loss, "
        "tr(Lambda) - sum_d lambda_d / (1 + (1 + tr(Lambda)/lambda_d)/N)",
    ),
    "theory/plateaus": (
        "1",
        "plateau levels L(M_m), m = 0..D: the population loss at the fixed point that has "
        "learned the m leading eigen-directions",
    ),
    "theory/eigvals": ("1", "eigenvalues lambda_d of the token covariance Lambda"),
    "theory/pcr_loss": (
        "1",
        "last-token loss of principal component regression on the m leading eigen-directions "
        "(m = 0..D; population, or on the in-context test set)",
    ),
    "theory/loss/train": (
        "1",
        "closed-form training loss of the paper's Eq. 10 (Lambda proportional to I, "
        "last-token loss, random init)",
    ),
    "theory/eq21/Gamma_eig": (
        "1",
        "e_d^T Gamma e_d predicted by the paper's Eq. 21 from the run's initial heads",
    ),
    "theory/eq21/plateau_duration": (
        "tau",
        "Eq. 21's plateau duration of direction d: its half-rise time less its plateau's start",
    ),
    "theory/eq21/drop_time": ("tau", "Eq. 21's half-rise time of direction d"),
    "theory/eq21/v0": (
        "1",
        "value weight v_0 of the head that learns direction d, at the start of its plateau",
    ),
    "theory/eq21/head": ("1", "0-based index of the head that learns direction d"),
    "theory/test_context/L_of_Gamma_star": (
        "1",
        "loss at each tested context length N' of the converged predictor Gamma*(N) of the "
        "run's own N",
    ),
    "theory/test_context/L_star": ("1", "L*(N'): the smallest loss at context length N'"),
    "test/context_length": ("1", "tested context length N'"),
    "loss/test_context": (
        "1",
        "test loss at each tested context length N' of the weights held at the save",
    ),
    "data/tokens": (
        "1",
        "training sequences: N context tokens then the query, each (x_1..x_D, y) with the "
        "query's label 0",
    ),
    "data/labels": ("1", "label y of each token of the training sequences (the query's: target)"),
}

#: what each weight array of ``params/final/`` and ``params/snapshots/`` holds (paper layout)
WEIGHTS = {
    "W_V": "value matrix W_V of each head ((D+1)x(D+1); only its label row is trained)",
    "W_KQ": "merged key-query matrix W_KQ of each head ((D+1)x(D+1); its label column stays 0)",
    "W_K": "key matrix W_K of each head (R x (D+1))",
    "W_Q": "query matrix W_Q of each head (R x (D+1); its label column stays 0)",
    "W1": "first-layer weights of each hidden unit on the cubic features z = vec(beta x_q^T)",
    "w2": "output weight of each hidden unit",
}


def descriptions(names: Any) -> dict[str, tuple[str, str]]:
    """(units, long_name) of the datasets ``names`` that :data:`DESCRIPTIONS` and
    :data:`WEIGHTS` describe (test sets' data as the training set's)."""
    out: dict[str, tuple[str, str]] = {}
    for name in names:
        group, _, leaf = name.rpartition("/")
        if name in DESCRIPTIONS:
            out[name] = DESCRIPTIONS[name]
        elif group == "params/final" and leaf in WEIGHTS:
            out[name] = ("1", f"final {WEIGHTS[leaf]}")
        elif group == "params/snapshots" and leaf in WEIGHTS:
            out[name] = ("1", f"{WEIGHTS[leaf]}, at each save")
        elif group.startswith("data/test_") and f"data/{leaf}" in DESCRIPTIONS:
            what = DESCRIPTIONS[f"data/{leaf}"][1].replace("training", f"{group[10:]} test")
            out[name] = ("1", what)
    return out


#: the axes (after the save axis of a series) of every fixed ICL dataset; the weights in paper
#: layout (``params/final/``, ``params/snapshots/``) take the model's ``array_axes``
_DIMS: dict[str, tuple[str, ...]] = {
    "params/value_weights": ("head",),
    "params/Gamma": ("x_row", "x_col"),
    "params/Gamma_eig": ("eig",),
    "theory/Gamma_star": ("x_row", "x_col"),
    "theory/eigvals": ("eig",),
    "theory/plateaus": ("plateau",),
    "theory/pcr_loss": ("plateau",),
    "theory/eq21/Gamma_eig": ("eig",),
    "theory/eq21/plateau_duration": ("eig",),
    "theory/eq21/drop_time": ("eig",),
    "theory/eq21/v0": ("eig",),
    "theory/eq21/head": ("eig",),
    "theory/test_context/L_of_Gamma_star": ("context_length",),
    "theory/test_context/L_star": ("context_length",),
    "diagnostics/head_cosine": ("head", "other_head"),
    "diagnostics/in_weight_norm_v": ("head",),
    "diagnostics/in_weight_norm_u": ("head",),
    "data/tokens": ("sequence", "position", "coordinate"),
    "data/labels": ("sequence", "position"),
}


def dims(model: Any, names: Any) -> dict[str, tuple[str, ...]]:
    """The axis names of the datasets ``names`` that have them (see :data:`AXES`)."""
    out: dict[str, tuple[str, ...]] = {}
    for name in names:
        group, _, leaf = name.rpartition("/")
        if name in _DIMS:
            out[name] = _DIMS[name]
        elif group in ("params/final", "params/snapshots") and leaf in model.array_axes:
            out[name] = model.array_axes[leaf]
        elif group.startswith("data/test_") and leaf in ("tokens", "labels"):
            out[name] = ("test_sequence", *_DIMS[f"data/{leaf}"][1:])
    return out


@dataclass
class IclRun:
    """One ICL run's model, training data and initial weights."""

    model: Any
    prep: Stats | PerSample
    tests: dict[str, Stats | PerSample]
    eigvals: np.ndarray
    eigvecs: np.ndarray
    theta: np.ndarray
    data: icl_data.ICLData | None


read_npz = icl_data.read_npz


def prepare(s: ICLSettings, data: icl_data.ICLData | None = None, device: str = "cpu") -> IclRun:
    """Model, prepared data, test sets and initial weights of ``s`` (``data``: already loaded),
    the data prepared for the kernels of ``device``."""
    tests: dict[str, dict] = {}
    if s.data.population:
        eigvals = icl_data.spectrum_eigenvalues(
            s.data.D, s.data.spectrum, s.data.exponent, s.data.eigenvalues, s.data.normalize_trace
        )
        dseed = s.seed if s.data.seed is None else s.data.seed
        eigvecs = icl_data.rotation(s.data.D, dseed) if s.data.rotate else np.eye(s.data.D)
        model = build_model(s)
        prep = model.prepare_population(eigvals, eigvecs)
        data = None
    else:
        data = data if data is not None else load_data(s)
        model = build_model(s, data.D, data.N)
        model.device = device
        prep = model.prepare(data.tokens, data.labels)
        tests = {k: model.prepare_eval(*v) for k, v in data.tests.items()}
        eigvals, eigvecs = data.eigvals, data.eigvecs
    if s.init.from_file:
        arrays = read_npz(s.init.from_file, "init.from_file")
        with icl_data.naming_file("init.from_file", s.init.from_file):
            theta = model.from_arrays(arrays)
    elif s.init.match == "attn-m":
        theta = matched_init(s, model)
    else:
        with np.errstate(over="ignore"):  # an overflow is reported below, in one line
            theta = model.init(
                s.init.scheme, s.init.scale, s.seed if s.init.seed is None else s.init.seed
            )
        if not np.isfinite(theta).all():
            raise ConfigError(
                f"init.scale: {s.init.scale:g} makes the initial weights overflow to inf; lower init.scale"
            )
    return IclRun(model, prep, tests, eigvals, eigvecs, theta, data)


def matched_init(s: Any, model: Any) -> np.ndarray:
    """mlp-cubic weights with the function of attn-m's initial draw (same D, N, H, ρ, loss, seed
    and scale; scheme 'reference', so its in-weight blocks start at zero and the two models start
    from the same predictor): W1_i = vec(U_i), w2_i = v_i (``mlp_cubic.from_attn_m``)."""
    from .attn_m import AttnM
    from .mlp_cubic import from_attn_m

    attn = AttnM(
        model.D, model.H, model.N, attention_scale=s.model.attention_scale, loss=s.model.loss
    )
    seed = s.seed if s.init.seed is None else s.init.seed
    return from_attn_m(attn, attn.init("reference", s.init.scale, seed))


@dataclass
class ContextTests:
    """Models and prepared evaluation data at each tested context length N′."""

    lengths: np.ndarray
    models: list
    preps: list[Stats | PerSample]

    def losses(self, theta: np.ndarray) -> np.ndarray:
        return np.array(
            [m.loss_value(theta, p) for m, p in zip(self.models, self.preps, strict=True)]
        )


def context_tests(s: Any, p: IclRun) -> ContextTests | None:
    """The evaluation at ``test.context_lengths`` (None when not asked for)."""
    lengths = s.test.context_lengths
    if not lengths:
        return None
    D = p.model.D
    models, preps = [], []
    seed = s.seed if s.data.seed is None else s.data.seed
    for n in lengths:
        m = build_model(s, D, int(n))
        if s.data.population:
            preps.append(m.prepare_population(p.eigvals, p.eigvecs))
        else:
            tok, lab = icl_data.context_test_set(
                s.data.n_test, int(n), p.eigvals, p.eigvecs, seed, center=s.data.center
            )
            preps.append(m.prepare_eval(tok, lab))
        models.append(m)
    return ContextTests(np.asarray(lengths, dtype=np.int64), models, preps)


def context_theory(s: Any, p: IclRun, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """L(Γ*(N); N′) and L*(N′) of the reduced predictor ŷ = βᵀΓx_q (model units) from the
    population moments (yy, c, C) of the run's own loss (last-token or cumulative):
    L(Γ; n) = yy_n − 2 vec(Γ)ᵀc_n + vec(Γ)ᵀC_n vec(Γ), Γ*(N) = C_N⁻¹c_N (for the last-token loss
    the paper's (Λ + (Λ + trΛ I)/N)⁻¹), L*(n) = yy_n − c_nᵀC_n⁻¹c_n."""
    from .problem import population_moments

    model = p.model
    mom = lambda n: population_moments(p.eigvals, p.eigvecs, int(n), model.scale, model.loss)  # noqa: E731
    yy, c, C = mom(model.N)
    gam = np.linalg.solve(C, c)
    L_conv, L_star = [], []
    for n in lengths.tolist():
        yy, c, C = mom(n)
        L_conv.append(float(yy - 2.0 * gam @ c + gam @ C @ gam))
        L_star.append(float(yy - c @ np.linalg.solve(C, c)))
    return {
        "theory/test_context/L_of_Gamma_star": np.array(L_conv),
        "theory/test_context/L_star": np.array(L_star),
    }


def eq21_theory(
    s: Any, p: IclRun, times: np.ndarray
) -> tuple[np.ndarray | None, dict, np.ndarray | None]:
    """Eq. 21 beside a rank-one ATTN_S population run (last-token loss), from its initial heads
    (:func:`fastdyn.models.icl.attn_s.theory.eq21_chain`): the series ``theory/eq21/Gamma_eig``
    (save × D, e_dᵀΓe_d = κv³ in the columns of ``/params/Gamma_eig``) and the statics
    ``theory/eq21/plateau_duration``, ``drop_time`` (half-rise times), ``v0`` and ``head`` (D,;
    0-based head index), and the directions (D,) where the chain does not hold (``shared``, in
    the same columns). (None, {}, None) for any other run."""
    model = p.model
    if not (model.name == "attn-s" and model.R == 1 and s.data.population and model.loss == "last"):
        return None, {}, None
    from .attn_s import theory as ts

    order = np.argsort(p.eigvals)[::-1]  # the chain runs in decreasing-eigenvalue order
    lam, E = np.asarray(p.eigvals)[order], np.asarray(p.eigvecs)[:, order]
    r, K, Q = model.views(p.theta)
    ch = ts.eq21_chain(r[:, -1], K[:, 0, : model.D] @ E, Q[:, 0, :] @ E, lam, model.N, model.kappa)
    pred = ts.eq21_gamma_eig(ch, lam, model.N, times, model.kappa)
    back = np.argsort(order)  # to the columns of eigvecs, as /params/Gamma_eig
    names = {"duration": "plateau_duration", "drop": "drop_time", "v0": "v0", "head": "head"}
    static = {f"theory/eq21/{nm}": np.asarray(ch[k])[back] for k, nm in names.items()}
    static["theory/eq21/head"] = static["theory/eq21/head"].astype(np.int64)
    return pred[:, back], static, np.asarray(ch["shared"])[back]


def _eq21_note(pred: np.ndarray | None, static: dict, shared: np.ndarray | None) -> dict[str, str]:
    """A root ``note`` naming the directions where the Eq. 21 chain does not apply: heads learned
    them together (``shared``: a head passed half-rise before its own plateau, during the
    plateau of the direction then learned), or the curve has no small-weight past (NaN before
    t_s)."""
    if pred is None:
        return {}
    bad = np.asarray(shared, bool) | ~np.all(np.isfinite(pred), axis=0)
    if not bad.any():
        return {}
    dirs = ", ".join(str(d + 1) for d in np.flatnonzero(bad))
    return {"note": (f"theory/eq21: not a prediction for direction(s) {dirs} (columns of "
                     "params/Gamma_eig): the chain assumes each direction is learned by a head of "
                     "its own, one after another, and here heads learned directions together")}  # fmt: skip


def pcr_theory(s: Any, p: IclRun) -> dict[str, np.ndarray]:
    """``theory/pcr_loss`` (m = 0..D): the last-token loss of the PCR predictor at M_m,
    ŷ = βᵀ Γ_m x_q with Γ_m = Σ_{d≤m} λ_d⁻¹(1 + (1 + trΛ/λ_d)/N)⁻¹ e_d e_dᵀ (paper units) — exact
    from the population moments for ``data.population`` runs (it equals L(M_m)), else on the IC
    test set. Empty for the cumulative loss or a finite-P run without test sets."""
    from .attn_m import theory as tm
    from .problem import population_moments

    model, D, N = p.model, p.model.D, p.model.N
    if model.loss != "last" or not (s.data.population or "ic" in p.tests):
        return {}
    gammas = [tm.pcr_predictor(p.eigvals, p.eigvecs, N, m) for m in range(D + 1)]
    if s.data.population:
        yy, c, C = population_moments(p.eigvals, p.eigvecs, N, "N", "last")
        L = [yy - 2 * g.ravel() @ c + g.ravel() @ C @ g.ravel() for g in gammas]
    else:
        tok, lab = p.data.tests["ic"]
        beta = np.einsum("pnd,pn->pd", tok[:, :N, :D], lab[:, :N]) / N
        xq, yq = tok[:, N, :D], lab[:, N]
        L = [np.mean((yq - np.einsum("pa,ab,pb->p", beta, g, xq)) ** 2) for g in gammas]
    return {"theory/pcr_loss": np.array(L, dtype=np.float64)}


def batch_size(s: ICLSettings) -> int | None:
    """Minibatch size of the step loop (None: full batch): ``optim.batch_size`` for sgd, adam
    and adamw (the config refuses it with gd, which is full batch by definition)."""
    return s.optim.batch_size


def _train_moments(model: Any, prep: Stats | PerSample) -> tuple | None:
    """(G, b, SpT, xqT, y) of a last-token linear train set whose training takes its moments
    (taken here once, kept in ``prep`` for the training steps), else None."""
    if not isinstance(prep, LinearData) or model.loss != "last":
        return None
    from .attn_m.kernels import full_moments

    got = full_moments(prep)
    return None if got is None else (got[0], got[1], prep.SpT, prep.xqT, prep.yq)


def setup(cfg: Any, device: Device = Device.CPU) -> TrainedSetup:
    """The trained-model driver's view of a validated ICL config (``fastdyn.models.icl.config``) on
    ``device``."""
    s = cfg.settings
    try:  # data and weights files are read and checked before any output is created
        p = prepare(s, device=device)
    except ValueError as e:  # a bad data/weights file or data settings: the user's to fix
        raise ConfigError(str(e).splitlines()[0]) from None
    model, data = p.model, p.data
    model.device = device
    steps = s.schedule.steps()
    times = 2.0 * s.optim.lr * steps
    theory = theory_series(model, p.eigvals, p.eigvecs, s, times)
    tests = [] if data is None else sorted(data.tests)
    D, H = model.D, model.H
    series: dict[str, tuple[int, ...]] = {"loss/train": ()}
    series |= {f"loss/test_{k}": () for k in tests}
    series |= {"params/value_weights": (H,), "params/Gamma": (D, D), "params/Gamma_eig": (D,)}
    eq10 = theory.get("eq10_loss")
    if eq10 is not None:
        series["theory/loss/train"] = ()
    eq21, eq21_static, eq21_shared = eq21_theory(s, p, times)
    if eq21 is not None:
        series["theory/eq21/Gamma_eig"] = (D,)
    ctx = context_tests(s, p)
    if ctx is not None:
        series["loss/test_context"] = (len(ctx.lengths),)
    diag = icl_diagnostics.series(model, s.output, p.theta)  # output.diagnostics / snapshots
    series |= diag
    static = {
        "theory/plateaus": np.asarray(theory["plateau_losses"]),
        "theory/L_star": np.asarray(theory["L_star"]),
        "theory/Gamma_star": np.asarray(theory["Gamma_star"]),
        "theory/eigvals": np.asarray(theory["eigvals"]),
    }
    static |= eq21_static | pcr_theory(s, p)
    finals = [f"params/final/{k}" for k in model.array_axes if k not in _SERIES_WEIGHTS]
    described = descriptions([*series, *static, *finals])
    if data is not None:  # finite data: the train set's own minimum beside the population L*
        from .train_minimum import spans, train_set_minimum

        lp = train_set_minimum(model, data.tokens, data.labels, _train_moments(model, p.prep))
        if lp is not None:
            static["theory/train_minimum"] = np.asarray(lp)
            bound = "" if spans(model) else "; a lower bound: these heads do not reach it"
            described["theory/train_minimum"] = ("1", f"train-set minimum (P = {data.P}{bound})")
    scales = None
    if ctx is not None:
        static["test/context_length"] = ctx.lengths
        static |= context_theory(s, p, ctx.lengths)
        scales = {"test/context_length": ("context_length", {"loss/test_context": 1})}
    if s.data.save and data is not None:
        static["data/tokens"] = data.tokens
        static["data/labels"] = data.labels
        for k, (xt, yt) in data.tests.items():
            static[f"data/test_{k}/tokens"] = xt
            static[f"data/test_{k}/labels"] = yt
    described = descriptions(static) | described

    def row(
        i: int, step: int, losses: dict[str, float], weights: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        rows = {"loss/train": np.array([losses["train"]])}
        for k in tests:
            rows[f"loss/test_{k}"] = np.array([losses[f"test_{k}"]])
        for k in _SERIES_WEIGHTS:
            rows[f"params/{k}"] = np.asarray(weights[k])[None]
        if eq10 is not None:
            rows["theory/loss/train"] = np.array([eq10[i]])
        if eq21 is not None:
            rows["theory/eq21/Gamma_eig"] = eq21[i][None]
        if ctx is not None:
            rows["loss/test_context"] = np.asarray(weights["test_context"])[None]
        for k in diag:
            rows[k] = np.asarray(weights[k])[None]
        return rows

    def final(theta: np.ndarray) -> dict[str, np.ndarray]:
        return {
            f"params/final/{k}": np.asarray(v)
            for k, v in model.to_arrays(theta).items()
            if k not in _SERIES_WEIGHTS
        }

    return TrainedSetup(
        model=model, prep=p.prep, theta=p.theta, optim=s.optim, batch_size=batch_size(s),
        epochs=s.schedule.epochs, save_steps=steps, time_per_step=2.0 * s.optim.lr, seed=s.seed,
        series=series, observe=observer(model, p.tests, p.eigvecs, ctx, diag), row=row, final=final,
        static=static, scales=scales, extra_attrs={"n_trained": int(model.n_trained)} | _eq21_note(eq21, eq21_static, eq21_shared),
        dims=dims(model, [*series, *static, *(f"params/final/{k}" for k in model.array_axes)]), axes=AXES, descriptions=described,
        time_units=TIME_UNITS, time_long_name=TIME_LONG_NAME,
        checkpoint_every=s.output.checkpoint_every,
    )  # fmt: skip
