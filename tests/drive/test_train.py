"""The training loop and run_icl: save callback, diagnostics, divergence, thread determinism,
resume, and settings validation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fastdyn.drive import train as train_mod
from fastdyn.drive.optim import make_optimizer
from fastdyn.drive.train import DivergedError, train
from fastdyn.models import _spec
from fastdyn.models._spec import Prepared
from fastdyn.models.icl.attn_m import AttnM
from fastdyn.models.icl.problem import generate
from fastdyn.models.icl.settings import (
    DataSettings,
    ICLSettings,
    InitSettings,
    ModelSettings,
    OptimSettings,
    ScheduleSettings,
)

from ._icl_run import run_icl

ROOT = Path(__file__).resolve().parents[2]


def _small(**kw):
    base = ICLSettings(
        data=DataSettings(D=3, N=6, P=300, n_test=50),
        model=ModelSettings(H=2),
        init=InitSettings(scale=0.05),
        optim=OptimSettings(lr=0.05),
        schedule=ScheduleSettings(epochs=40, save_every=10),
    )
    return replace(base, **kw)


def test_on_save_calls_and_series():
    calls = []
    out = run_icl(_small(), lambda step, losses, weights: calls.append((step, losses, weights)))
    assert [c[0] for c in calls] == [0, 10, 20, 30, 40]
    step, losses, w = calls[-1]
    assert set(losses) == {"train", "test_ic", "test_iw"}
    assert {"W_V", "W_KQ", "value_weights", "Gamma", "Gamma_eig"} <= set(w)
    assert w["W_V"].shape == (2, 4, 4) and w["Gamma"].shape == (3, 3)
    s = out["series"]
    np.testing.assert_array_equal(s["step"], [0, 10, 20, 30, 40])
    np.testing.assert_allclose(out["time"], 2 * 0.05 * s["step"])
    # the recorded train loss is the loss of the saved weights
    m = out["model"]
    L = m.loss_value(out["theta"], m.prepare(out["data"].tokens, out["data"].labels))
    assert L == s["loss/train"][-1]
    assert s["loss/train"][-1] < s["loss/train"][0]
    np.testing.assert_array_equal(w["value_weights"], out["weights"]["W_V"][:, -1, -1])
    Q = out["data"].eigvecs
    np.testing.assert_allclose(w["Gamma_eig"], np.diag(Q.T @ w["Gamma"] @ Q), rtol=1e-13)
    assert out["n_trained"] == 2 * 16
    assert {"plateau_losses", "L_star", "Gamma_star"} <= set(out["theory"])


def test_registry_entries():
    import fastdyn.models.icl.registry  # noqa: F401

    for name in ("attn-m", "attn-s", "mlp-cubic"):
        e = _spec.get(name)
        assert e.kind == "trained"
        assert e.run.setup is not None and e.run.schema is not None


def test_divergence_names_step_and_cause():
    with pytest.raises(
        DivergedError,
        match=r"^diverged at step \d+: the training loss is (nan|inf|[0-9.e+]+)\b.*optim.lr = 1000.*2/λ_max",
    ):
        run_icl(_small(optim=OptimSettings(lr=1e3), init=InitSettings(scale=1.0)))


def test_divergence_in_fused_reduced_path():
    s = _small(
        data=DataSettings(D=3, N=6, population=True),
        model=ModelSettings(H=2, reduced=True),
        optim=OptimSettings(lr=1e3),
        init=InitSettings(scale=1.0),
        schedule=ScheduleSettings(epochs=200, save_every=100),
    )
    with pytest.raises(DivergedError, match=r"^diverged at step \d+"):
        run_icl(s)


def test_fused_gd_equals_python_path():
    s = _small(
        data=DataSettings(D=3, N=6, population=True),
        model=ModelSettings(name="attn-s", H=3, R=1, reduced=True),
        optim=OptimSettings(lr=0.5),
        schedule=ScheduleSettings(epochs=500, save_every=100),
    )
    fused = run_icl(s)["series"]["loss/train"]
    stepwise = run_icl(replace(s, schedule=ScheduleSettings(epochs=500, save_every=1)))["series"][
        "loss/train"
    ][::100]
    # same kernels; the Python path computes Γ with einsum in another order: round-off only
    np.testing.assert_allclose(fused, stepwise, rtol=1e-12)


def _spy_gd_steps(monkeypatch, calls: list[int], cls=AttnM) -> None:
    """A model class's fused GD steps, recording the size of each block it is asked for."""
    orig = cls.gd_steps

    def gd_steps(self, prep):
        advance = orig(self, prep)

        def spy(theta, lr, losses, limit):
            calls.append(losses.shape[0])
            return advance(theta, lr, losses, limit)

        return spy

    monkeypatch.setattr(cls, "gd_steps", gd_steps)


