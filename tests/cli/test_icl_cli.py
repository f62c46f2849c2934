"""ICL runs through the CLI: the file layout, and user errors (exit 2, one line, no file)."""

import numpy as np
import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main

SMALL = [
    "--set",
    "data.P=600",
    "--set",
    "schedule.epochs=60",
    "--set",
    "schedule.save_every=20",
    "--set",
    "data.n_test=50",
]


def _sim(tmp_path, *args):
    out = tmp_path / "o.h5"
    res = CliRunner().invoke(main, ["simulate", *args, "-o", str(out)])
    return res, out


@pytest.mark.parametrize("model", ["attn-m", "attn-s", "mlp-cubic"])
def test_small_runs_write_the_common_layout(tmp_path, model):
    res, out = _sim(tmp_path, "--set", f"model={model}", *SMALL)
    assert res.exit_code == 0, res.output
    r = fastdyn.load(out)
    assert r.status == "complete" and r.model == model
    np.testing.assert_array_equal(r["step"], [0, 20, 40, 60])
    np.testing.assert_allclose(r.time, 2 * 1e-3 * r["step"])  # t/τ = 2η·step
    for k in ("loss/train", "loss/test_ic", "loss/test_iw"):
        assert r[k].shape == (4,) and np.all(np.isfinite(r[k]))
    np.testing.assert_allclose(r["theory/plateaus"][0], 1.0)  # L(M_0) = tr Λ = 1
    assert r["params/Gamma"].shape == (4, 4, 4)


