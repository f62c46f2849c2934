"""Optimisers as numba kernels that update flat float64 parameter vectors in place.

Shared by every trained model. Each optimiser's state is a dict of arrays (moments, step counter)
so a run can checkpoint and resume bit-identically:

- ``gd``   full-batch gradient descent  θ ← θ − η g  (paper time advances by 2η per step);
- ``sgd``  the same update on a minibatch gradient, with optional heavy-ball momentum
  ``b ← μ b + g, θ ← θ − η b``; the minibatches are a pure function of (seed, step)
  (:func:`minibatch_indices`, drawn in compiled code: :mod:`fastdyn.problems.philox`);
- ``adam`` Adam (Kingma & Ba) with bias correction and L2 weight decay added to the gradient;
- ``adamw`` Adam with decoupled weight decay ``θ ← θ − η λ θ`` (Loshchilov & Hutter).

The updates themselves are :mod:`fastdyn.core.updates`' kernels, which the models' fused training
loops call too (:meth:`Optimizer.update_args`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..config.schema import OPTIMIZERS
from ..core.updates import ADAM, ADAMW, MOMENTUM, PLAIN, adam_step, gd_step, momentum_step
from ..problems import philox
from ..problems.rng import STREAM_MINIBATCH, generator


@dataclass
class Optimizer:
    """An optimiser and its state (arrays, so :meth:`state_dict`/:meth:`load_state` checkpoint it)."""

    name: str
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    state: dict[str, np.ndarray] = field(default_factory=dict)

    def _rule(self) -> int:
        """The update rule's code (:mod:`fastdyn.core.updates`): PLAIN, MOMENTUM, ADAM or ADAMW."""
        if self.name == "gd" or (self.name == "sgd" and self.momentum == 0.0):
            return PLAIN
        if self.name == "sgd":
            return MOMENTUM
        return ADAMW if self.name == "adamw" else ADAM

    def step(self, theta: np.ndarray, grad: np.ndarray) -> None:
        """Update ``theta`` in place from ``grad``."""
        rule = self._rule()
        if rule == PLAIN:
            gd_step(theta, grad, self.lr)
        elif rule == MOMENTUM:
            momentum_step(theta, grad, self.state["buf"], self.lr, self.momentum)
        else:
            s = self.state
            adam_step(
                theta, grad, s["m"], s["v"], s["step"], self.lr, self.beta1, self.beta2, self.eps,
                self.weight_decay, rule == ADAMW,
            )  # fmt: skip

    def update_args(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rule, hyper, buf, m, v, step) of :func:`fastdyn.core.updates.apply_update`: the rule's
        code, [η, μ, β1, β2, ε, λ] and this optimiser's own state arrays (updated in place by a
        fused loop; empty where the rule has none), the update :meth:`step` applies. A state
        array the rule needs and the optimiser lacks raises KeyError, as :meth:`step` does (the
        compiled loop would write past an empty one)."""
        rule = self._rule()
        hyper = np.array(
            [self.lr, self.momentum, self.beta1, self.beta2, self.eps, self.weight_decay]
        )
        none = np.empty(0)
        s = self.state
        buf = s["buf"] if rule == MOMENTUM else none
        if rule in (ADAM, ADAMW):
            return rule, hyper, buf, s["m"], s["v"], s["step"]
        return rule, hyper, buf, none, none, np.zeros(1, dtype=np.int64)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the state arrays."""
        return {k: v.copy() for k, v in self.state.items()}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore the state saved by :meth:`state_dict`."""
        for k, v in state.items():
            if k not in self.state or self.state[k].shape != np.shape(v):
                raise ValueError(f"optim.state: unexpected array {k!r} of shape {np.shape(v)}")
            self.state[k][...] = v


def make_optimizer(
    name: str,
    n_params: int,
    lr: float,
    *,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
) -> Optimizer:
    """A fresh optimiser for ``n_params`` parameters (ValueError naming the bad field)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optim.name: one of {', '.join(OPTIMIZERS)}, got {name!r}")
    if not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"optim.lr: must be a finite number > 0, got {lr}")
    for nm, v in (("optim.beta1", beta1), ("optim.beta2", beta2), ("optim.momentum", momentum)):
        if not 0.0 <= v < 1.0:
            raise ValueError(f"{nm}: must lie in [0, 1), got {v}")
    if not eps > 0:
        raise ValueError(f"optim.eps: must be > 0, got {eps}")
    if not weight_decay >= 0:
        raise ValueError(f"optim.weight_decay: must be >= 0, got {weight_decay}")
    state: dict[str, np.ndarray] = {}
    if name in ("adam", "adamw"):
        state = {
            "m": np.zeros(n_params),
            "v": np.zeros(n_params),
            "step": np.zeros(1, dtype=np.int64),
        }
    elif name == "sgd" and momentum > 0:
        state = {"buf": np.zeros(n_params)}
    return Optimizer(name, float(lr), beta1, beta2, eps, weight_decay, momentum, state)