def _fused_and_stepwise(monkeypatch, m, prep, th0, cls) -> list[int]:
    """Trains 120 GD steps (saves at 0, 1, 9, 40, 41, 120; fused blocks of 3 steps first) with
    ``cls``'s fused steps and then one step at a time; asserts θ and every record bit-identical
    and the fused steps used (every step but the saves' 5 updates); returns the block sizes."""
    saves = [0, 1, 9, 40, 41, 120]

    def run():
        th = th0.copy()
        rec = train(m, prep, th, make_optimizer("gd", m.n_params, 0.05), 120, saves)
        return th, rec

    calls: list[int] = []
    _spy_gd_steps(monkeypatch, calls, cls)
    monkeypatch.setattr(train_mod, "FIRST_BLOCK", 3)  # blocks that split the gaps between saves
    fused, rec_f = run()
    assert sum(calls) == 120 - 5 and calls[0] == 3
    monkeypatch.setattr(cls, "gd_steps", lambda self, prep: None)
    stepwise, rec_s = run()
    assert not np.array_equal(fused, th0)
    np.testing.assert_array_equal(fused, stepwise)
    for k in rec_s:
        np.testing.assert_array_equal(rec_f[k], rec_s[k])
    return calls


@pytest.mark.parametrize("ic_only", [False, True])
def test_fused_per_sample_gd_equals_one_step_at_a_time(monkeypatch, ic_only):
    d = generate(3, 6, 2500, seed=4)  # three reduction blocks, the last one partial
    m = AttnM(3, 2, 6, attention_scale="1", ic_only=ic_only)
    calls = _fused_and_stepwise(
        monkeypatch, m, m.prepare(d.tokens, d.labels), m.init("paper", 0.1, 1), AttnM
    )
    assert len(calls) >= 4  # the first gap in two blocks at least


@pytest.mark.parametrize("moments", [True, False])
def test_fused_gd_of_attn_s_equals_one_step_at_a_time(monkeypatch, moments):
    from fastdyn.models.icl.attn_s import AttnS

    d = generate(3, 6, 1500, seed=5)  # NQ = 30: the data's moments pay (4·NQ ≤ 1500 rows)
    m = AttnS(3, 2, 6, R=2, attention_scale="1")
    prep = m.prepare(d.tokens, d.labels)
    prep.moments = moments  # False: the per-sample kernel in the fused loop
    _fused_and_stepwise(monkeypatch, m, prep, m.init("paper", 0.3, 1), AttnS)
    assert (prep.data_moments is not None) == moments


def test_fused_statistics_gd_of_the_mlp_equals_one_step_at_a_time(monkeypatch):
    from fastdyn.models.icl.mlp_cubic import MLPCubic

    d = generate(3, 6, 500, seed=4)  # K = 9 features: the set's statistics pay (4·K ≤ 500)
    m = MLPCubic(3, 4, 6)
    prep = m.prepare(d.tokens, d.labels)
    _fused_and_stepwise(monkeypatch, m, prep, m.init("paper", 0.3, 1), MLPCubic)
    assert prep.stats is not None


def test_fused_per_sample_divergence_is_reported_as_one_step_at_a_time(monkeypatch):
    d = generate(3, 6, 300, seed=1)
    m = AttnM(3, 2, 6)
    prep = m.prepare(d.tokens, d.labels)
    th0 = m.init("paper", 1.0, 0)

    def message():
        opt = make_optimizer("gd", m.n_params, 1e3)
        with pytest.raises(DivergedError) as e:
            train(m, prep, th0.copy(), opt, 200, [0, 200])
        return e.value.step, str(e.value)

    calls: list[int] = []
    _spy_gd_steps(monkeypatch, calls)
    fused = message()
    assert calls and fused[0] > 0  # diverged inside a fused block
    monkeypatch.setattr(AttnM, "gd_steps", lambda self, prep: None)
    assert fused == message()


