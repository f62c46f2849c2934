"""In-context linear regression data (spec ``icl.md`` §1) and its population moments (§4).

Data model. Tokens ``x_n ~ N(0, Λ)`` in R^D, one task vector ``w ~ N(0, I_D)`` per sequence, labels
``y_n = wᵀ x_n`` (no noise). A sequence has N context tokens and one query (N+1 tokens in all);
the model sees ``X = [[x_1 … x_N x_q], [y_1 … y_N 0]] ∈ R^{(D+1)×(N+1)}`` and must predict
``y_q = wᵀ x_q``.

Arrays (float64), P sequences:

- ``tokens`` (P, N+1, D+1): rows are the columns ``x̂_j = (x_j, y_j)`` of X, the query last with its
  label set to 0;
- ``labels`` (P, N+1): the true labels of every token, the query target ``y_q`` last (the
  cumulative loss also needs the labels of earlier tokens as targets).

Reference-code conventions (switchable): eigenvalues ∝ 1..D, a random rotation, tr Λ = 1; tokens
centred across samples (per position), task vectors whitened (zero mean, identity unbiased covariance
over the sequences drawn fresh). In-weight vs in-context (``icl_fraction`` c): a fixed ``w_fix`` with
|w_fix| = √D; the first int(cP) sequences draw fresh w, the rest use ``w_fix``; c = 0 puts N(0, 1)
noise labels in every context (the query target still uses ``w_fix``). Test sets: "ic" (fresh w,
whitened) and "iw" (noise context, ``w_fix`` query).

Population moments (§4), for the cubic feature ``z = vec(β x_qᵀ)`` (row-major vec),
``β = (1/N) Σ_n y_n x_n``: ``E[y_q z] = vec(Λ²)``, ``E[z zᵀ] = E[Λ̂²] ⊗ Λ`` (row-major Kronecker; the
spec's ``Λ ⊗ E[Λ̂²]`` is the column-major statement of the same matrix),
``E[Λ̂²] = Λ² + (Λ + tr(Λ) I) Λ / N``, ``E[y_q²] = tr Λ``.
"""

from __future__ import annotations

import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ...problems.rng import STREAM_DATA, generator
from .config import SPECTRA  # the spectra a config may name

#: sub-streams of STREAM_DATA
_SUB_ROTATION = 0
_SUB_WFIX = 1
_SUB_TRAIN = 2
_SUB_TEST_IC = 3
_SUB_TEST_IW = 4