def test_data_save_and_from_file_round_trip(tmp_path):
    res, out = _sim(tmp_path, "--set", "model=attn-m", *SMALL, "--set", "data.save=true")
    assert res.exit_code == 0, res.output
    r = fastdyn.load(out)
    tokens, labels = r["data/tokens"], r["data/labels"]
    x = tokens[:, :, :-1]
    npz = tmp_path / "d.npz"
    np.savez(npz, x=x, y=labels)
    res2 = CliRunner().invoke(
        main,
        [
            "simulate",
            "--set",
            "model=attn-m",
            "--set",
            "schedule.epochs=60",
            "--set",
            "schedule.save_every=20",
            "--set",
            f'data.from_file="{npz}"',
            "-o",
            str(tmp_path / "b.h5"),
        ],
    )
    assert res2.exit_code == 0, res2.output
    # the same training data and init give the same training loss curve
    np.testing.assert_allclose(
        fastdyn.load(tmp_path / "b.h5")["loss/train"], r["loss/train"], rtol=1e-12
    )


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["model=attn-s", "attention.R=5"], "attention.R"),
        (["model=attn-s", "attention.H=1", "attention.R=2"], "attention.H"),
        (["model=attn-m", "data.N=0"], "data.N"),
        (["model=attn-m", "data.P=-4"], "data.P"),
        (["model=attn-m", "attention.H=0"], "attention.H"),
        (["model=attn-x"], "model"),
        (["model=attn-m", "optim.name=sgdx"], "optim.name"),
        (["model=attn-m", "optim.lr=nan"], "optim.lr"),
        (["model=attn-m", "attention.bogus=1"], "attention.bogus"),
        (["model=attn-m", 'data.from_file="/nonexistent/d.npz"'], "data.from_file"),
        (["model=attn-m", 'init.from_file="/nonexistent/w.npz"'], "init.from_file"),
    ],
)
def test_bad_icl_input(tmp_path, sets, needle):
    args = [a for s in sets for a in ("--set", s)]
    res, out = _sim(tmp_path, *args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output
    assert not out.exists()


def test_bad_data_files(tmp_path):
    rng = np.random.default_rng(0)
    good_x, good_y = rng.normal(size=(20, 8, 3)), rng.normal(size=(20, 8))
    cases = {
        "shape": dict(x=good_x, y=good_y[:, :5]),
        "nan": dict(x=np.where(good_x > 2, np.nan, good_x), y=good_y),
        "missing": dict(x=good_x),
    }
    for name, arrays in cases.items():
        p = tmp_path / f"{name}.npz"
        np.savez(p, **arrays)
        res, out = _sim(tmp_path, "--set", "model=attn-m", "--set", f'data.from_file="{p}"')
        assert res.exit_code == 2, (name, res.output)
        assert "data.from_file" in res.output or "data" in res.output.split(":")[2], res.output
        assert not out.exists()
    w = tmp_path / "w.npz"
    np.savez(w, W_V=np.zeros((2, 2, 2)))
    res, out = _sim(tmp_path, "--set", "model=attn-m", *SMALL, "--set", f'init.from_file="{w}"')
    assert res.exit_code == 2 and "init.from_file" in res.output and not out.exists(), res.output


@pytest.mark.parametrize("key", ["data.from_file", "init.from_file"])
@pytest.mark.parametrize(
    ("name", "write"),
    [
        (
            "objects.npz",
            lambda p: np.savez(p, x=np.array([{"a": 1}] * 3, dtype=object), y=np.zeros((3, 2))),
        ),
        ("complex.npz", lambda p: np.savez(p, x=np.ones((3, 2, 2), complex), y=np.zeros((3, 2)))),
        ("single.npy", lambda p: np.save(p, np.zeros((3, 2, 2)))),
        ("junk.npz", lambda p: p.write_bytes(b"PK\x03\x04 not a zip")),
    ],
)
def test_unreadable_npz_is_one_line_naming_field_and_file(tmp_path, key, name, write):
    """Object arrays are never unpickled: an .npz holding them, a complex array, a plain .npy or a
    damaged archive is one line naming the field and the file, exit 2, nothing written."""
    f = tmp_path / name
    write(f)
    out = tmp_path / "o.h5"
    res = CliRunner().invoke(
        main,
        ["simulate", "--set", "model=attn-m", "--set", f"{key}={f}", "-o", str(out), "--quiet"],
    )
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith(f"fastdyn: error: {key}: ") and str(f) in lines[0], lines[0]
    assert not out.exists()


def _data_file(path, D, N=6, P=80):
    rng = np.random.default_rng(D)
    x = rng.normal(size=(P, N + 1, D))
    w = rng.normal(size=(P, D)) / np.sqrt(D)
    np.savez(path, x=x, y=np.einsum("pnd,pd->pn", x, w))
    return path


def test_attn_s_rules_use_the_file_dimensions(tmp_path):
    """Issue 19, acceptance 5: H·R ≥ D and R ≤ D are checked against the file's D (3 and 8), not
    the default data.D = 4; batch_size against the file's P."""
    d3 = _data_file(tmp_path / "d3.npz", 3)
    d8 = _data_file(tmp_path / "d8.npz", 8)
    base = ["--set", "model=attn-s", "--set", "schedule.epochs=4", "--set", "schedule.save_every=2"]
    # D = 3, H = 3, R = 1: valid for the file (was refused: 3 < data.D = 4)
    res, out = _sim(tmp_path, *base, "--set", f'data.from_file="{d3}"', "--set", "attention.H=3")
    assert res.exit_code == 0, res.output
    assert fastdyn.load(out)["params/Gamma"].shape[-1] == 3
    out.unlink()
    # D = 8, H = 4, R = 1: H·R < 8 (was accepted against data.D = 4)
    res, out = _sim(tmp_path, *base, "--set", f'data.from_file="{d8}"', "--set", "attention.H=4")
    line = res.output.strip()
    assert res.exit_code == 2 and "\n" not in line and not out.exists(), res.output
    assert "attention.H" in line and "data.D = 8" in line and "d8.npz" in line, line
    # R ≤ D on the file's D = 3
    res, out = _sim(tmp_path, *base, "--set", f'data.from_file="{d3}"', "--set", "attention.R=4", "--set", "attention.H=4")  # fmt: skip
    assert res.exit_code == 2 and "attention.R" in res.output and "data.D = 3" in res.output
    # minibatch larger than the file's P = 80 (the default data.P is 5000)
    sets = ["--set", 'optim.name="sgd"', "--set", "optim.batch_size=100", "--set", "attention.H=8"]
    res, out = _sim(tmp_path, *base, "--set", f'data.from_file="{d8}"', *sets)
    assert res.exit_code == 2 and "optim.batch_size" in res.output and "data.P = 80" in res.output


def test_adam_takes_its_minibatches_from_optim_batch_size(tmp_path):
    """``optim.batch_size`` with Adam draws minibatches (it was once read for sgd alone, so an
    Adam run with it was full batch): the file's losses are those of the training loop with
    B = 50 and differ from the full-batch run's; with gd it is refused in one line."""
    from fastdyn.config import load_config
    from fastdyn.drive.optim import make_optimizer
    from fastdyn.drive.train import train
    from fastdyn.models.icl.setup import prepare

    adam = ["model=attn-m", "optim.name=adam", "optim.lr=0.01", *SMALL[1::2]]
    runs = {}
    for name, extra in (("mini", ["optim.batch_size=50"]), ("full", [])):
        res = CliRunner().invoke(
            main,
            ["-q", "simulate", "-o", str(tmp_path / f"{name}.h5")]
            + [a for s in adam + extra for a in ("--set", s)],
        )
        assert res.exit_code == 0, res.output
        runs[name] = fastdyn.load(tmp_path / f"{name}.h5")["loss/train"]
    s = load_config(None, adam).settings
    p = prepare(s)
    o = s.optim
    opt = make_optimizer(o.name, p.model.n_params, o.lr, beta1=o.beta1, beta2=o.beta2, eps=o.eps)
    rec = train(
        p.model, p.prep, p.theta, opt, s.schedule.epochs, s.schedule.steps(), batch_size=50,
        seed=s.seed,
    )  # fmt: skip
    np.testing.assert_array_equal(runs["mini"], rec["loss/train"])
    assert not np.array_equal(runs["mini"][1:], runs["full"][1:])
    res, out = _sim(tmp_path, *SMALL, "--set", "model=attn-m", "--set", "optim.batch_size=50")
    line = res.output.strip()
    assert res.exit_code == 2 and "\n" not in line and not out.exists(), res.output
    assert line.endswith(
        "optim.batch_size: not with optim.name = 'gd' (full-batch gradient descent); use 'sgd', "
        "'adam' or 'adamw' for minibatches, or omit it"
    ), line