def _small_attn_m():
    """A small ATTN_M (D = 3, H = 2, N = 6) on 300 samples, its prepared data and weights."""
    d = generate(3, 6, 300, seed=2)
    m = AttnM(3, 2, 6)
    return m, m.prepare(d.tokens, d.labels), m.init("paper", 0.1, 3)


def test_stop_between_fused_blocks_checkpoints_there_and_resumes_bit_identically(monkeypatch):
    m, prep, th0 = _small_attn_m()
    saves = [0, 50, 100]
    monkeypatch.setattr(train_mod, "FIRST_BLOCK", 4)
    ref = th0.copy()
    rec_ref = train(m, prep, ref, make_optimizer("gd", m.n_params, 0.05), 100, saves)

    class Stop(Exception):
        pass

    at = {}

    def on_checkpoint(step, th, opt):
        if step not in saves:  # only ever asked between blocks when poll() says stop
            at["step"], at["theta"] = step, th.copy()
            raise Stop

    th = th0.copy()
    with pytest.raises(Stop):
        train(m, prep, th, make_optimizer("gd", m.n_params, 0.05), 100, saves,
              on_checkpoint=on_checkpoint, poll=lambda: True)  # fmt: skip
    assert at["step"] == 1 + 4  # the save's step, then the first block of FIRST_BLOCK steps
    th = at["theta"]
    rest = [s for s in saves if s >= at["step"]]  # as the driver resumes
    rec = train(m, prep, th, make_optimizer("gd", m.n_params, 0.05), 100, rest,
                first_step=at["step"], resumed=True)  # fmt: skip
    np.testing.assert_array_equal(th, ref)
    np.testing.assert_array_equal(rec["loss/train"], rec_ref["loss/train"][1:])


def test_sgd_reproducible_and_resume():
    d = generate(3, 6, 300, seed=1)
    m = AttnM(3, 2, 6)
    prep = m.prepare(d.tokens, d.labels)
    th0 = m.init("reference", 0.05, 2)

    def run(n, first=0, th=None, opt=None):
        th = th0.copy() if th is None else th
        opt = make_optimizer("adam", m.n_params, 0.01) if opt is None else opt
        train(m, prep, th, opt, n, [n], batch_size=64, seed=9, first_step=first)
        return th, opt

    a, _ = run(20)
    b, _ = run(20)
    np.testing.assert_array_equal(a, b)
    half, opt = run(10)
    state = opt.state_dict()
    opt2 = make_optimizer("adam", m.n_params, 0.01)
    opt2.load_state(state)
    c, _ = run(20, first=10, th=half.copy(), opt=opt2)
    np.testing.assert_array_equal(a, c)  # resume from a checkpoint is bit-identical


_DETERMINISM = textwrap.dedent(
    """
    import hashlib, numpy as np
    from fastdyn.models.icl.problem import generate
    from fastdyn.models.icl.attn_m import AttnM
    from fastdyn.models.icl.attn_s import AttnS
    from fastdyn.models.icl.mlp_cubic import MLPCubic
    from fastdyn.drive.optim import make_optimizer
    from fastdyn.drive.train import train
    import numba
    d = generate(3, 5, 2500, seed=3)   # three reduction blocks, the last one partial
    h = hashlib.sha256()
    for m in (AttnM(3, 2, 5), AttnM(3, 2, 5, softmax=True), AttnS(3, 3, 5, R=2, loss="cumulative"),
              MLPCubic(3, 2, 5), AttnM(3, 2, 5, reduced=True)):
        th = m.init("paper", 0.1, 1)
        rec = train(m, m.prepare(d.tokens, d.labels), th, make_optimizer("gd", m.n_params, 0.05), 5, [0, 5])
        h.update(th.tobytes()); h.update(rec["loss/train"].tobytes())
    print(numba.get_num_threads(), h.hexdigest())
    """
)


