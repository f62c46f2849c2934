"""MSFR hot paths, fastdyn vs the strongest peers in the same run.

    python bench/peers_msfr.py [--closed 1e6] [--times 256,16] [--rk4 2e5] [--steps 1000]
                               [--dopri 2e4] [--repeats 3] [--only closed,rk4,dopri5]

Workloads (float64 everywhere, every peer checked against fastdyn's output in the same run):

- ``closed``: L_test(t) = Σ_s P(s) r_s(t)²/2 at T log-spaced times, balanced init (the leading-order
  logistic, task table of bench/msfr_theory.py). fastdyn: ``loss_curves(..., "leading")``. JAX:
  ``jit`` of a ``lax.scan`` over chunks of tasks, each chunk the vectorised logistic
  r = −Λ m e^{−ct}/(1 + m e^{−ct}) (no cancellation), summed over the chunk.
  Brute-force count per task·time: 8 flops + 1 exp (c·t, m·E, 1+, ÷, ·Λ, square, ·w and +).
- ``rk4``: n tasks × S fixed RK4 steps of the 4-dim v/w flow (task table of bench/msfr_ode.py,
  σ = 1 for every task, T = 20). fastdyn: ``integrate_rk4``. JAX: ``jit(vmap(task))`` with a
  ``lax.fori_loop`` over the steps, once in the textbook form and once factored as fastdyn's lanes
  (dy/dt = rate·(Λ − f)·A, one scale per stage: fastdyn.core.steppers.rk4_gain_step). Count:
  124 flops per task·step in the textbook form (4 rhs × 20 + 24 for the stage inputs + 20 for
  the update; rhs: uv, uw 2 each, f 4, c 2, a, b 1 each, 4 components × 2); the factored form
  executes 122 (FMA = 2) in 78 arithmetic instructions (FMA = 1) instead of 98.
- ``dopri5``: the same tasks to T with adaptive Dormand–Prince 5(4), rtol 1e-8, atol 1e-14.
  fastdyn: ``integrate_dopri5``. diffrax: ``jit(vmap(diffeqsolve))`` with Dopri5 and Tsit5,
  ``PIDController(rtol=1e-8, atol=1e-14)``, ``SaveAt(t1=True)``. Count: ≈ 366 flops per accepted
  step (6 rhs × 20, 21 stage terms × 4 × 2, error estimate 48, norm and control ≈ 30).

fastdyn runs on 1 and on 2 numba threads; JAX/diffrax use XLA_FLAGS (default 2 intra-op threads).
The ratios printed are peer/fastdyn(2 threads) for wall and for CPU time (process, all threads).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _peers import header, measure, optional, rel_diff, report, setup_env  # noqa: E402

RK4_FLOPS = 124
DOPRI_FLOPS = 366
CLOSED_FLOPS = 8


def closed_table(n: int, sigma0: float = 1e-3):
    """Task table of bench/msfr_theory.py (α = 2, β = 0.3, γ = 0.25, ψ0 = 1000, balanced init)."""
    import numpy as np

    s = np.arange(1, n + 1, dtype=np.float64)
    p = s**-2.0
    p /= p.sum()
    lam = s**-0.25
    psi = np.maximum(1.0, np.round(1000.0 * s**-0.3))
    nrm = np.sqrt(1.0 + lam * lam)
    return lam, psi, p, p.copy(), sigma0 / nrm, sigma0 * lam / nrm


def jax_closed(jax, chunk: int):
    """jit(L_test(times; table)): lax.scan over chunks of ``chunk`` tasks (n divisible by chunk)."""
    jnp, lax = jax.numpy, jax.lax

    @jax.jit
    def loss(times, lam, psi, rate, wtest, s0sq):
        def body(acc, xs):
            lm, ps, rt, wt = xs
            kap = ps * (1.0 + lm * lm)
            f0 = kap * s0sq
            m = (lm - f0) / f0  # Λ/f(0) − 1
            c = 2.0 * rt * kap * lm
            me = m[:, None] * jnp.exp(-c[:, None] * times[None, :])
            r = lm[:, None] * me / (1.0 + me)
            return acc + 0.5 * jnp.sum(wt[:, None] * r * r, axis=0), None

        xs = tuple(a.reshape(-1, chunk) for a in (lam, psi, rate, wtest))
        acc, _ = lax.scan(body, jnp.zeros_like(times), xs)
        return acc

    return loss


def bench_closed(n: int, n_times: int, repeats: int, jax) -> None:
    import numba
    import numpy as np

    from fastdyn.models.msfr.theory import loss_curves

    times = np.geomspace(1e-1, 1e12, n_times)
    lam, psi, rate, wt, vx, vy = closed_table(n)
    nthr = numba.config.NUMBA_NUM_THREADS

    def fd(k):
        def run():
            numba.set_num_threads(k)
            run.out = loss_curves(times, lam, psi, rate, wt, vx, vy, vx, vy, "leading")[0]
            numba.set_num_threads(nthr)

        return run

    cases = {f"fastdyn {k} thread(s)": fd(k) for k in (1, min(2, nthr))}
    for c in cases.values():
        c()  # compile / cache load
    if jax is not None:
        chunk = max(1, min(n, (1 << 20) // n_times))
        while n % chunk:
            chunk -= 1
        f = jax_closed(jax, chunk)
        args = [jax.numpy.asarray(a) for a in (times, lam, psi, rate, wt)] + [1e-6]

        def jx():
            jx.out = f(*args).block_until_ready()

        jx()
        cases[f"JAX jit scan (chunks of {chunk})"] = jx
    res = measure(cases, repeats)
    ref = f"fastdyn {min(2, nthr)} thread(s)"
    report(f"MSFR closed form L(t), {n:,} tasks x {n_times} times", res, n * n_times,
           "task*time", ref, CLOSED_FLOPS)  # fmt: skip
    for k, c in cases.items():
        if k != ref:
            print(
                f"  max relative difference of L(t), {k} vs fastdyn: {rel_diff(c.out, cases[ref].out):.1e}"
            )


def rk4_table(n: int):
    """Task table of bench/msfr_ode.py: σ = 1 for every task (rate chosen per task)."""
    import numpy as np

    rng = np.random.default_rng(0)
    psi = np.exp(rng.uniform(np.log(2), np.log(1000), n))
    lam = np.exp(rng.uniform(np.log(0.01), np.log(10), n))
    kap = psi * (1 + lam**2)
    s0 = np.sqrt(1e-4 * lam / kap)
    u = np.stack([np.ones(n), lam]) / np.sqrt(1 + lam**2)
    v = s0 * u
    lmax = 0.5 * (kap + 1 + np.sqrt((kap + 1) ** 2 - 4 * psi * lam**2))
    f0 = psi * (v[0] + lam * v[1]) ** 2 + v[0] ** 2
    rate = 1.0 / (lmax * (lam + np.abs(f0 - lam)))
    return lam, psi, rate, v


def msfr_rhs(y, lam, psi, rate):
    """d(vx, vy, wx, wy)/dt of one task, the state a tuple of four scalars (or arrays)."""
    vx, vy, wx, wy = y
    uv = vx + lam * vy
    uw = wx + lam * wy
    c = -rate * (psi * uv * uw + vx * wx - lam)
    a = psi * uw
    b = psi * uv
    return (c * (a + wx), c * (a * lam), c * (b + vx), c * (b * lam))


def jax_rk4(jax, steps: int, h: float):
    """jit(vmap(task)), task = fori_loop of RK4 steps on a tuple state (a stacked (4,) array
    state measured 2.7x slower: XLA then materialises the stacks)."""
    rhs = msfr_rhs

    def axpy(y, k, c):
        return tuple(yi + c * ki for yi, ki in zip(y, k, strict=True))

    def task(y0, lam, psi, rate):
        def step(_, y):
            k1 = rhs(y, lam, psi, rate)
            k2 = rhs(axpy(y, k1, 0.5 * h), lam, psi, rate)
            k3 = rhs(axpy(y, k2, 0.5 * h), lam, psi, rate)
            k4 = rhs(axpy(y, k3, h), lam, psi, rate)
            return tuple(
                yi + (h / 6.0) * (a + 2.0 * b + 2.0 * c + d)
                for yi, a, b, c, d in zip(y, k1, k2, k3, k4, strict=True)
            )

        return jax.lax.fori_loop(0, steps, step, y0)

    return jax.jit(jax.vmap(task))


def jax_rk4_factored(jax, steps: int, h: float):
    """:func:`jax_rk4` in fastdyn's factored form (fastdyn.core.steppers.rk4_gain_step): dy/dt =
    rate·(Λ − f)·A with A = (Hw, Hv); one scale s = rate·h/2·(Λ − f) per stage instead of four
    products; fastdyn's factoring, for XLA (A is recomputed at the start of each step rather than
    carried over, and s/3 is a division)."""

    def direction(y, lam, psi):
        vx, vy, wx, wy = y
        uv = vx + lam * vy
        uw = wx + lam * wy
        b = psi * uv
        pl = psi * lam
        return (psi * uw + wx, pl * uw, b + vx, pl * uv), b * uw + vx * wx

    def axpy(y, s, a):
        return tuple(yi + s * ai for yi, ai in zip(y, a, strict=True))

    def task(y0, lam, psi, rate):
        w2 = (0.5 * h) * rate
        w2l = w2 * lam

        def step(_, y):
            a1, f1 = direction(y, lam, psi)
            s1 = w2l - w2 * f1
            a2, f2 = direction(axpy(y, s1, a1), lam, psi)
            s2 = w2l - w2 * f2
            a3, f3 = direction(axpy(y, s2, a2), lam, psi)
            s3 = w2l - w2 * f3
            a4, f4 = direction(axpy(y, 2.0 * s3, a3), lam, psi)
            s4 = w2l - w2 * f4
            c1, c2, c3, c4 = s1 / 3.0, s2 * (2.0 / 3.0), s3 * (2.0 / 3.0), s4 / 3.0
            return tuple(
                yi + (c1 * p + c2 * q + c3 * r + c4 * t)
                for yi, p, q, r, t in zip(y, a1, a2, a3, a4, strict=True)
            )

        return jax.lax.fori_loop(0, steps, step, y0)

    return jax.jit(jax.vmap(task))


def bench_rk4(n: int, steps: int, repeats: int, jax) -> None:
    import numba
    import numpy as np

    from fastdyn.models.msfr import integrate as I

    lam, psi, rate, v = rk4_table(n)
    T = 20.0
    args = (lam, psi, rate, rate, v[0], v[1], v[0], v[1])
    nthr = numba.config.NUMBA_NUM_THREADS

    def fd(k):
        def run():
            numba.set_num_threads(k)
            r = I.integrate_rk4(*args, [T], steps_per_timescale=steps / T, settle_tol=-1)
            numba.set_num_threads(nthr)
            run.out = r.state.y
            run.steps = int(r.state.steps.sum())

        return run

    cases = {f"fastdyn {k} thread(s)": fd(k) for k in (1, min(2, nthr))}
    for c in cases.values():
        c()
    if jax is not None:
        f = jax_rk4(jax, steps, T / steps)
        y0 = tuple(jax.numpy.asarray(a) for a in (v[0], v[1], v[0], v[1]))
        ja = [jax.numpy.asarray(a) for a in (lam, psi, rate)]

        def jx():
            jx.out = np.stack(jax.block_until_ready(f(y0, *ja)))

        jx()
        cases["JAX jit+vmap+fori_loop"] = jx
        ff = jax_rk4_factored(jax, steps, T / steps)

        def jf():
            jf.out = np.stack(jax.block_until_ready(ff(y0, *ja)))

        jf()
        cases["JAX jit+vmap+fori_loop, factored as fastdyn"] = jf
    res = measure(cases, repeats)
    ref = f"fastdyn {min(2, nthr)} thread(s)"
    report(f"MSFR RK4, {n:,} tasks x {steps} steps", res, n * steps, "task*step", ref, RK4_FLOPS)
    # fastdyn's h_s = 1/(spt σ_s) lands on T by sub-stepping: a task may take one extra, shorter
    # step; the figures above count n·steps for every case (conservative for fastdyn)
    print(f"  fastdyn took {cases[ref].steps / (n * steps):.4f} x n*steps steps in all")
    for k, c in cases.items():
        if k != ref:
            print(
                f"  max relative difference of the state, {k} vs fastdyn: {rel_diff(c.out, cases[ref].out):.1e}"
            )


def diffrax_solver(jax, dfx, solver, T: float):
    rhs = msfr_rhs

    def task(y0, lam, psi, rate):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(lambda t, y, a: rhs(y, *a)),
            solver,
            t0=0.0,
            t1=T,
            dt0=None,
            y0=y0,
            args=(lam, psi, rate),
            stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-14),
            saveat=dfx.SaveAt(t1=True),
            max_steps=1 << 16,
        )
        return tuple(y[-1] for y in sol.ys), sol.stats["num_accepted_steps"]

    return jax.jit(jax.vmap(task))


def bench_dopri5(n: int, repeats: int, jax, dfx) -> None:
    import numba
    import numpy as np

    from fastdyn.models.msfr import integrate as I

    lam, psi, rate, v = rk4_table(n)
    T = 20.0
    args = (lam, psi, rate, rate, v[0], v[1], v[0], v[1])
    nthr = numba.config.NUMBA_NUM_THREADS
    steps = {}

    def fd(k):
        def run():
            numba.set_num_threads(k)
            r = I.integrate_dopri5(*args, [T], rtol=1e-8, atol=1e-14, settle_tol=-1)
            numba.set_num_threads(nthr)
            run.out = r.state.y
            steps["fastdyn"] = float(np.mean(r.state.steps))

        return run

    cases = {f"fastdyn {k} thread(s)": fd(k) for k in (1, min(2, nthr))}
    for c in cases.values():
        c()
    if dfx is not None:
        y0 = tuple(jax.numpy.asarray(a) for a in (v[0], v[1], v[0], v[1]))
        ja = [jax.numpy.asarray(a) for a in (lam, psi, rate)]
        for name, solver in (("Dopri5", dfx.Dopri5()), ("Tsit5", dfx.Tsit5())):
            f = diffrax_solver(jax, dfx, solver, T)

            def dx(f=f, name=name):
                y, ns = jax.block_until_ready(f(y0, *ja))
                dx.out = np.stack(y)
                steps[name] = float(np.mean(np.asarray(ns)))

            dx()
            cases[f"diffrax {name} jit+vmap"] = dx
    res = measure(cases, repeats)
    ref = f"fastdyn {min(2, nthr)} thread(s)"
    report(f"MSFR dopri5 to T = {T:g}, {n:,} tasks, rtol 1e-8", res, n, "task", ref,
           DOPRI_FLOPS * steps["fastdyn"])  # fmt: skip
    print("  mean accepted steps per task: " + ", ".join(f"{k} {s:.1f}" for k, s in steps.items()))
    for k, c in cases.items():
        if k != ref:
            print(
                f"  max relative difference of the state, {k} vs fastdyn: {rel_diff(c.out, cases[ref].out):.1e}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--closed", type=float, default=1e6, help="tasks of the closed form")
    ap.add_argument("--times", default="256,16", help="comma-separated numbers of output times")
    ap.add_argument("--rk4", type=float, default=2e5, help="tasks of the RK4 run")
    ap.add_argument("--steps", type=int, default=1000, help="RK4 steps per task")
    ap.add_argument("--dopri", type=float, default=2e4, help="tasks of the dopri5 run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="closed,rk4,dopri5")
    a = ap.parse_args()
    setup_env()
    header()
    only = set(a.only.split(","))
    jax = optional("jax")
    if "closed" in only:
        for nt in (int(x) for x in a.times.split(",")):
            bench_closed(int(a.closed), nt, a.repeats, jax)
    if "rk4" in only:
        bench_rk4(int(a.rk4), a.steps, a.repeats, jax)
    if "dopri5" in only:
        dfx = optional("diffrax") if jax is not None else None
        bench_dopri5(int(a.dopri), a.repeats, jax, dfx)


if __name__ == "__main__":
    main()
