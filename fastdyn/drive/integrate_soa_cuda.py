"""④ CUDA twins of the generic integrators (:mod:`fastdyn.drive.integrate_soa`), for any ODE model.

One thread per task runs :func:`fastdyn.drive.soa_tasks.rk4_task` or
:func:`~fastdyn.drive.soa_tasks.dopri5_task`, compiled for the device from the same source as the
CPU blocks, with the model's ``rhs``/``observe``/``loss`` compiled as device functions from
their Python source (``py_func``): a model gets a GPU path without writing CUDA. The thread
writes its task's loss terms at each output time into (n, T) device arrays; the host adds them
per block in task order, the additions of the CPU blocks, so the sums are bit-identical to the
CPU's whenever the per-task values are (the simulator, ``NUMBA_ENABLE_CUDASIM=1``; on a GPU the
compiler may fuse multiply-adds, a few ulp per step).

State and parameters are copied to the device and back on every call (a segment); the stop flag
is read at launch, so a signal stops the run at the end of the segment.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float64  # imported only for device = "cuda"

from ..core import stop_flag
from ..reduce import add_block_sums
from . import soa_tasks

_KERNELS: dict[tuple, Any] = {}
_THREADS = 128


def _device(fn: Any) -> Any:
    return cuda.jit(device=True)(getattr(fn, "py_func", fn))


def _load(params: Any, y: Any, i: int, p: Any, yy: Any) -> None:
    """Task i's parameters and state (column i) into the thread's arrays p and yy."""
    for r in range(p.shape[0]):
        p[r] = params[r, i]
    for r in range(yy.shape[0]):
        yy[r] = y[r, i]


def _kernel(
    kind: str, rhs: Any, observe: Any, loss: Any, ns: int, kp: int, residual: Any = None
) -> Any:
    """The CUDA kernel of ``kind`` ("rk4", "dopri5") for one model and state/parameter size
    (``residual``: dopri5 with the settling rule)."""
    key = (kind, rhs, observe, loss, ns, kp, residual)
    if key in _KERNELS:
        return _KERNELS[key]
    dev = cuda.jit(device=True)
    load = dev(_load)
    NS, KP = int(ns), int(kp)
    if kind == "rk4":
        task = soa_tasks.rk4_task(_device(rhs), _device(observe), _device(loss), dev)

        @cuda.jit
        def kernel(params, y, t0, times, h, tpos, te, tr, f_track, stop):
            i = cuda.grid(1)
            if i >= y.shape[1]:
                return
            p, yy, yt = (
                cuda.local.array(KP, float64),
                cuda.local.array(NS, float64),
                cuda.local.array(NS, float64),
            )
            yn, K = cuda.local.array(NS, float64), cuda.local.array((4, NS), float64)
            load(params, y, i, p, yy)
            tracked = tpos[i] >= 0
            f = f_track[tpos[i]] if tracked else te[i]  # written only when tracked
            if task(p, yy, yt, yn, K, t0, times, h, te[i], tr[i], f, tracked, stop) == 0:
                for r in range(NS):
                    y[r, i] = yy[r]

    else:
        res = None if residual is None else _device(residual)
        task = soa_tasks.dopri5_task(_device(rhs), _device(observe), _device(loss), dev, res)

        @cuda.jit
        def kernel(params, y, h, counts, rprev, t0, times, rtol, atol, max_steps, settle_tol, tpos, te, tr, f_track, stop):  # fmt: skip
            i = cuda.grid(1)
            if i >= y.shape[1]:
                return
            p = cuda.local.array(KP, float64)
            yy, yt = cuda.local.array(NS, float64), cuda.local.array(NS, float64)
            yn, er = cuda.local.array(NS, float64), cuda.local.array(NS, float64)
            K = cuda.local.array((7, NS), float64)
            load(params, y, i, p, yy)
            tracked = tpos[i] >= 0
            f = f_track[tpos[i]] if tracked else te[i]  # written only when tracked
            code, hs, nacc, nrej, failed, rp = task(
                p, yy, yt, yn, er, K, h[i], counts[0, i], counts[1, i], counts[2, i], rprev[i],
                t0, times, rtol, atol, max_steps, settle_tol, te[i], tr[i], f, tracked, stop,
            )  # fmt: skip
            if code == 0 or code == 2:
                h[i] = hs
                counts[0, i], counts[1, i], counts[2, i] = nacc, nrej, failed
                rprev[i] = rp
            if code == 0:
                for r in range(NS):
                    y[r, i] = yy[r]

    _KERNELS[key] = kernel
    return kernel


def _launch(kind: str, rhs, observe, loss, params, y, extra, times, local_track, test_partials, train_partials, f_track):  # fmt: skip
    n, T = y.shape[1], len(times)
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[np.asarray(local_track, dtype=np.int64)] = np.arange(len(local_track))
    d = {
        "params": cuda.to_device(np.ascontiguousarray(params)),
        "y": cuda.to_device(np.ascontiguousarray(y)),
        "times": cuda.to_device(np.ascontiguousarray(times, dtype=np.float64)),
        "tpos": cuda.to_device(tpos),
        "te": cuda.device_array((n, T)),
        "tr": cuda.device_array((n, T)),
        "f": cuda.to_device(np.ascontiguousarray(f_track) if f_track.size else np.zeros((1, T))),
        "stop": cuda.to_device(stop_flag.FLAG),
    }
    residual = extra[-1] if kind == "dopri5" else None
    kernel = _kernel(kind, rhs, observe, loss, y.shape[0], params.shape[0], residual)
    blocks = (n + _THREADS - 1) // _THREADS
    if kind == "rk4":
        t0, h = extra
        kernel[blocks, _THREADS](d["params"], d["y"], t0, d["times"], h, d["tpos"], d["te"], d["tr"], d["f"], d["stop"])  # fmt: skip
    else:
        h, counts, rprev, t0, rtol, atol, max_steps, settle_tol, _res = extra
        dh, dc = cuda.to_device(h), cuda.to_device(np.ascontiguousarray(counts))
        dr = cuda.to_device(np.ascontiguousarray(rprev))
        kernel[blocks, _THREADS](
            d["params"], d["y"], dh, dc, dr, t0, d["times"], rtol, atol, max_steps, settle_tol,
            d["tpos"], d["te"], d["tr"], d["f"], d["stop"],
        )  # fmt: skip
        h[...] = dh.copy_to_host()
        counts[...] = dc.copy_to_host()
        rprev[...] = dr.copy_to_host()
    y[...] = d["y"].copy_to_host()
    stop_flag.FLAG[1] = max(int(stop_flag.FLAG[1]), int(d["stop"].copy_to_host()[1]))
    if f_track.size:
        f_track[...] = d["f"].copy_to_host()
    add_block_sums(d["te"].copy_to_host(), test_partials)
    add_block_sums(d["tr"].copy_to_host(), train_partials)


def advance_rk4(rhs, observe, loss, params, y, t0, times, h, local_track, test_partials, train_partials, f_track) -> None:  # fmt: skip
    """:func:`fastdyn.drive.integrate_soa.advance_rk4` on the GPU (same arguments, host arrays)."""
    _launch("rk4", rhs, observe, loss, params, y, (float(t0), float(h)), times, local_track, test_partials, train_partials, f_track)  # fmt: skip


def advance_dopri5(
    rhs, observe, loss, params, y, h, counts, t0, times, rtol, atol, max_steps, local_track,
    test_partials, train_partials, f_track, *, residual=None, rprev=None, settle_tol=0.0,
) -> None:  # fmt: skip
    """:func:`fastdyn.drive.integrate_soa.advance_dopri5` on the GPU (same arguments, host arrays)."""
    stop_flag.clear_halt()
    rprev = np.full(y.shape[1], np.inf) if rprev is None else rprev
    extra = (
        h, counts, rprev, float(t0), float(rtol), float(atol), np.int64(max_steps),
        float(settle_tol), residual,
    )  # fmt: skip
    _launch("dopri5", rhs, observe, loss, params, y, extra, times, local_track, test_partials, train_partials, f_track)  # fmt: skip


def _fixed_kernel(rhs, observe, loss, rate, residual, gd: bool, ns: int, kp: int) -> Any:
    """The CUDA kernel of :func:`fastdyn.drive.soa_tasks.fixed_task` for one model, set of
    options and state/parameter size."""
    key = ("fixed", rhs, observe, loss, rate, residual, bool(gd), ns, kp)
    if key in _KERNELS:
        return _KERNELS[key]
    dev = cuda.jit(device=True)
    load = dev(_load)
    NS, KP, NR = int(ns), int(kp), soa_tasks.FIXED_ROWS
    task = soa_tasks.fixed_task(
        _device(rhs), _device(observe), _device(loss),
        None if rate is None else _device(rate), None if residual is None else _device(residual),
        bool(gd), dev,
    )  # fmt: skip

    @cuda.jit
    def kernel(params, y, rec, mark0, marks, spt, h, eta, settle_tol, max_steps, tpos, te, tr, f_track, stop):  # fmt: skip
        i = cuda.grid(1)
        if i >= y.shape[1]:
            return
        p, yy, yt = (
            cuda.local.array(KP, float64),
            cuda.local.array(NS, float64),
            cuda.local.array(NS, float64),
        )
        yn, K = cuda.local.array(NS, float64), cuda.local.array((4, NS), float64)
        st = cuda.local.array(NR, float64)
        load(params, y, i, p, yy)
        for r in range(NR):
            st[r] = rec[r, i]
        tracked = tpos[i] >= 0
        f = f_track[tpos[i]] if tracked else te[i]  # written only when tracked
        code = task(
            p, yy, yt, yn, K, st, mark0, marks, spt, h, eta, settle_tol, max_steps, te[i],
            tr[i], f, tracked, stop,
        )  # fmt: skip
        if code == 0:
            for r in range(NS):
                y[r, i] = yy[r]
            for r in range(NR):
                rec[r, i] = st[r]

    _KERNELS[key] = kernel
    return kernel


def fixed_record(n: int) -> np.ndarray:
    """:func:`fastdyn.drive.integrate_soa.fixed_record` (host arrays on both devices)."""
    from .integrate_soa import fixed_record as on_host

    return on_host(n)


def advance_fixed(
    rhs, observe, loss, params, y, rec, mark0, marks, local_track, test_partials,
    train_partials, f_track, *, rate=None, residual=None, gd=False, steps_per_timescale=0.0,
    h=0.0, eta=0.0, settle_tol=0.0, max_steps=1 << 62,
) -> None:  # fmt: skip
    """:func:`fastdyn.drive.integrate_soa.advance_fixed` on the GPU (same arguments, host arrays)."""
    n, T = y.shape[1], len(marks)
    tpos = np.full(n, -1, dtype=np.int64)
    tpos[np.asarray(local_track, dtype=np.int64)] = np.arange(len(local_track))
    d_y, d_rec = cuda.to_device(np.ascontiguousarray(y)), cuda.to_device(np.ascontiguousarray(rec))
    d_te, d_tr = cuda.device_array((n, T)), cuda.device_array((n, T))
    d_f = cuda.to_device(np.ascontiguousarray(f_track) if f_track.size else np.zeros((1, T)))
    kernel = _fixed_kernel(rhs, observe, loss, rate, residual, gd, y.shape[0], params.shape[0])
    kernel[(n + _THREADS - 1) // _THREADS, _THREADS](
        cuda.to_device(np.ascontiguousarray(params)), d_y, d_rec, float(mark0),
        cuda.to_device(np.ascontiguousarray(marks, dtype=np.float64)), float(steps_per_timescale),
        float(h), float(eta), float(settle_tol), np.int64(max_steps), cuda.to_device(tpos), d_te,
        d_tr, d_f, cuda.to_device(stop_flag.FLAG),
    )  # fmt: skip
    y[...] = d_y.copy_to_host()
    rec[...] = d_rec.copy_to_host()
    if f_track.size:
        f_track[...] = d_f.copy_to_host()
    add_block_sums(d_te.copy_to_host(), test_partials)
    add_block_sums(d_tr.copy_to_host(), train_partials)