@dataclass
class ICLData:
    """One in-context regression data set (training set plus optional test sets).

    ``tokens`` (P, N+1, D+1) with the query label zeroed, ``labels`` (P, N+1) with the query target
    last; ``eigvals`` (D,) descending and ``eigvecs`` (D, D) (columns) of Λ when known (``None``
    for a data set loaded from a file: then they are estimated from the tokens); ``tests`` maps
    ``"ic"``/``"iw"`` to ``(tokens, labels)``; ``w_fix`` the in-weight task vector (or ``None``).
    """

    tokens: np.ndarray
    labels: np.ndarray
    eigvals: np.ndarray
    eigvecs: np.ndarray
    tests: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    w_fix: np.ndarray | None = None

    @property
    def P(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def N(self) -> int:
        return int(self.tokens.shape[1] - 1)

    @property
    def D(self) -> int:
        return int(self.tokens.shape[2] - 1)

    @property
    def Lambda(self) -> np.ndarray:
        """Λ = Q diag(λ) Qᵀ (D, D)."""
        return (self.eigvecs * self.eigvals) @ self.eigvecs.T


def spectrum_eigenvalues(
    D: int,
    spectrum: str = "linear",
    exponent: float = 1.0,
    values: tuple[float, ...] | list[float] = (),
    normalize_trace: bool = True,
) -> np.ndarray:
    """Eigenvalues of Λ, sorted in decreasing order.

    ``linear``: λ_d ∝ D+1−d (i.e. ∝ 1..D); ``white``: all 1; ``power``: λ_d ∝ d^(−exponent);
    ``explicit``: ``values`` (D positive numbers). With ``normalize_trace`` they are divided by
    their sum (tr Λ = 1; linear D = 4 gives .4, .3, .2, .1; white gives I/D).
    """
    if D <= 0:
        raise ValueError(f"data.D: must be a positive integer, got {D}")
    if spectrum == "linear":
        lam = np.arange(D, 0, -1, dtype=np.float64)
    elif spectrum == "white":
        lam = np.ones(D)
    elif spectrum == "power":
        if not np.isfinite(exponent):
            raise ValueError(f"data.exponent: must be finite, got {exponent}")
        lam = np.arange(1, D + 1, dtype=np.float64) ** (-float(exponent))
    elif spectrum == "explicit":
        lam = np.asarray(values, dtype=np.float64)
        if lam.shape != (D,) or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
            raise ValueError(
                f"data.eigenvalues: need {D} positive finite numbers for spectrum 'explicit', "
                f"got {list(values)}"
            )
        lam = np.sort(lam)[::-1].copy()
    else:
        raise ValueError(f"data.spectrum: one of {', '.join(SPECTRA)}, got {spectrum!r}")
    if normalize_trace:
        lam = lam / lam.sum()
    return lam


def rotation(D: int, seed: int) -> np.ndarray:
    """A random orthogonal D×D matrix (QR of a Gaussian matrix, signs fixed by diag(R) > 0)."""
    g = generator(seed, STREAM_DATA, _SUB_ROTATION).standard_normal((D, D))
    q, r = np.linalg.qr(g)
    return q * np.sign(np.diag(r))


def whiten_tasks(w: np.ndarray) -> np.ndarray:
    """Task vectors (M, D) with exactly zero mean and identity (unbiased) sample covariance."""
    w = w - w.mean(axis=0, keepdims=True)
    cov = np.cov(w.T).reshape(w.shape[1], w.shape[1])
    ev, evec = np.linalg.eigh(cov)
    return w @ (evec @ np.diag(1.0 / np.sqrt(ev)) @ evec.T).T


def _draw_set(
    rng: np.random.Generator,
    M: int,
    N: int,
    eigvals: np.ndarray,
    eigvecs: np.ndarray,
    w_fix: np.ndarray,
    icl: float,
    center: bool,
    whiten: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """One set of M sequences as (tokens, labels); ``icl`` as in the reference code."""
    D = eigvals.shape[0]
    xi = rng.standard_normal((M, N + 1, D))
    x = (xi * np.sqrt(eigvals)) @ eigvecs.T
    if center:
        x = x - x.mean(axis=0, keepdims=True)
    w = rng.standard_normal((M, D))
    if icl == 0.0:
        y = rng.standard_normal((M, N + 1))
        y[:, -1] = x[:, -1, :] @ w_fix
    else:
        n_ic = int(M * icl)
        if icl == 1.0 and whiten and M > D:
            w = whiten_tasks(w)
        w[n_ic:] = w_fix
        y = np.einsum("mnd,md->mn", x, w)
    tokens = np.concatenate([x, y[:, :, None]], axis=2)
    tokens[:, -1, D] = 0.0
    return np.ascontiguousarray(tokens), np.ascontiguousarray(y)


def generate(
    D: int = 4,
    N: int = 31,
    P: int = 5000,
    *,
    spectrum: str = "linear",
    exponent: float = 1.0,
    eigenvalues: tuple[float, ...] | list[float] = (),
    rotate: bool = True,
    normalize_trace: bool = True,
    center: bool = True,
    whiten: bool = True,
    icl_fraction: float = 1.0,
    n_test: int = 0,
    seed: int = 0,
) -> ICLData:
    """Draw a training set of P sequences (and ``n_test`` IC and IW test sequences) from ``seed``.

    Every draw comes from ``rng.generator(seed, STREAM_DATA, sub)``, one sub-stream per use, so the
    training set does not depend on ``n_test``.
    """
    for name, val in (("data.N", N), ("data.P", P)):
        if int(val) != val or val <= 0:
            raise ValueError(f"{name}: must be a positive integer, got {val}")
    if n_test < 0:
        raise ValueError(f"data.n_test: must be >= 0, got {n_test}")
    if not 0.0 <= icl_fraction <= 1.0:
        raise ValueError(f"data.icl_fraction: must lie in [0, 1], got {icl_fraction}")
    eigvals = spectrum_eigenvalues(D, spectrum, exponent, eigenvalues, normalize_trace)
    eigvecs = rotation(D, seed) if rotate else np.eye(D)
    wf = generator(seed, STREAM_DATA, _SUB_WFIX).standard_normal(D)
    w_fix = wf * np.sqrt(D) / np.linalg.norm(wf)
    tok, lab = _draw_set(
        generator(seed, STREAM_DATA, _SUB_TRAIN),
        P, N, eigvals, eigvecs, w_fix, icl_fraction, center, whiten,
    )  # fmt: skip
    tests = {}
    if n_test > 0:
        tests["ic"] = _draw_set(
            generator(seed, STREAM_DATA, _SUB_TEST_IC),
            n_test, N, eigvals, eigvecs, w_fix, 1.0, center, whiten,
        )  # fmt: skip
        tests["iw"] = _draw_set(
            generator(seed, STREAM_DATA, _SUB_TEST_IW),
            n_test, N, eigvals, eigvecs, w_fix, 0.0, center, whiten,
        )  # fmt: skip
    return ICLData(tok, lab, eigvals, eigvecs, tests, w_fix)


#: sub-stream of the test sets at other context lengths: _SUB_CONTEXT, N′
_SUB_CONTEXT = 5


def context_test_set(
    M: int, N: int, eigvals: np.ndarray, eigvecs: np.ndarray, seed: int, *, center: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """M in-context test sequences (fresh task vectors, not whitened) of context length ``N``,
    drawn from ``generator(seed, STREAM_DATA, _SUB_CONTEXT, N)``: the same for a given N′
    whatever other lengths are tested."""
    rng = generator(seed, STREAM_DATA, _SUB_CONTEXT, N)
    D = eigvals.shape[0]
    return _draw_set(rng, M, N, eigvals, eigvecs, np.zeros(D), 1.0, center, False)


def _check_pair(
    name_x: str, name_y: str, x: np.ndarray, y: np.ndarray, N: int | None, D: int | None
):
    if x.ndim != 3 or x.shape[1] < 2 or x.shape[2] < 1:
        raise ValueError(
            f"data.from_file: array {name_x!r} must have shape (P, N+1, D) with N >= 1, got {x.shape}"
        )
    P, n1, d = x.shape
    if N is not None and (n1 != N + 1 or d != D):
        raise ValueError(
            f"data.from_file: array {name_x!r} must have shape (*, {N + 1}, {D}) like 'x', got {x.shape}"
        )
    if y.shape != (P, n1):
        raise ValueError(
            f"data.from_file: array {name_y!r} must have shape {(P, n1)} to match {name_x!r}, got {y.shape}"
        )
    for nm, a in ((name_x, x), (name_y, y)):
        if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
            raise ValueError(
                f"data.from_file: array {nm!r} must be real numbers (integer or float), got dtype {a.dtype}"
            )
        if not np.all(np.isfinite(a)):
            raise ValueError(f"data.from_file: array {nm!r} must be finite, found NaN or inf")


def _pack(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    tok = np.concatenate([x, y[:, :, None]], axis=2)
    tok[:, -1, -1] = 0.0  # the query's input label is hidden
    return np.ascontiguousarray(tok), np.ascontiguousarray(y)


def read_npz(path: str, field: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive; ValueError naming ``field`` and the file when it is missing,
    not an archive, damaged or holds object arrays (never unpickled)."""
    from ...config.schema import regular_input

    regular_input(path, field)
    try:
        f = np.load(path, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
        with f:
            return {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise ValueError(f"{field}: file {path!r} not found") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # object arrays: ValueError
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"{field}: cannot read {path!r} as an .npz of numeric arrays ({msg})"
        ) from None


@contextmanager
def naming_file(field: str, path: str):
    """Add the file to a ValueError ``<field>: …`` raised inside (``<field>: '<path>': …``)."""
    try:
        yield
    except ValueError as e:
        msg = str(e)
        if msg.startswith(f"{field}: "):
            raise ValueError(f"{field}: {path!r}: {msg[len(field) + 2 :]}") from None
        raise


def load_npz(path: str) -> ICLData:
    """Load a data set: ``x`` (P, N+1, D) query last, ``y`` (P, N+1) query target last, optional
    ``x_test_ic``/``y_test_ic`` and ``x_test_iw``/``y_test_iw``. Λ is estimated from the training
    tokens (sample covariance of all x, eigen-decomposed, eigenvalues descending)."""
    arrays = read_npz(path, "data.from_file")
    with naming_file("data.from_file", path):
        return from_arrays(arrays)


def from_arrays(arrays: dict[str, np.ndarray]) -> ICLData:
    """:func:`load_npz` on an in-memory dict of arrays (same names and validation)."""
    for k in ("x", "y"):
        if k not in arrays:
            raise ValueError(
                f"data.from_file: missing array {k!r}; need 'x' (P, N+1, D) and 'y' (P, N+1)"
            )
    allowed = {"x", "y", "x_test_ic", "y_test_ic", "x_test_iw", "y_test_iw"}
    extra = sorted(set(arrays) - allowed)
    if extra:
        raise ValueError(f"data.from_file: unknown arrays {extra}; allowed: {sorted(allowed)}")
    x, y = np.asarray(arrays["x"]), np.asarray(arrays["y"])
    _check_pair("x", "y", x, y, None, None)
    N, D = x.shape[1] - 1, x.shape[2]
    tests = {}
    for t in ("ic", "iw"):
        kx, ky = f"x_test_{t}", f"y_test_{t}"
        if (kx in arrays) != (ky in arrays):
            raise ValueError(f"data.from_file: give both {kx!r} and {ky!r} or neither")
        if kx in arrays:
            tx, ty = np.asarray(arrays[kx]), np.asarray(arrays[ky])
            _check_pair(kx, ky, tx, ty, N, D)
            tests[t] = _pack(tx, ty)
    tok, lab = _pack(x, y)
    xs = tok[:, :, :D].reshape(-1, D)
    cov = np.atleast_2d(np.cov(xs.T)) if xs.shape[0] > 1 else np.eye(D)
    ev, evec = np.linalg.eigh(cov)
    order = np.argsort(ev)[::-1]
    return ICLData(tok, lab, ev[order].copy(), evec[:, order].copy(), tests, None)


def expected_lhat2(eigvals: np.ndarray, N: float) -> np.ndarray:
    """Eigenvalues of E[Λ̂²] = Λ² + (Λ + tr(Λ) I) Λ / N (Λ̂ = (1/N) Σ_n x_n x_nᵀ), shape (D,)."""
    lam = np.asarray(eigvals, dtype=np.float64)
    return lam**2 + (lam + lam.sum()) * lam / N


def population_moments(
    eigvals: np.ndarray,
    eigvecs: np.ndarray,
    N: int,
    scale: str = "N",
    loss: str = "last",
) -> tuple[float, np.ndarray, np.ndarray]:
    """Population sufficient statistics ``(E[y_q²], c, C)`` of the feature
    ``z = (1/ρ) vec(Σ_n y_n x_n x_qᵀ) = κ vec(β x_qᵀ)``, κ = N/ρ:
    ``c = E[y_q z] = κ vec(Λ²)`` (D²,), ``C = E[z zᵀ] = κ² E[Λ̂²] ⊗ Λ`` (D², D²), row-major vec.

    ``loss = "cumulative"``: averages over the prefix lengths n = 1..N (context n, ρ_n = n or 1).
    """
    lam = np.asarray(eigvals, dtype=np.float64)
    Q = np.asarray(eigvecs, dtype=np.float64)
    Lam = (Q * lam) @ Q.T
    ns = range(1, N + 1) if loss == "cumulative" else [N]
    D = lam.shape[0]
    c = np.zeros(D * D)
    C = np.zeros((D * D, D * D))
    for n in ns:
        kappa = n / (n if scale == "N" else 1.0)
        el2 = (Q * expected_lhat2(lam, n)) @ Q.T
        c += kappa * (Lam @ Lam).ravel()
        C += kappa**2 * np.kron(el2, Lam)
    return float(lam.sum()), c / len(ns), C / len(ns)