def test_bit_identical_for_1_and_2_threads():
    out = {}
    for n in ("1", "2"):
        env = dict(os.environ, NUMBA_NUM_THREADS=n)
        r = subprocess.run(
            [sys.executable, "-c", _DETERMINISM],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr
        threads, digest = r.stdout.split()
        assert threads == n
        out[n] = digest
    assert out["1"] == out["2"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: DataSettings(N=0), r"^data.N: must be an integer ≥ 1 and ≤ 1000000, got 0$"),
        (lambda: DataSettings(P=-5), r"^data.P: must be an integer ≥ 1 and ≤ 10000000000, got -5$"),
        (lambda: ModelSettings(H=0), r"^attention.H: must be an integer ≥ 1 and ≤ 1000000, got 0$"),
        (
            lambda: ModelSettings(name="gpt"),
            r"^model: must be one of 'attn-m', 'attn-s', 'mlp-cubic', got 'gpt'$",
        ),
        (
            lambda: ModelSettings(attention_scale="sqrt"),
            r"^attention.attention_scale: must be one of 'N', '1', got 'sqrt'$",
        ),
        (
            lambda: ModelSettings(loss="mean"),
            r"^attention.loss: must be one of 'last', 'cumulative', got 'mean'$",
        ),
        (
            lambda: ModelSettings(name="mlp-cubic", softmax=True),
            r"^attention.softmax: only for attn-m and attn-s",
        ),
        (
            lambda: ModelSettings(softmax=True, reduced=True),
            r"^attention.reduced: the reduced path exists for linear models only",
        ),
        (
            lambda: ICLSettings(model=ModelSettings(name="attn-s", H=4, R=5)),
            r"^attention.R: must be ≤ data.D = 4 for attn-s, got 5$",
        ),
        (
            lambda: ICLSettings(model=ModelSettings(name="attn-s", H=3, R=1)),
            r"^attention.H: H\*R must be ≥ data.D = 4 for attn-s, got H\*R = 3$",
        ),
        (
            lambda: ICLSettings(data=DataSettings(population=True)),
            r"^data.population: needs attention.reduced = true",
        ),
        (
            lambda: InitSettings(scheme="xavier"),
            r"^init.scheme: must be one of 'paper', 'reference', got 'xavier'$",
        ),
        (
            lambda: InitSettings(scale=float("nan")),
            r"^init.scale: must be a finite number ≥ 0, got nan$",
        ),
        (lambda: OptimSettings(lr=0.0), r"^optim.lr: must be a finite number > 0, got 0.0$"),
        (
            lambda: OptimSettings(name="lbfgs"),
            r"^optim.name: must be one of 'gd', 'sgd', 'adam', 'adamw', got 'lbfgs'$",
        ),
        (
            lambda: ScheduleSettings(epochs=0),
            r"^schedule.epochs: must be an integer ≥ 1 and ≤ 1000000000000, got 0$",
        ),
        (
            lambda: ScheduleSettings(epochs=10, save_steps=(11,)),
            r"^schedule.save_steps: must be ≤ schedule.epochs \(10\), got 11$",
        ),
        (
            lambda: DataSettings(icl_fraction=2.0),
            r"^data.icl_fraction: must be a finite number ≥ 0 and ≤ 1, got 2.0$",
        ),
    ],
)
def test_bad_settings_one_line(build, message):
    with pytest.raises(ValueError, match=message) as e:
        build()
    assert "\n" not in str(e.value)


def test_from_file_data_and_weights(tmp_path):
    g = np.random.default_rng(0)
    x, y = g.normal(size=(40, 5, 3)), g.normal(size=(40, 5))
    np.savez(tmp_path / "d.npz", x=x, y=y)
    s = _small(data=DataSettings(D=3, N=4, from_file=str(tmp_path / "d.npz")))
    out = run_icl(s)
    assert out["data"].P == 40
    np.savez(tmp_path / "w.npz", **out["weights"])
    out2 = run_icl(
        replace(
            s,
            init=InitSettings(from_file=str(tmp_path / "w.npz")),
            schedule=ScheduleSettings(epochs=1, save_every=1),
        )
    )
    assert out2["series"]["loss/train"][0] == out["series"]["loss/train"][-1]
    np.savez(tmp_path / "bad.npz", x=x[:, :, :2], y=y[:, :3])
    with pytest.raises(
        ValueError,
        match=r"^data.from_file: '.*bad.npz': array 'y' must have shape \(40, 5\) to match 'x', got \(40, 3\)$",
    ):
        run_icl(replace(s, data=DataSettings(from_file=str(tmp_path / "bad.npz"))))
    x[3, 2, 1] = np.nan
    np.savez(tmp_path / "nan.npz", x=x, y=y)
    with pytest.raises(
        ValueError,
        match=r"^data.from_file: '.*nan.npz': array 'x' must be finite, found NaN or inf$",
    ):
        run_icl(replace(s, data=DataSettings(from_file=str(tmp_path / "nan.npz"))))
    np.savez(tmp_path / "wbad.npz", W_V=np.zeros((2, 4, 4)), W_KQ=np.zeros((2, 4, 3)))
    with pytest.raises(
        ValueError,
        match=r"^init.from_file: '.*wbad.npz': array 'W_KQ' must have shape \(2, 4, 4\), got \(2, 4, 3\)$",
    ):
        run_icl(replace(s, init=InitSettings(from_file=str(tmp_path / "wbad.npz"))))


