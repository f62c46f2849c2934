"""Shared helpers of the peer benchmarks (bench/peers_*.py).

- :func:`setup_env` sets the JAX defaults *before* JAX is imported: float64 and
  ``XLA_FLAGS="--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2"`` (unless the
  caller set XLA_FLAGS), and lets at most ``threads`` threads run torch.
- :func:`optional` imports a peer package or prints one "skipped" line and returns None.
- :func:`measure_peaks` measures the float64 matmul and triad peaks (bench/peak.py) in the same run;
  :func:`efficiency` prints each case's GFLOP/s and GB/s as a % of them.
- :func:`measure` times named cases in alternating order (case order reversed on every other
  repeat), ``repeats`` times each, and returns per case the medians of wall and process CPU time
  (all threads) plus the 1-minute load average seen before each run.

Timing helpers only: no peer package is imported at module import, so the scripts' ``--help`` works
without the optional ``bench`` extra.
"""

from __future__ import annotations

import importlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def setup_env(threads: int = 2) -> None:
    """Environment for the peers (call before importing jax or torch)."""
    os.environ.setdefault(
        "XLA_FLAGS",
        f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}",
    )
    os.environ.setdefault("JAX_ENABLE_X64", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # torch's and numba's OpenMP pools share one libgomp, which reads its wait policy when the
    # first of them loads it: the policy `import fastdyn` asks for (fastdyn/_threads.py) must be
    # set before torch is imported, and it applies to torch's threads too (they spun as well)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def optional(name: str):
    """The module ``name``, or None after printing a "skipped" line when it is not installed."""
    try:
        mod = importlib.import_module(name)
    except ImportError as e:
        print(f"  {name:<12}: skipped ({e.__class__.__name__}: {e}; pip install -e '.[bench]')")
        return None
    if name == "jax":
        mod.config.update("jax_enable_x64", True)
    return mod


@dataclass
class Timing:
    """Medians over the repeats of one case: wall and CPU seconds, and the loads seen."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)

    @property
    def wall_med(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_med(self) -> float:
        return statistics.median(self.cpu)

    def load_range(self) -> str:
        return f"{min(self.load):.2f}-{max(self.load):.2f}"


def measure(cases: dict[str, Callable[[], object]], repeats: int) -> dict[str, Timing]:
    """Run every case ``repeats`` times, alternating (order reversed on odd repeats)."""
    out = {k: Timing() for k in cases}
    names = list(cases)
    for rep in range(repeats):
        for k in names if rep % 2 == 0 else names[::-1]:
            out[k].load.append(os.getloadavg()[0])
            t, c = time.perf_counter(), time.process_time()
            cases[k]()
            out[k].wall.append(time.perf_counter() - t)
            out[k].cpu.append(time.process_time() - c)
    return out


def report(
    title: str, res: dict[str, Timing], units: float, unit: str, ref: str, flops: float = 0.0
) -> None:
    """One line per case: median wall and CPU per unit (``units`` units per run), the ratio
    case/``ref`` (>1: ``ref`` is faster), all repeats, the load; GFLOP/s at ``flops`` per unit."""
    print(
        f"{title}  [per {unit}; medians of {len(next(iter(res.values())).wall)} alternating runs]"
    )
    r0 = res[ref]
    for k, t in res.items():
        w, c = t.wall_med / units, t.cpu_med / units
        ratio = t.wall_med / r0.wall_med
        cratio = t.cpu_med / r0.cpu_med
        gf = f"  {flops / w * 1e-9:7.2f} GFLOP/s" if flops else ""
        runs = ", ".join(f"{x:.3g}" for x in t.wall)
        print(
            f"  {k:<46} wall {_si(w)}  cpu {_si(c)}  {ratio:6.2f}x wall / {cratio:6.2f}x cpu of "
            f"{ref}{gf}  (runs {runs} s; load {t.load_range()})"
        )


def _si(sec: float) -> str:
    for f, u in ((1.0, "s "), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if sec >= f:
            return f"{sec / f:8.3f} {u}"
    return f"{sec * 1e12:8.3f} ps"


def rel_diff(a, b) -> float:
    """max |a − b| / max |b| (elementwise arrays, any array library convertible by numpy)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def measure_peaks(n: int, threads=(1, 2), triad_n: int = 1 << 24) -> dict[int, tuple[float, float]]:
    """{k: (float64 matmul GFLOP/s at size n, triad GB/s)} on k threads (bench/peak.py)."""
    from peak import matmul_gflops, triad_gbs

    out = {}
    for k in threads:
        out[k] = (matmul_gflops(n, 3, k), triad_gbs(triad_n, 3, k))
        print(
            f"  peak on {k} thread(s): float64 matmul {out[k][0]:.1f} GFLOP/s (n = {n}), "
            f"triad {out[k][1]:.1f} GB/s (load {os.getloadavg()[0]:.2f})"
        )
    return out


def threads_of(case: str) -> int:
    """Threads of a case by its name: "fastdyn k thread(s)", "torch.compile kt", JAX 2 (XLA_FLAGS)."""
    import re

    m = re.match(r"fastdyn (\d+) thread|torch\.compile (\d+)t", case)
    return int(m.group(1) or m.group(2)) if m else 2


def efficiency(
    res: dict[str, Timing],
    units: float,
    flops: float,
    nbytes: float,
    peaks: dict[int, tuple[float, float]],
) -> None:
    """Per case: executed GFLOP/s (``flops`` per unit, ``units`` units per run) on the wall clock
    as a % of the matmul peak on the case's thread count, per CPU-second as a % of the 1-thread
    peak, and GB/s (``nbytes`` per unit) as a % of the triad bandwidth on that thread count."""
    print(
        f"  counted per unit: {flops:.4g} FLOPs, {nbytes:.4g} bytes ({flops / nbytes:.2f} FLOP/byte;"
        " fastdyn's kernel; a peer's rates below are at the same count)"
    )
    for k, t in res.items():
        if "not fastdyn's algebra" in k:
            continue  # another count: its rates at fastdyn's would read as > 100 % of the peak
        w, c = t.wall_med / units, t.cpu_med / units
        nt = min(threads_of(k), max(peaks))
        mm, bw = peaks[nt]
        gw, gc, gb = flops / w * 1e-9, flops / c * 1e-9, nbytes / w * 1e-9
        print(
            f"  {k:<46} {gw:7.2f} GFLOP/s = {100 * gw / mm:5.1f} % of the {nt}-thread peak; "
            f"{gc:6.2f} per CPU-s = {100 * gc / peaks[1][0]:5.1f} % of 1 core; "
            f"{gb:6.2f} GB/s = {100 * gb / bw:5.1f} % of the {nt}-thread triad"
        )


class Call:
    """A timed case: ``fn()`` returns θ_E, kept in ``self.theta`` for the checks."""

    def __init__(self, fn: Callable[[], object]):
        self.fn, self.theta = fn, None

    def __call__(self) -> None:
        self.theta = self.fn()


def compare(cases, res, ref, theta0, units, loss_ref, losses) -> None:
    """Check every case's θ_E against ``ref``'s (max relative difference of θ_E − θ0, and of its
    own loss at θ_E, ``losses[case]`` or else ``loss_ref``, against ``loss_ref`` at ref's θ_E),
    then name the strongest peer (non-fastdyn case with fastdyn's algebra) by wall and by CPU time
    and its ratio to ref, and apart from it the best case marked "not fastdyn's algebra"."""
    L_ref = loss_ref(cases[ref].theta)
    d_ref = cases[ref].theta - theta0
    for k, c in cases.items():
        if k != ref:
            own = losses[k](c.theta) if k in losses else loss_ref(c.theta)
            print(
                f"  vs {ref}: {k:<46} max rel. diff of theta_E - theta_0 "
                f"{rel_diff(c.theta - theta0, d_ref):.1e}, of the loss at theta_E "
                f"{abs(own / L_ref - 1):.1e}"
            )
    other = "not fastdyn's algebra"
    peers = {k: t for k, t in res.items() if not k.startswith("fastdyn") and other not in k}
    alt = {k: t for k, t in res.items() if other in k}
    for lab, key in (("wall", "wall_med"), ("CPU", "cpu_med")):
        for what, group in (("strongest peer", peers), ("cheaper algebra", alt)):
            if group:
                best = min(group, key=lambda k, key=key: getattr(group[k], key))
                tb, tf = getattr(group[best], key), getattr(res[ref], key)
                print(
                    f"  {what} ({lab}): {best}, {_si(tb / units)} per unit; {ref} "
                    f"{_si(tf / units)}: peer/fastdyn = {tb / tf:.2f}x"
                )


def header() -> None:
    import platform

    import numba

    print(
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}); numba {numba.__version__}, "
        f"{numba.config.NUMBA_NUM_THREADS} threads max; XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}"
    )


