"""The CUDA twins against the CPU kernels, run under numba's CUDA simulator.

Collected only through tests/cuda/test_cuda_sim.py, which runs this file in a subprocess with
NUMBA_ENABLE_CUDASIM=1 (the variable must be set before numba.cuda is first imported, and the rest
of the suite must keep the real numba.cuda). Sizes are tiny: the simulator runs every CUDA thread
as a Python thread. Tolerance 1e-12 relative (issue 8): the simulator executes the kernels'
Python source with float64 arithmetic, so they differ from the CPU kernels only by summation order
(lin_cum, soft) or not at all; a wrong index or a missed term gives O(1) differences.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

#: on a real GPU (FASTDYN_CUDA_REAL=1, see docs/cuda.md) the same cases run with the tolerance
#: FASTDYN_CUDA_RTOL, and every comparison prints its largest relative difference
REAL = os.environ.get("FASTDYN_CUDA_REAL") == "1"
assert REAL or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", (
    "run through tests/cuda/test_cuda_sim.py"
)

from fastdyn.drive import integrate  # noqa: E402
from fastdyn.models.attn_m import AttnM  # noqa: E402
from fastdyn.models.attn_s import AttnS  # noqa: E402
from fastdyn.models.msfr import theory, theory_cuda  # noqa: E402
from fastdyn.problems.icl import generate  # noqa: E402
from fastdyn.reduce import n_blocks  # noqa: E402

RTOL = float(os.environ.get("FASTDYN_CUDA_RTOL", "1e-12")) if REAL else 1e-12


def _close(a, b, what):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape, what
    scale = np.maximum(np.abs(a), np.abs(b))
    if REAL:
        m = scale > 0
        worst = float(np.max(np.abs(a - b)[m] / scale[m])) if m.any() else 0.0
        print(
            f"MAXREL {os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]} {what}: {worst:.3e}"
        )
    bad = np.abs(a - b) > RTOL * scale
    assert not bad.any(), f"{what}: max rel diff {np.max(np.abs(a - b)[bad] / scale[bad]):.3g}"


def _tasks(n, seed, balanced_frac=0.4, scale=1e-3):
    rng = np.random.default_rng(seed)
    lam = rng.uniform(0.1, 2.0, n)
    psi = rng.uniform(1.0, 100.0, n)
    rate = rng.uniform(0.0, 1e-2, n)
    rate[:2] = 0.0  # never trained: f stays f(0)
    wt = rng.uniform(0.0, 1e-3, n)
    v0 = [rng.normal(0.0, scale, n) for _ in range(4)]
    nb = int(balanced_frac * n)
    v0[2][:nb], v0[3][:nb] = v0[0][:nb], v0[1][:nb]  # balanced: the CPU's logistic fast path
    return lam, psi, rate, wt, v0


@pytest.mark.parametrize("level", ["leading", "first_order"])
def test_closed_form_loss_partials(level):
    n = 1100  # two blocks, the second partial
    lam, psi, rate, wt, v0 = _tasks(n, 0)
    times = np.concatenate([[0.0], np.geomspace(1e-2, 1e9, 9)])
    shape = (n_blocks(n), times.size)
    cpu = [np.empty(shape), np.empty(shape)]
    gpu = [np.empty(shape), np.empty(shape)]
    theory.loss_partials(times, lam, psi, rate, wt, *v0, level, *cpu)
    theory_cuda.loss_partials(times, lam, psi, rate, wt, *v0, level, *gpu)
    _close(gpu[0], cpu[0], "test partials")
    _close(gpu[1], cpu[1], "train partials")
    assert np.all(cpu[0][:, 0] > 0)  # the comparison is not of zeros


def test_closed_form_exact_level_refused():
    lam, psi, rate, wt, v0 = _tasks(8, 1)
    with pytest.raises(ValueError, match="exact.*no CUDA kernel"):
        theory_cuda.loss_partials(
            np.array([0.0, 1.0]),
            lam,
            psi,
            rate,
            wt,
            *v0,
            "exact",
            np.empty((1, 2)),
            np.empty((1, 2)),
        )


@pytest.mark.parametrize(
    "integrator,kw", [("rk4", {"steps_per_timescale": 8.0}), ("gd", {"eta": 0.05})]
)
@pytest.mark.parametrize("query", [True, False])
def test_integrators(integrator, kw, query):
    n = 40
    lam, psi, rate, wt, v0 = _tasks(n, 2, scale=1e-2)
    rate *= 5.0
    times = np.geomspace(0.5, 30.0, 4)
    out = {}
    for dev in ("cpu", "cuda"):
        st = integrate.TaskState.fresh(*[a.copy() for a in v0])
        s1 = integrate.advance(
            integrator,
            lam,
            psi,
            rate,
            wt,
            st,
            times,
            track=[1, 7],
            query=query,
            settle_tol=1e-6,
            device=dev,
            **kw,
        )
        # a second segment continues from the state the first left (step sizes, counts)
        more = times[-1] * np.array([1.5, 3.0])
        k0 = int(round(times[-1] / kw["eta"])) if integrator == "gd" else 0
        s2 = integrate.advance(
            integrator,
            lam,
            psi,
            rate,
            wt,
            st,
            more,
            t0=times[-1],
            k0=k0,
            track=[1, 7],
            query=query,
            settle_tol=1e-6,
            device=dev,
            **kw,
        )
        out[dev] = (s1, s2, st)
    (a1, a2, sa), (b1, b2, sb) = out["cpu"], out["cuda"]
    for x, y, name in ((a1, b1, "segment 1"), (a2, b2, "segment 2")):
        _close(y.test_partials, x.test_partials, f"{name} test partials")
        _close(y.train_partials, x.train_partials, f"{name} train partials")
        _close(y.f_track, x.f_track, f"{name} tracked f")
    np.testing.assert_array_equal(sb.status, sa.status)
    np.testing.assert_array_equal(sb.steps, sa.steps)
    _close(sb.y, sa.y, "final state")
    assert len(set(sa.status.tolist())) >= 2  # settled and running/frozen tasks are both covered


def test_dopri5_refused_on_cuda():
    lam, psi, rate, wt, v0 = _tasks(4, 3)
    st = integrate.TaskState.fresh(*v0)
    with pytest.raises(ValueError, match="dopri5.*no CUDA kernel"):
        integrate.advance("dopri5", lam, psi, rate, wt, st, np.array([1.0]), device="cuda")


def _icl_models():
    for loss in ("last", "cumulative"):
        for softmax in (False, True):
            yield (
                f"attn_m-{loss}-{'softmax' if softmax else 'linear'}",
                AttnM(3, 2, 4, softmax=softmax, attention_scale="N", loss=loss),
            )
    yield "attn_s-last-linear", AttnS(3, 2, 4, R=1, loss="last")
    yield "attn_s-last-softmax", AttnS(3, 2, 4, R=2, softmax=True, loss="last")


@pytest.mark.parametrize(
    "name,model", list(_icl_models()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_icl_loss_and_grad(name, model):
    data = generate(3, 4, 37, seed=5)
    rng = np.random.default_rng(9)
    theta = rng.normal(0.0, 0.4, model.n_params)
    prep = model.prepare(data.tokens, data.labels)
    g_cpu, g_gpu = np.empty(model.n_params), np.empty(model.n_params)
    L_cpu = model.loss_and_grad(theta, prep, g_cpu)
    model.device = "cuda"
    L_gpu = model.loss_and_grad(theta, prep, g_gpu)
    L_gpu2 = model.loss_and_grad(theta, prep, np.empty(model.n_params))  # device arrays reused
    _close(L_gpu, L_cpu, f"{name} loss")
    _close(g_gpu, g_cpu, f"{name} gradient")
    assert L_gpu2 == L_gpu and np.any(g_cpu != 0)


@pytest.mark.parametrize(
    "config,sets",
    [
        (None, ["task.n_tasks=200", "solver.integrator=rk4", "solver.steps_per_timescale=4", "theory.level=leading",
                "time.n_times=5", "time.t_max=100", "output.chunk_tasks=1024"]),
        (None, ["task.n_tasks=100", "solver.integrator=gd", "solver.lr=0.01", "theory.level=first_order",
                "time.n_times=4", "time.t_max=2"]),
        ("data/configs/icl_fig1.toml", ["data.P=40", "data.n_test=10", "schedule.epochs=6", "schedule.save_every=2"]),
        ("data/configs/icl_fig3.toml", ["data.P=30", "data.n_test=0", "schedule.epochs=4", "schedule.save_every=2"]),
    ],
)  # fmt: skip
def test_simulate_device_cuda_end_to_end(tmp_path, config, sets):
    """`fastdyn simulate --device cuda` (the simulator's GPU) writes the same file as --device cpu,
    to 1e-12, with `device` in its stored config."""
    from pathlib import Path

    from click.testing import CliRunner

    import fastdyn
    from fastdyn.cli import main

    root = Path(__file__).resolve().parents[2]
    args = ([str(root / config)] if config else []) + [a for s in sets for a in ("--set", s)]
    runs = {}
    for dev in ("cpu", "cuda"):
        out = tmp_path / f"{dev}.h5"
        res = CliRunner().invoke(main, ["-q", "simulate", *args, "--device", dev, "-o", str(out)])
        assert res.exit_code == 0, res.output
        runs[dev] = fastdyn.load(out)
    assert runs["cuda"].config["device"] == "cuda" and runs["cpu"].config["device"] == "cpu"
    for name, a in runs["cpu"].series.items():
        if name.startswith(("timings", "params/theta_init")):
            continue
        _close(runs["cuda"][name], a, name)
    assert any(k.startswith("loss") for k in runs["cpu"].series)


def test_bench_gpu_dry_run(capsys):
    """bench/gpu.py runs end to end (the simulator stands in for the GPU; timings meaningless)."""
    import runpy
    from pathlib import Path

    bench = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "gpu.py"))
    assert (
        bench["main"](["--closed", "1500", "--rk4", "50", "--icl-epochs", "1", "--icl-p", "20"])
        == 0
    )
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("MSFR", "ICL"))]
    assert len(lines) == 3
    for ln in lines:
        assert float(ln.split()[-2]) <= 1e-12, ln  # max rel diff column (then GPU MiB)
