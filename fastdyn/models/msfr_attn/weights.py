"""msfr-attn's trained weights as named arrays with named axes (the final weights of a run file).

θ (:class:`fastdyn.models.msfr_attn.kernels.Layout`) stores only the entries of W_V's label row
v and of W_KQ (or W_K, W_Q) that can move. :func:`named` cuts it, in storage order, into
``/params/weights/<name>``; every entry of θ is in exactly one array, so concatenating the raveled
arrays in this order gives θ back. With x_s, y_s task s's feature and label slots of a model token
(block: 2(s−1), 2(s−1)+1; shared: s−1 and the one label slot D):

sparse features (exact MSFR tokens)
    ``W_V_x`` (model_task) v[x_s], ``W_V_y`` (model_task | label_slot) v[y_s];
    merged: ``W_KQ_x`` (model_task) W_KQ[x_s, x_s], ``W_KQ_y`` (model_task) W_KQ[y_s, x_s];
    separate (rank r): ``W_K_x`` (model_task, rank) W_K[:, x_s], ``W_K_y`` (model_task |
    label_slot, rank) W_K[:, y_s], ``W_Q_x`` (model_task, rank) W_Q[:, x_s].
dense features (``data.feature_noise`` or ``data.tau``)
    ``W_V`` (token_coordinate) v; merged: ``W_KQ`` (token_coordinate, query_feature) W_KQ
    without its label column (it multiplies the query's zero label); separate: ``W_K`` (rank,
    token_coordinate), ``W_Q`` (rank, query_feature).
"""

from __future__ import annotations

import numpy as np

from .kernels import Layout

#: name of each axis → its long_name (one HDF5 dimension scale per name)
AXES = {
    "model_task": "task s - 1 (0-based) of the task.model_size tasks the model represents",
    "label_slot": "the one label slot shared by every task (shared embedding)",
    "rank": "rank index of the separate key and query (attention.rank rows each)",
    "token_coordinate": (
        "coordinate of a model token: block embedding x_s at 2(s-1), label y_s at 2(s-1)+1; "
        "shared embedding x_s at s-1, one label slot at D"
    ),
    "query_feature": "feature coordinate c (0-based, c < D) of the query token",
}

#: what each array holds (units "1": the weights are dimensionless)
LONG_NAMES = {
    "W_V_x": "final value weight v[x_s]: W_V's label row on task s's feature slot",
    "W_V_y": "final value weight v[y_s]: W_V's label row on task s's label slot",
    "W_KQ_x": "final W_KQ[x_s, x_s]: key-query weight from task s's feature to its query feature",
    "W_KQ_y": "final W_KQ[y_s, x_s]: key-query weight from task s's label to its query feature",
    "W_K_x": "final key weights W_K[:, x_s] on task s's feature slot",
    "W_K_y": "final key weights W_K[:, y_s] on task s's label slot",
    "W_Q_x": "final query weights W_Q[:, x_s] on task s's feature slot",
    "W_V": "final value weights v: W_V's label row, one entry per token coordinate",
    "W_KQ": "final key-query matrix W_KQ (token coordinate x query feature; no label column)",
    "W_K": "final key matrix W_K (rank x token coordinate)",
    "W_Q": "final query matrix W_Q (rank x query feature)",
}

PREFIX = "params/weights/"


def named(theta: np.ndarray, layout: Layout) -> dict[str, tuple[np.ndarray, tuple[str, ...]]]:
    """``{name: (array, axis names)}`` of θ, in storage order (see the module)."""
    th = np.asarray(theta, dtype=np.float64)
    d, r = layout.d, layout.r
    if layout.dense:
        dt, (_, ow, oq, _, end) = layout.d_tok, layout.offsets
        out = {"W_V": (th[:dt].copy(), ("token_coordinate",))}
        if not layout.separate:
            return out | {
                "W_KQ": (th[ow:oq].reshape(dt, d).copy(), ("token_coordinate", "query_feature"))
            }
        return out | {
            "W_K": (th[ow:oq].reshape(r, dt).copy(), ("rank", "token_coordinate")),
            "W_Q": (th[oq:end].reshape(r, d).copy(), ("rank", "query_feature")),
        }  # fmt: skip
    _, ovy, okx, oky, oq = layout.offsets
    label = "label_slot" if layout.shared else "model_task"
    out = {
        "W_V_x": (th[:d].copy(), ("model_task",)),
        "W_V_y": (th[ovy : ovy + layout.n_vy].copy(), (label,)),
    }
    if not layout.separate:
        return out | {
            "W_KQ_x": (th[okx : okx + d].copy(), ("model_task",)),
            "W_KQ_y": (th[oky : oky + d].copy(), ("model_task",)),
        }
    return out | {
        "W_K_x": (th[okx : okx + d * r].reshape(d, r).copy(), ("model_task", "rank")),
        "W_K_y": (th[oky : oky + layout.n_ky].reshape(-1, r).copy(), (label, "rank")),
        "W_Q_x": (th[oq : oq + d * r].reshape(d, r).copy(), ("model_task", "rank")),
    }


def datasets(theta: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """The final-weight datasets ``params/weights/<name>`` of θ."""
    return {PREFIX + k: a for k, (a, _dims) in named(theta, layout).items()}


def dims(layout: Layout) -> dict[str, tuple[str, ...]]:
    """The axis names of every ``params/weights/<name>`` dataset of ``layout``."""
    zero = np.zeros(layout.n_params)
    return {PREFIX + k: dm for k, (_a, dm) in named(zero, layout).items()}


def descriptions(layout: Layout) -> dict[str, tuple[str, str]]:
    """(units, long_name) of every ``params/weights/<name>`` dataset of ``layout``."""
    return {name: ("1", LONG_NAMES[name[len(PREFIX) :]]) for name in dims(layout)}