def jax_gd(jax, loss, lr: float, epochs: int, mask=None):
    """(train, jitted loss): ``train(θ0)`` takes ``epochs`` GD steps θ ← θ − lr (mask ·) ∇loss
    in one ``jax.jit`` of a ``lax.fori_loop`` (the strongest way a JAX user writes it)."""
    g = jax.grad(loss)
    if mask is None:

        def step(_, th):
            return th - lr * g(th)
    else:

        def step(_, th):
            return th - lr * mask * g(th)

    @jax.jit
    def train(theta):
        return jax.lax.fori_loop(0, epochs, step, theta)

    return train, jax.jit(loss)


def torch_gd(torch, loss, lr: float, epochs: int, mask=None):
    """(train, loss): ``train(θ0)`` takes ``epochs`` GD steps with ``torch.compile`` of the loss,
    autograd and an in-place update per step."""
    closs = torch.compile(loss)

    def train(theta0):
        theta = theta0.clone().requires_grad_(True)
        for _ in range(epochs):
            (gr,) = torch.autograd.grad(closs(theta), theta)
            with torch.no_grad():
                theta -= lr * gr if mask is None else lr * mask * gr
        return theta.detach()

    return train, loss


def add_peer_cases(cases: dict, losses: dict, jax, torch, jax_pair, torch_pair, theta0, suffix):
    """Adds to ``cases`` (name → :class:`Call`, each run once to compile) the JAX case from
    ``jax_pair() -> (train, loss)`` and the ``torch.compile`` cases on 1 and 2 threads from
    ``torch_pair()``, and to ``losses`` each case's own loss (θ numpy → float); a missing
    library (None) or a torch.compile that cannot build is left out (reported)."""
    import numpy as np

    if jax is not None:
        f, lj = jax_pair()
        th = jax.numpy.asarray(theta0)
        name = "JAX jit fori_loop" + suffix
        cases[name] = Call(lambda f=f, th=th: np.asarray(f(th).block_until_ready()))
        cases[name]()
        losses[name] = lambda t, lj=lj: float(lj(jax.numpy.asarray(t)))
    if torch is None:
        return
    f_t, lt = torch_pair()
    th_t = torch.from_numpy(theta0.copy())
    # 1 and 2 threads: on the loaded 2-core machine torch's pool on 2 threads was up to 6x
    # slower than on 1 (spinning workers), so both are shown
    for nt in (1, 2):

        def tc(f_t=f_t, th_t=th_t, nt=nt):
            torch.set_num_threads(nt)
            return f_t(th_t).numpy()

        name = f"torch.compile {nt}t" + suffix
        try:
            for _ in range(3):  # the first calls compile, and recompile once or twice
                tc()
        except Exception as e:  # inductor needs a C++ compiler: report, do not fail
            print(f"  torch.compile: skipped ({type(e).__name__}: {str(e).splitlines()[0]})")
            return
        cases[name] = Call(tc)
        cases[name]()
        losses[name] = lambda t, lt=lt: float(lt(torch.from_numpy(t)))


