"""⑤ The on-disk format, version 1: paths, dtypes, units, root attributes.

Root attributes
    ``format`` = "fastdyn", ``format_version`` = 1, ``generated_by`` ("fastdyn X.Y.Z"),
    ``model``, ``config`` (the resolved config as TOML text), ``versions`` (JSON: fastdyn, python,
    numpy, numba, h5py, HDF5, the model's package, the git commit of a checkout;
    :mod:`fastdyn.h5.provenance`), ``seed``, ``command_line``, ``status`` (see :class:`fastdyn.drive.outcome`),
    ``timings`` (JSON, seconds), ``created``.
Datasets (every time series is 1-d or 2-d with time as axis 0, chunked and resizable along it, and
``/time`` attached to axis 0 as an HDF5 dimension scale)
    ``/time``                  output times; its ``units`` and ``long_name`` state the convention:
                               gradient-flow time t, its ``long_name`` saying how each
                               integrator reaches it (:data:`TIME_LONG_NAMES`: gd t = η·step;
                               rk4, dopri5 the integrated flow; none the closed form); a trained
                               model may state its own (e.g. t/τ = 2η·step, ``units = "tau"``)
    ``/step``                  optimiser step of each output (discrete runs only)
    ``/loss/<name>``           test, train (and the model's other test sets, e.g. test_ic, test_iw)
    ``/theory/loss/<name>``    the analytic curve on the same grid
    ``/tasks/index``           1-based indices s of the tracked tasks (dimension scale of axis 1)
    ``/tasks/f``               f_s(t) of the tracked tasks, shape (T, n_tracked)
    ``/theory/tasks/f``        the closed form of the same
    ``/tasks/emergence``       theory half-rise times t_s of the tracked tasks
    ``/params/<name>``         parameter snapshots, axis 0 = time
    ``/diagnostics/<name>``    opt-in model diagnostics (e.g. head alignment, in-weight norms)
    ``/checkpoint/``           the state to resume (reliability)
Units live in each dataset's ``units`` attribute; ``long_name`` says what it is.
"""

from __future__ import annotations

FORMAT_NAME = "fastdyn"
FORMAT_VERSION = 1

TIME = "time"
STEP = "step"

#: long_name of the well-known dimensionless series (units "1")
_DIMENSIONLESS = {
    "step": "optimiser step",
    "loss/test": "test loss L_test(t)",
    "loss/train": "training loss L_train(t)",
    "loss/test_ic": "in-context test loss (fresh task vectors)",
    "loss/test_iw": "in-weight test loss (noise context, fixed task vector)",
    "theory/loss/test": "closed-form test loss",
    "theory/loss/train": "closed-form training loss",
    "diagnostics/head_cosine": "pairwise cosine of the heads' functions vec(v_i U_i)",
    "diagnostics/head_cosine_min": "smallest pairwise cosine of the heads' functions (i < j)",
    "diagnostics/head_cosine_mean": "mean pairwise cosine of the heads' functions (i < j)",
    "diagnostics/in_weight_norm_v": "|v_i|: norm of head i's value weights on the x coordinates",
    "diagnostics/in_weight_norm_u": "|u_i|: norm of head i's key-query label row (separate key and query: the keys' label entries)",
    "tasks/index": "1-based task index s",
    "tasks/f": "task output f_s(t)",
    "theory/tasks/f": "closed-form task output f_s(t)",
}

#: ``/time``'s long_name for each way of reaching the output times: the ODE integrators
#: (``solver.integrator``) and ``trained`` (an optimiser's steps, t = η·step)
TIME_LONG_NAMES = {
    "gd": "gradient-flow time t = learning_rate * step of discrete gradient descent (steps in /step)",
    "rk4": "gradient-flow time t (the flow integrated by classical RK4 at a fixed step)",
    "dopri5": "gradient-flow time t (the flow integrated by adaptive Dormand-Prince 5(4))",
    "none": "gradient-flow time t at which the closed form is evaluated (nothing integrated)",
    "trained": "t = learning_rate * step: the optimiser's steps (in /step) times its learning rate",
}


def time_long_name(integrator: str) -> str:
    """``/time``'s long_name for ``integrator`` (a key of :data:`TIME_LONG_NAMES`; another
    name: plain gradient-flow time)."""
    return TIME_LONG_NAMES.get(integrator, "gradient-flow time t")


#: (units, long_name) of the well-known series
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "time": ("gradient-flow time", "gradient-flow time t"),
    "tasks/emergence": (
        "gradient-flow time",
        "half-rise time t_s of the leading or first-order closed form (root attribute emergence_level; theory.level = exact stores the first-order one)",
    ),
    **{name: ("1", long_name) for name, long_name in _DIMENSIONLESS.items()},
}

STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
