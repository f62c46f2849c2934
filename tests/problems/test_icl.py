"""ICL data: spectra, rotation, centring and whitening, IC/IW sets, .npz loading and validation,
and the population moments against Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest

from fastdyn.models.icl import problem as icl
from fastdyn.models.icl.feature_kernels import prepare_features, sufficient_stats


def test_spectra():
    np.testing.assert_allclose(icl.spectrum_eigenvalues(4), [0.4, 0.3, 0.2, 0.1], rtol=1e-15)
    np.testing.assert_allclose(icl.spectrum_eigenvalues(4, "white"), [0.25] * 4)
    np.testing.assert_allclose(icl.spectrum_eigenvalues(4, "white", normalize_trace=False), [1] * 4)
    p = icl.spectrum_eigenvalues(3, "power", exponent=2.0, normalize_trace=False)
    np.testing.assert_allclose(p, [1, 1 / 4, 1 / 9])
    e = icl.spectrum_eigenvalues(3, "explicit", values=[1, 3, 2], normalize_trace=False)
    np.testing.assert_allclose(e, [3, 2, 1])
    with pytest.raises(
        ValueError, match=r"^data.spectrum: one of linear, white, power, explicit, got 'flat'$"
    ):
        icl.spectrum_eigenvalues(3, "flat")
    with pytest.raises(ValueError, match=r"^data.eigenvalues: need 3 positive finite numbers"):
        icl.spectrum_eigenvalues(3, "explicit", values=[1, -1, 2])


def test_generate_shapes_centring_whitening():
    d = icl.generate(3, 6, 400, n_test=50, seed=2)
    assert d.tokens.shape == (400, 7, 4) and d.labels.shape == (400, 7)
    assert np.all(d.tokens[:, -1, 3] == 0)  # query label hidden
    np.testing.assert_array_equal(d.tokens[:, :-1, 3], d.labels[:, :-1])
    # centred across samples, per position (exact up to round-off)
    assert np.abs(d.tokens[:, :, :3].mean(axis=0)).max() < 1e-14
    # whitened task vectors: recover w per sequence from its first D tokens and labels
    X = d.tokens[:, :3, :3]
    w = np.linalg.solve(X, d.labels[:, :3, None])[:, :, 0]
    np.testing.assert_allclose(w.mean(axis=0), 0, atol=1e-10)
    np.testing.assert_allclose(np.cov(w.T), np.eye(3), atol=1e-9)  # solve() round-off
    np.testing.assert_allclose(np.trace(d.Lambda), 1.0, rtol=1e-14)
    np.testing.assert_allclose(d.eigvecs.T @ d.eigvecs, np.eye(3), atol=1e-14)
    assert set(d.tests) == {"ic", "iw"} and d.tests["ic"][0].shape == (50, 7, 4)
    # the training set does not depend on n_test
    np.testing.assert_array_equal(icl.generate(3, 6, 400, seed=2).tokens, d.tokens)


def test_icl_fraction_and_iw_set():
    d = icl.generate(3, 6, 200, icl_fraction=0.25, n_test=40, seed=3, center=False)
    wf = d.w_fix
    np.testing.assert_allclose(np.linalg.norm(wf), np.sqrt(3), rtol=1e-14)
    x, y = d.tokens[:, :, :3], d.labels
    fixed = np.abs(np.einsum("mnd,d->mn", x, wf) - y).max(axis=1) < 1e-12
    assert fixed.sum() == 150 and np.all(fixed[50:])
    tx, ty = d.tests["iw"]
    np.testing.assert_allclose(ty[:, -1], tx[:, -1, :3] @ wf, atol=1e-12)
    assert np.abs(tx[:, :-1, :3] @ wf - ty[:, :-1]).min() > 0  # noise context labels


def test_population_moments_match_monte_carlo():
    D, N, P = 3, 5, 40000
    d = icl.generate(D, N, P, seed=6, center=False, whiten=False)
    for scale in ("N", "1"):
        for loss in ("last", "cumulative"):
            Z, Y = prepare_features(d.tokens, d.labels, scale, loss)
            yy, c, C = sufficient_stats(Z, Y)
            yy0, c0, C0 = icl.population_moments(d.eigvals, d.eigvecs, N, scale, loss)
            # Monte Carlo error of fourth/sixth moments at P = 4e4: a few % of the norm
            assert abs(yy - yy0) < 0.05 * yy0
            assert np.linalg.norm(c - c0) < 0.05 * np.linalg.norm(c0)
            assert np.linalg.norm(C - C0) < 0.08 * np.linalg.norm(C0)


def test_expected_lhat2():
    lam = np.array([0.5, 0.3, 0.2])
    np.testing.assert_allclose(icl.expected_lhat2(lam, 10), lam**2 + (lam + 1.0) * lam / 10)


def _arrays(P=5, N=4, D=3, seed=0):
    g = np.random.default_rng(seed)
    return {"x": g.normal(size=(P, N + 1, D)), "y": g.normal(size=(P, N + 1))}


def test_from_arrays_and_npz_roundtrip(tmp_path):
    a = _arrays()
    a["x_test_ic"], a["y_test_ic"] = _arrays(P=2)["x"], _arrays(P=2)["y"]
    f = tmp_path / "d.npz"
    np.savez(f, **a)
    d = icl.load_npz(str(f))
    assert (d.P, d.N, d.D) == (5, 4, 3)
    np.testing.assert_array_equal(d.tokens[:, :, :3], a["x"])
    assert np.all(d.tokens[:, -1, 3] == 0)
    np.testing.assert_array_equal(d.labels, a["y"])
    assert set(d.tests) == {"ic"}


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (lambda a: a.pop("y"), r"^data.from_file: missing array 'y'"),
        (
            lambda a: a.update(y=a["y"][:, :-1]),
            r"^data.from_file: array 'y' must have shape \(5, 5\) to match 'x', got \(5, 4\)$",
        ),
        (
            lambda a: a.update(x=a["x"][0]),
            r"^data.from_file: array 'x' must have shape \(P, N\+1, D\)",
        ),
        (
            lambda a: a["x"].__setitem__((0, 0, 0), np.nan),
            r"^data.from_file: array 'x' must be finite, found NaN or inf$",
        ),
        (
            lambda a: a["y"].__setitem__((1, 1), np.inf),
            r"^data.from_file: array 'y' must be finite",
        ),
        (
            lambda a: a.update(x_test_iw=a["x"][:, :, :2], y_test_iw=a["y"]),
            r"^data.from_file: array 'x_test_iw' must have shape \(\*, 5, 3\)",
        ),
        (
            lambda a: a.update(x_test_ic=a["x"]),
            r"^data.from_file: give both 'x_test_ic' and 'y_test_ic' or neither$",
        ),
        (lambda a: a.update(z=a["x"]), r"^data.from_file: unknown arrays \['z'\]"),
    ],
)
def test_from_arrays_errors(patch, message):
    a = _arrays()
    patch(a)
    with pytest.raises(ValueError, match=message):
        icl.from_arrays(a)


def test_generate_errors():
    with pytest.raises(ValueError, match=r"^data.P: must be a positive integer, got 0$"):
        icl.generate(3, 4, 0)
    with pytest.raises(ValueError, match=r"^data.N: must be a positive integer, got -1$"):
        icl.generate(3, -1, 10)
    with pytest.raises(ValueError, match=r"^data.icl_fraction: must lie in \[0, 1\], got 1.5$"):
        icl.generate(3, 4, 10, icl_fraction=1.5)