class _Quadratic:
    """L(θ) = θ², so full-batch GD multiplies θ by 1 − 2η each step: at η = 1.25 the loss grows
    2.25× per step and first exceeds EXPLODE = 10^6 × L(θ_0) at step 18 (2.25^17 ≈ 9.7e5)."""

    n_params = 1

    def loss_and_grad(self, theta, prep, grad, idx):
        grad[0] = 2.0 * theta[0]
        return float(theta[0] ** 2)

    def loss_value(self, theta, prep):
        return float(theta[0] ** 2)


def _diverged_at(theta0: float, first_step: int, explode_ref: float | None) -> int:
    from fastdyn.drive.optim import make_optimizer

    theta = np.array([theta0])
    saves = np.arange(0, 101, 5)
    with pytest.raises(train_mod.DivergedError) as e:
        train_mod.train(
            _Quadratic(), Prepared(n_samples=1), theta, make_optimizer("gd", 1, 1.25), 100,
            saves[saves >= first_step], observe=lambda th: ({}, {}), first_step=first_step,
            resumed=first_step > 0, explode_ref=explode_ref,
        )  # fmt: skip
    return e.value.step


def test_a_resumed_run_diverges_where_the_whole_run_does():
    """The divergence baseline is the first recorded loss; a resume passes it (its file holds it)
    instead of taking the loss where it resumes, 2.25^10 × higher here."""
    assert _diverged_at(1.0, 0, None) == 18
    theta10 = (1.0 - 2.0 * 1.25) ** 10  # θ after 10 steps: the checkpoint a resume starts from
    assert _diverged_at(theta10, 10, 1.0) == 18
    assert _diverged_at(theta10, 10, None) == 28  # without it: the baseline of step 10


def test_fused_statistics_gd_near_an_exact_fit_takes_the_rows_as_one_step_at_a_time(
    monkeypatch,
):
    # labels made by the MLP at θ*: near θ* the loss from the statistics is below the floor
    # (models.icl.config.MOMENT_FLOOR); the fused loop stops there and the step comes from the rows
    from fastdyn.models.icl.feature_kernels import prepare_features
    from fastdyn.models.icl.mlp_cubic import MLPCubic

    d = generate(3, 6, 500, seed=4)
    m = MLPCubic(3, 4, 6)
    th_star = m.init("paper", 0.5, 2)
    labels = d.labels.copy()
    Z, _ = prepare_features(d.tokens, labels, m.scale, m.loss)  # the query label is not in z
    labels[:, -1] = Z[:, 0, :] @ m.gamma(th_star).ravel()
    prep = m.prepare(d.tokens, labels)
    th0 = th_star + 1e-6 * np.random.default_rng(0).standard_normal(m.n_params)

    def run():
        th = th0.copy()
        rec = train(m, prep, th, make_optimizer("gd", m.n_params, 0.05), 40, [0, 20, 40])
        return th, rec

    calls: list[int] = []
    _spy_gd_steps(monkeypatch, calls, MLPCubic)
    fused, rec_f = run()
    monkeypatch.setattr(MLPCubic, "gd_steps", lambda self, prep: None)
    stepwise, rec_s = run()
    assert calls and np.all(np.asarray(rec_s["loss/train"]) >= 0.0)
    L_rows = m.loss_and_grad(stepwise, prep, np.empty(m.n_params), np.arange(500))
    assert rec_s["loss/train"][-1] == L_rows < 1e-6 * prep.stats.yy  # from the rows
    np.testing.assert_array_equal(fused, stepwise)
    for k in rec_s:
        np.testing.assert_array_equal(rec_f[k], rec_s[k])