def measure_with_peers(
    cases, peers, jax, torch, jax_trainer, torch_trainer, theta0, repeats, title, epochs, ref, flops,
    unit="epoch",
):  # fmt: skip
    """Runs fastdyn's ``cases`` once (compiling), adds the peer cases of each entry suffix →
    (loss kind, host arrays) of ``peers`` (:func:`add_peer_cases`, the trainers called as
    ``jax_trainer(kind, host)`` and ``torch_trainer(kind, host)``), times every case and prints
    the table against ``ref``; returns (timings, each peer case's own loss function)."""
    for c in cases.values():
        c()
    losses: dict = {}  # peer case -> its own loss function (θ numpy → float)
    for suffix, (lk, host) in peers.items():
        add_peer_cases(
            cases, losses, jax, torch,
            lambda lk=lk, host=host: jax_trainer(lk, host),
            lambda lk=lk, host=host: torch_trainer(lk, host),
            theta0, suffix,
        )  # fmt: skip
    res = measure(cases, repeats)
    report(title, res, epochs, unit, ref, flops)
    return res, losses


def main(ap, bench) -> None:
    """Parses ``ap`` (its own options and ``--only``) with the shared ones (``--repeats``,
    ``--no-torch``, ``--peak-n``), sets up the environment, prints the header and the peaks, and
    runs ``bench(kind, args, jax, torch, peaks)`` for every kind in ``--only``."""
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true", help="skip torch.compile (slow to compile)")
    ap.add_argument("--peak-n", type=int, default=2048, help="matmul size of the FLOP peak [2048]")
    a = ap.parse_args()
    setup_env()
    header()
    jax = optional("jax")
    torch = None if a.no_torch else optional("torch")
    peaks = measure_peaks(a.peak_n)
    for kind in a.only.split(","):
        bench(kind, a, jax, torch, peaks)