def _check_batch(P: int, batch_size: int) -> None:
    if not 0 < batch_size <= P:
        raise ValueError(f"optim.batch_size: must lie in [1, P = {P}], got {batch_size}")


@lru_cache(maxsize=1)
def _epoch_batches(seed: int, epoch: int, P: int, batch_size: int) -> np.ndarray:
    """The P // B sorted batches of one epoch (:func:`minibatch_block`), read-only; cached so
    the steps of an epoch draw them once (an O(P) draw per step would cost P // B times as
    much)."""
    nb = P // batch_size
    rows = minibatch_block(seed, epoch * nb, nb, P, batch_size)
    rows.flags.writeable = False
    return rows


def minibatch_indices(seed: int, step: int, P: int, batch_size: int) -> np.ndarray:
    """Sorted sample indices of minibatch ``step``: epoch e = step // (P // B) uses the permutation
    ``generator(seed, STREAM_MINIBATCH, e).permutation(P)``, batch j = step mod (P // B) its slice
    [jB, (j+1)B) (the last P mod B samples of each epoch are dropped). A pure function of
    (seed, step): resuming from a checkpoint draws the same batches. An epoch's batches are drawn
    and sorted at once (cached), each step copies its own."""
    _check_batch(P, batch_size)
    e, j = divmod(int(step), P // batch_size)
    return _epoch_batches(int(seed), e, int(P), int(batch_size))[j].copy()


def minibatch_block(
    seed: int, first: int, n: int, P: int, batch_size: int, out: np.ndarray | None = None
) -> np.ndarray:
    """The (n, B) int64 array whose row s is :func:`minibatch_indices` (seed, first + s, P, B):
    numpy's permutations drawn and their batches sorted in one compiled call
    (:func:`fastdyn.problems.philox.epoch_batches`: the same integers as numpy's Generator).
    ``out``: a C-contiguous (n, B) int64 array to fill and return (a caller drawing block after
    block reuses one; default: a new array)."""
    _check_batch(P, batch_size)
    if out is None:
        out = np.empty((n, batch_size), dtype=np.int64)
    if out.shape != (n, batch_size) or out.dtype != np.int64 or not out.flags.c_contiguous:
        raise ValueError(f"out: a C-contiguous int64 array of shape {(n, batch_size)}")
    if first < 0 or P > philox.MAX_P:  # numpy's own draw (its error for a negative epoch)
        return _numpy_block(seed, first, P, batch_size, out)
    word = np.uint64(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
    philox.epoch_batches(out, word, STREAM_MINIBATCH, int(first), int(P), int(batch_size))
    return out


def _numpy_block(seed: int, first: int, P: int, batch_size: int, out: np.ndarray) -> np.ndarray:
    """:func:`minibatch_block` by numpy's Generator itself, each epoch's batches sorted by numpy."""
    nb = P // batch_size
    n = out.shape[0]
    s = 0
    while s < n:
        e, j = divmod(int(first) + s, nb)
        cnt = min(nb - j, n - s)
        perm = generator(int(seed), STREAM_MINIBATCH, e).permutation(int(P))
        out[s : s + cnt] = np.sort(
            perm[j * batch_size : (j + cnt) * batch_size].reshape(cnt, batch_size), axis=1
        )
        s += cnt
    return out