def _spy_optimizer_steps(monkeypatch, calls: list[int], cls=AttnM) -> None:
    """A model class's fused optimiser steps, recording the steps each block takes."""
    orig = cls.optimizer_steps

    def optimizer_steps(self, prep):
        advance = orig(self, prep)

        def spy(theta, batches, update, losses, limit):
            assert batches.shape[0] == (losses.shape[0] if batches.size else 0)
            done = advance(theta, batches, update, losses, limit)
            calls.append(done)
            return done

        return spy

    monkeypatch.setattr(cls, "optimizer_steps", optimizer_steps)


def test_minibatch_block_is_the_stacked_minibatch_indices():
    from fastdyn.drive.optim import minibatch_block, minibatch_indices

    for first, n in ((0, 1), (5, 40), (7, 3)):  # 300 // 64 = 4 batches an epoch: blocks span epochs
        got = minibatch_block(3, first, n, 300, 64)
        want = np.stack([minibatch_indices(3, first + s, 300, 64) for s in range(n)])
        assert got.dtype == np.int64 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


#: (model, optimiser, batch size, steps): ATTN_M last-token and cumulative (prefix rows), ATTN_S
#: of rank 2; plain SGD, heavy-ball momentum, Adam with L2 decay, AdamW; minibatches, and the
#: full batch (None: from the data's moments, "rows": from the rows). The cumulative minibatch
#: has 6 · 2800 rows a step: 17 reduction blocks, so the blocks run on the numba threads
_OPTIMIZER_CASES = {
    "attn-m sgd": (lambda: AttnM(3, 2, 6), ("sgd", {}), 64, 300),
    "attn-m ic_only adam": (
        lambda: AttnM(3, 2, 6, attention_scale="1", ic_only=True),
        ("adam", {"weight_decay": 0.01}),
        64,
        300,
    ),
    "attn-m cumulative momentum": (
        lambda: AttnM(3, 2, 6, loss="cumulative"),
        ("sgd", {"momentum": 0.9}),
        2800,
        30,
    ),
    "attn-s adamw": (
        lambda: __import__("fastdyn.models.icl.attn_s", fromlist=["AttnS"]).AttnS(3, 2, 6, R=2),
        ("adamw", {"weight_decay": 0.01}),
        64,
        300,
    ),
    "attn-m adam full batch": (lambda: AttnM(3, 2, 6), ("adam", {}), None, 300),
    "attn-m cumulative momentum full batch, rows": (
        lambda: AttnM(3, 2, 6, loss="cumulative"),
        ("sgd", {"momentum": 0.5}),
        "rows",
        100,
    ),
}


