"""fastdyn-logistic: an example model plug-in (docs/adding-a-model.md walks through it).

Task s = 1..n learns a target K_s = 1 at rate r_s = r0·s^-a by the logistic flow

    df/dt = r_s f (K_s − f),        f(0) = f0,

whose closed form is f(t) = K f0 / (f0 + (K − f0) e^{−r K t}). The test loss weighs task s by
P(s) = s^-α / Σ s^-α: L_test = Σ_s P(s) (f_s − K_s)²/2 (train: the same terms, weighted by r_s).

The package gives fastdyn its maths only (:class:`fastdyn.models.OdeMaths`); fastdyn's driver
owns the state, time, the integrator (``solver.integrator = "rk4"`` or ``"dopri5"``), checkpoints,
``--resume``, the split run and sweeps. ``ENTRY`` (:mod:`.entry`) is what the ``fastdyn.models``
entry point in ``pyproject.toml`` names; :mod:`.laws` gives ``fit`` its scaling law and
:mod:`.commands` a ``fastdyn theory`` command. Nothing in fastdyn names this model.

This file imports nothing, so that ``fastdyn theory --help`` can load :mod:`.commands` without
numba or numpy.
"""
