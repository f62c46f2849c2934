"""Every trained model's setup hands the driver typed prepared data (a ``Prepared``), not a dict:
the driver reads ``n_samples`` and ``full_batch``, and a misspelt field raises AttributeError."""

from __future__ import annotations

import pytest

from fastdyn.config import load_config
from fastdyn.core.device import Device
from fastdyn.models._spec import Prepared
from fastdyn.models.icl.prepared import Features, LinearData, SoftmaxData, Stats
from fastdyn.models.registry import get_model, model_names

ICL = ["data.P=40", "data.n_test=10", "data.D=3", "data.N=5", "schedule.epochs=2"]
#: (model, settings, class of the training prep, n_samples)
CASES = [
    ("attn-m", ICL, LinearData, 40),
    ("attn-m", [*ICL, "attention.loss=cumulative"], LinearData, 40),
    ("attn-m", [*ICL, "attention.softmax=true"], SoftmaxData, 40),
    ("attn-m", [*ICL, "attention.reduced=true"], Stats, 40),
    ("attn-m", [*ICL, "attention.reduced=true", "data.population=true", "data.n_test=0"], Stats, 0),
    ("attn-s", ICL, LinearData, 40),
    ("mlp-cubic", ICL, Features, 40),
    ("msfr-attn", ["task.n_tasks=20", "task.n_samples=50", "schedule.epochs=2"], Prepared, 50),
]  # fmt: skip


def test_every_trained_model_has_a_case():
    trained = {n for n in model_names() if get_model(n).kind == "trained"}
    assert trained == {c[0] for c in CASES}


@pytest.mark.parametrize(
    "name, sets, cls, n", CASES, ids=[f"{c[0]}-{c[2].__name__}-{k}" for k, c in enumerate(CASES)]
)
def test_setup_hands_typed_prepared_data(name, sets, cls, n):
    cfg = load_config(None, [f"model={name}", *sets])
    job = get_model(name).setup(cfg, Device.CPU)
    prep = job.prep
    assert type(prep) is cls and isinstance(prep, Prepared) and not isinstance(prep, dict)
    assert prep.n_samples == n
    assert prep.full_batch == (cls is Stats)  # only the moments have no per-sample terms
    with pytest.raises(AttributeError):
        prep.P  # noqa: B018 — the old dict key is no field
    with pytest.raises(AttributeError):
        prep.SpTT = None  # slotted: a misspelt field cannot be added
    with pytest.raises(TypeError):
        prep["kind"]  # noqa: B018 — no dict access


def test_icl_test_sets_are_typed_per_sample_data():
    from fastdyn.models.icl.setup import prepare

    for sets, cls in ((ICL, LinearData), ([*ICL, "attention.reduced=true"], Features)):
        tests = prepare(load_config(None, ["model=attn-m", *sets]).settings).tests
        assert tests and all(type(t) is cls and t.n_samples == 10 for t in tests.values())
        assert not any(t.moments for t in tests.values())  # evaluated at saves only: no moments