@pytest.mark.parametrize("case", list(_OPTIMIZER_CASES))
def test_fused_optimizer_steps_equal_one_step_at_a_time(monkeypatch, case):
    """Optimiser steps in fused blocks (``optimizer_steps``) against one ``loss_and_grad`` and
    ``optimizer.step`` per step: θ, every record and the optimiser's state bit-identical, on 1
    and 2 numba threads."""
    import numba

    build, (name, kw), B, n = _OPTIMIZER_CASES[case]
    m = build()
    cls = type(m)
    d = generate(3, 6, 3000 if B == 2800 else 300, seed=6)
    prep = m.prepare(d.tokens, d.labels)
    if B == "rows":
        prep.moments = False  # the per-sample kernel on every row (else the data's moments)
    full = not isinstance(B, int)
    assert prep.moments or B == "rows"
    B = None if full else B
    th0 = m.init("paper", 0.3, 2)
    saves = [0, 1, 9, n // 2, n]

    def run():
        th = th0.copy()
        opt = make_optimizer(name, m.n_params, 0.01, **kw)
        rec = train(m, prep, th, opt, n, saves, batch_size=B, seed=9)
        return th, rec, opt.state_dict()

    monkeypatch.setattr(train_mod, "FIRST_BLOCK", 3)  # blocks that split the gaps between saves
    out = {}
    before = numba.get_num_threads()
    try:
        for nt in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(nt)
            calls: list[int] = []
            with monkeypatch.context() as mp:
                _spy_optimizer_steps(mp, calls, cls)
                out[nt, "fused"] = run()
            assert sum(calls) == n - 4 and calls[0] == 3  # all but the saves' 4 updates
            with monkeypatch.context() as mp:
                mp.setattr(cls, "optimizer_steps", lambda self, prep: None)
                out[nt, "per step"] = run()
    finally:
        numba.set_num_threads(before)
    (th_ref, rec_ref, st_ref), *rest = out.values()
    assert not np.array_equal(th_ref, th0)
    assert rec_ref["loss/train"][-1] < rec_ref["loss/train"][0]
    for th, rec, st in rest:
        np.testing.assert_array_equal(th, th_ref)
        assert rec.keys() == rec_ref.keys() and st.keys() == st_ref.keys()
        for k in rec:
            np.testing.assert_array_equal(rec[k], rec_ref[k])
        for k in st:
            np.testing.assert_array_equal(st[k], st_ref[k])
    if name != "sgd" or kw:
        assert st_ref  # a state to compare: momentum buffer, or Adam's moments and step count
    if "step" in st_ref:
        assert st_ref["step"][0] == n


@pytest.mark.parametrize(
    ("batch", "scale", "lr"), [(32, 1.0, 30.0), (None, 0.3, 1.0)], ids=["minibatch", "full batch"]
)
def test_fused_optimizer_divergence_is_reported_as_one_step_at_a_time(
    monkeypatch, batch, scale, lr
):
    """A fused block that meets a non-finite step (or, full batch, a loss above EXPLODE times
    the first save's: here at step 14, loss ≈ 6e10) stops before it, θ and the momentum buffer as the previous step left them; the step then raises
    the same DivergedError as per step."""
    d = generate(3, 6, 300, seed=1)
    m = AttnM(3, 2, 6)
    prep = m.prepare(d.tokens, d.labels)
    th0 = m.init("paper", scale, 0)

    def message():
        th = th0.copy()
        opt = make_optimizer("sgd", m.n_params, lr, momentum=0.5)
        with pytest.raises(DivergedError) as e:
            train(m, prep, th, opt, 200, [0, 200], batch_size=batch, seed=1)
        return e.value.step, str(e.value), th, opt.state["buf"].copy()

    calls: list[int] = []
    _spy_optimizer_steps(monkeypatch, calls)
    fused = message()
    assert fused[0] > 1 and fused[0] == 1 + sum(calls)  # a fused block stopped before that step
    if batch is None:  # the explosion check: a finite loss
        assert re.search(r"the training loss is [0-9.]+e\+\d+;", fused[1]), fused[1]
    assert np.all(np.isfinite(fused[2])) and np.all(np.isfinite(fused[3]))
    monkeypatch.setattr(AttnM, "optimizer_steps", lambda self, prep: None)
    stepwise = message()
    assert fused[:2] == stepwise[:2]
    np.testing.assert_array_equal(fused[2], stepwise[2])
    np.testing.assert_array_equal(fused[3], stepwise[3])


def test_stop_between_fused_minibatch_blocks_checkpoints_there_and_resumes_bit_identically(
    monkeypatch,
):
    m, prep, th0 = _small_attn_m()
    saves = [0, 50, 100]
    monkeypatch.setattr(train_mod, "FIRST_BLOCK", 4)

    def fresh():
        return make_optimizer("adam", m.n_params, 0.01)

    ref, opt_ref = th0.copy(), fresh()
    rec_ref = train(m, prep, ref, opt_ref, 100, saves, batch_size=64, seed=5)

    class Stop(Exception):
        pass

    at = {}

    def on_checkpoint(step, th, opt):
        if step not in saves:  # only ever asked between blocks when poll() says stop
            at["step"], at["theta"], at["state"] = step, th.copy(), opt.state_dict()
            raise Stop

    with pytest.raises(Stop):
        train(m, prep, th0.copy(), fresh(), 100, saves, batch_size=64, seed=5,
              on_checkpoint=on_checkpoint, poll=lambda: True)  # fmt: skip
    assert at["step"] == 1 + 4  # the save's step, then the first block of FIRST_BLOCK steps
    assert at["state"]["step"][0] == at["step"]
    th, opt = at["theta"], fresh()
    opt.load_state(at["state"])
    rest = [s for s in saves if s >= at["step"]]  # as the driver resumes
    rec = train(m, prep, th, opt, 100, rest, batch_size=64, seed=5,
                first_step=at["step"], resumed=True)  # fmt: skip
    np.testing.assert_array_equal(th, ref)
    for k, v in opt_ref.state.items():
        np.testing.assert_array_equal(opt.state[k], v)
    np.testing.assert_array_equal(rec["loss/train"], rec_ref["loss/train"][1:])
