"""④ The in-context regression run loop: settings → data, theory, training → one HDF5 file.

Series (axis 0 = save step; ``/time`` = t/τ = 2η·step, ``/step`` the optimiser step):
``/loss/train`` (and ``/loss/test_ic``, ``/loss/test_iw`` when test sets exist),
``/params/value_weights`` (H), ``/params/Gamma`` (D×D, paper units), ``/params/Gamma_eig`` (D: the
projections e_dᵀΓe_d on the eigenvectors of Λ, largest eigenvalue first) and, where the paper's
Eq. 10 applies (ATTN_M / MLP, Λ ∝ I, last-token loss), ``/theory/loss/train``. Static:
``/theory/plateaus`` (L(M_m), m = 0..D), ``/theory/L_star``, ``/theory/Gamma_star``,
``/theory/eigvals``, the final weights in paper layout under ``/params/final/``, and with
``data.save`` the data set under ``/data/``.
"""

from __future__ import annotations

import time as _time
from pathlib import Path
from typing import Any

import numpy as np

from ..config.load import to_toml
from ..config.schema import ConfigError
from ..h5.writer import RunWriter
from .checkpoint import Schedule, StopSignals, write_error
from .outcome import Outcome, RunFailed


class _Stop(Exception):
    """Raised from the checkpoint hook to end training after a signal (status in args[0])."""


def run_icl_file(cfg: Any, output: Path, *, progress: bool = False, resume: bool = False) -> str:
    """Run a validated ICL config (``fastdyn.config.icl.IclConfig``) into ``output``; with
    ``resume``, continue the file ``output`` from its checkpoint (taken at a save step: the flat
    weights, the optimiser's moments and step counter, and the step; minibatches are a pure
    function of (seed, step), so nothing else is needed) bit-identically."""
    from ..models import icl_settings as st
    from ..problems import icl as icl_data
    from .train import DivergedError

    s = cfg.settings
    t_wall = _time.time()
    try:
        if s.data.population:
            eigvals = icl_data.spectrum_eigenvalues(s.data.D, s.data.spectrum, s.data.exponent, s.data.eigenvalues, s.data.normalize_trace)
            dseed = s.seed if s.data.seed is None else s.data.seed
            eigvecs = icl_data.rotation(s.data.D, dseed) if s.data.rotate else np.eye(s.data.D)
            data = None
            model = st.build_model(s)
        else:
            data = st.load_data(s)
            eigvals, eigvecs = data.eigvals, data.eigvecs
            model = st.build_model(s, data.D, data.N)
        if s.init.from_file:  # check the weights file before any output is created
            model.from_arrays(_read_npz(s.init.from_file, "init.from_file"))
    except ValueError as e:  # a bad data/weights file or data settings: the user's to fix
        raise ConfigError(str(e).splitlines()[0]) from None
    steps = s.schedule.steps()
    times = 2.0 * s.optim.lr * steps
    theory = st.theory_series(model, eigvals, eigvecs, s, times)
    tests = [] if data is None else sorted(data.tests)
    D, H = model.D, model.H
    series: dict[str, tuple[int, ...]] = {"loss/train": ()}
    series |= {f"loss/test_{k}": () for k in tests}
    series |= {"params/value_weights": (H,), "params/Gamma": (D, D), "params/Gamma_eig": (D,)}
    eq10 = theory.get("eq10_loss")
    if eq10 is not None:
        series["theory/loss/train"] = ()
    static = {
        "theory/plateaus": np.asarray(theory["plateau_losses"]),
        "theory/L_star": np.asarray(theory["L_star"]),
        "theory/Gamma_star": np.asarray(theory["Gamma_star"]),
        "theory/eigvals": np.asarray(theory["eigvals"]),
    }
    if s.data.save and data is not None:
        static["data/tokens"] = data.tokens
        static["data/labels"] = data.labels
        for k, (xt, yt) in data.tests.items():
            static[f"data/test_{k}/tokens"] = xt
            static[f"data/test_{k}/labels"] = yt
    from .optim import make_optimizer

    o = s.optim
    opt_shapes = {f"optim_{k}": (v.shape, v.dtype) for k, v in make_optimizer(o.name, model.n_params, o.lr, beta1=o.beta1, beta2=o.beta2, eps=o.eps, weight_decay=o.weight_decay, momentum=o.momentum).state.items()}
    ck_spec = {"theta": ((model.n_params,), "f8"), "position": ((2,), "i8"), **opt_shapes}
    ck = None
    if resume:
        writer, ck = RunWriter.reopen(output)
    else:
        writer = RunWriter(output, model=cfg.model, config_toml=to_toml(cfg), seed=cfg.seed, series=series, static=static, with_step=True, extra_attrs={"n_trained": int(model.n_trained)}, time_units="t/tau (paper time, 2*lr*step)", checkpoint=ck_spec)
    restart = None
    if ck is not None:
        restart = {"theta": ck["theta"], "step": int(ck["position"][0]), "optimizer": {k[6:]: v for k, v in ck.items() if k.startswith("optim_")}}
    row = {"i": writer.n_rows}
    sched = Schedule(s.output.checkpoint_every, 0 if restart is None else restart["step"])
    stop = StopSignals().__enter__()

    def on_checkpoint(step: int, theta: np.ndarray, opt: Any) -> None:
        if stop.requested or sched.due(step):
            writer.checkpoint({"theta": theta, "position": np.array([step, writer.n_rows]), **{f"optim_{k}": v for k, v in opt.state.items()}})
            sched.done(step)
        if stop.requested:
            raise _Stop(stop.status(f"after step {step} of {s.schedule.epochs}", output))
    bar = _bar(len(steps), progress)

    def on_save(step: int, losses: dict[str, float], weights: dict[str, np.ndarray]) -> None:
        i = row["i"]
        rows = {"loss/train": np.array([losses["train"]])}
        for k in tests:
            rows[f"loss/test_{k}"] = np.array([losses[f"test_{k}"]])
        rows["params/value_weights"] = np.asarray(weights["value_weights"])[None]
        rows["params/Gamma"] = np.asarray(weights["Gamma"])[None]
        rows["params/Gamma_eig"] = np.asarray(weights["Gamma_eig"])[None]
        if eq10 is not None:
            rows["theory/loss/train"] = np.array([eq10[i]])
        writer.append(np.array([2.0 * s.optim.lr * step]), rows, np.array([step]))
        row["i"] = i + 1
        if bar is not None:
            bar.update(1)

    if bar is not None:
        bar.update(row["i"])
    try:
        result = st.run_icl(s, on_save, data=data, on_checkpoint=on_checkpoint, resume=restart)
    except _Stop as e:
        status = str(e)
        writer.close(status, {"total": _time.time() - t_wall})
        return status
    except OSError as e:  # the disk is full or the file system went away: keep what was flushed
        writer.abandon()
        raise RunFailed(write_error(output, e)) from None
    except DivergedError as e:
        status = Outcome.FAILED.text(str(e).splitlines()[0])
        writer.close(status, {"total": _time.time() - t_wall})
        return status
    except KeyboardInterrupt:
        writer.close(Outcome.INTERRUPTED.text(), {"total": _time.time() - t_wall})
        raise
    except BaseException as e:
        writer.close(Outcome.FAILED.text(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
        raise
    finally:
        stop.__exit__()
        if bar is not None:
            bar.__exit__(None, None, None)
    final = {f"params/final/{k}": np.asarray(v) for k, v in result["weights"].items() if k not in ("value_weights", "Gamma", "Gamma_eig")}
    writer.close(Outcome.COMPLETE.text(), {"total": _time.time() - t_wall}, datasets=final)
    return Outcome.COMPLETE.text()


def _read_npz(path: str, field: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise ValueError(f"{field}: file {path!r} not found") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{field}: cannot read {path!r} as .npz ({str(e).splitlines()[0]})") from None


def _bar(n: int, show: bool):
    if not show:
        return None
    import click

    bar = click.progressbar(length=n, label="train", show_eta=True)
    bar.__enter__()
    return bar
