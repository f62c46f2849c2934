"""Config of the in-context regression models (``model = "attn-m" | "attn-s" | "mlp-cubic"``).

TOML layout (defaults: spec/icl.md §5, Fig. 1)::

    model = "attn-m"
    seed = 0
    [data]          D, N, P, spectrum, exponent, eigenvalues, rotate, normalize_trace, center,
                    whiten, icl_fraction, n_test, population, from_file, save, seed
    [attention]     H, R, softmax, attention_scale, loss, reduced, ic_only
    [init]          scheme, scale, from_file, seed
    [optim]         name, lr, batch_size, momentum, beta1, beta2, eps, weight_decay
    [schedule]      epochs, save_every, save_steps
    [output]        checkpoint_every (seconds, "60s", or "<n> steps"; 0 = at every save)

The sections are the frozen dataclasses of :mod:`fastdyn.models.icl_settings`, which own their
range checks; this module checks keys and types and turns their ValueErrors into ConfigErrors.
(``[attention]`` holds what the settings call ``model``: TOML cannot have both ``model = "…"``
and a ``[model]`` table.)
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

from .schema import ConfigError

MODELS = ("attn-m", "attn-s", "mlp-cubic")
SECTION_OF_TOML = {"data": "data", "attention": "model", "init": "init", "optim": "optim", "schedule": "schedule", "output": "output"}
TOML_OF_SECTION = {v: k for k, v in SECTION_OF_TOML.items()}


def _kind(annotation: str) -> tuple[str, bool]:
    """('int'|'float'|'bool'|'str'|'tuple[int]'|'tuple[float]', optional) from an annotation string."""
    a = annotation.replace(" ", "")
    optional = a.endswith("|None")
    a = a.removesuffix("|None")
    if a.startswith("tuple[int"):
        return "tuple[int]", optional
    if a.startswith("tuple[float"):
        return "tuple[float]", optional
    return a, optional


def _coerce(name: str, kind: str, optional: bool, v: Any) -> Any:
    bad = ConfigError(f"{name}: must be {_describe(kind, optional)}, got {v!r}"[:200])
    if v is None and optional:
        return None
    if kind == "bool":
        if not isinstance(v, bool):
            raise bad
        return v
    if kind == "str":
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)  # attention_scale = 1 means "1"; the settings check the allowed values
        if not isinstance(v, str):
            raise bad
        return v
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not (math.isfinite(v) and v == int(v))):
            raise bad
        return int(v)
    if kind == "float":
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(float(v)):
            raise bad
        return float(v)
    if kind in ("tuple[int]", "tuple[float]"):
        if not isinstance(v, list | tuple):
            raise bad
        return tuple(_coerce(name, kind[6:-1], False, x) for x in v)
    return v


def _describe(kind: str, optional: bool) -> str:
    d = {"bool": "true or false", "str": "a string", "int": "an integer", "float": "a finite number", "tuple[int]": "a list of integers", "tuple[float]": "a list of finite numbers"}.get(kind, kind)
    return d + (" (or omitted)" if optional else "")


def _build_section(cls: type, data: Any, toml_name: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{toml_name}: must be a table")
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    for k in data:
        if k not in hints:
            raise ConfigError(f"{toml_name}.{k}: unknown key; allowed in [{toml_name}]: {', '.join(hints)}")
    kwargs = {}
    for k, v in data.items():
        kind, optional = _kind(str(hints[k]))
        kwargs[k] = _coerce(f"{toml_name}.{k}", kind, optional, v)
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ConfigError(_rename(str(e))) from None


def _rename(msg: str) -> str:
    """Settings name the architecture section ``model.``; the TOML calls it ``attention.``."""
    msg = msg.splitlines()[0] if msg else msg
    return ("attention." + msg[6:]) if msg.startswith("model.") else msg.replace("model.", "attention.")


@dataclasses.dataclass(frozen=True)
class IclConfig:
    """A validated in-context regression config: the model name, the seed and the settings."""

    model: str
    seed: int
    settings: Any
    device: str = "cpu"

    def sections(self) -> dict[str, Any]:
        return {TOML_OF_SECTION[f.name]: getattr(self.settings, f.name) for f in dataclasses.fields(self.settings) if f.name in TOML_OF_SECTION}


def build_icl(data: dict) -> IclConfig:
    """Validate an ICL config dict."""
    from ..models import icl_settings as st

    model = data.get("model")
    if model not in MODELS:
        raise ConfigError(f"model: must be one of {', '.join(repr(m) for m in MODELS)}, got {model!r}")
    for k in data:
        if k not in ("model", "seed", "device", *SECTION_OF_TOML):
            raise ConfigError(f"{k}: unknown key; allowed at the top level: model, seed, device, {', '.join(SECTION_OF_TOML)}")
    seed = _coerce("seed", "int", False, data.get("seed", 0))
    if seed < 0:
        raise ConfigError(f"seed: must be an integer ≥ 0, got {seed}")
    classes = {"data": st.DataSettings, "model": st.ModelSettings, "init": st.InitSettings, "optim": st.OptimSettings, "schedule": st.ScheduleSettings, "output": st.OutputSettings}
    kwargs = {}
    for toml_name, attr in SECTION_OF_TOML.items():
        sec = dict(data.get(toml_name, {})) if isinstance(data.get(toml_name, {}), dict) else data.get(toml_name)
        if attr == "model":
            if isinstance(sec, dict) and "name" in sec:
                raise ConfigError("attention.name: unknown key; the model is the top-level `model`")
            if isinstance(sec, dict):
                sec["name"] = model
        kwargs[attr] = _build_section(classes[attr], sec, toml_name)
    try:
        settings = st.ICLSettings(seed=seed, **kwargs)
    except ValueError as e:
        raise ConfigError(_rename(str(e))) from None
    device = data.get("device", "cpu")
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"device: must be one of 'cpu', 'cuda', got {device!r}")
    cfg = IclConfig(model=model, seed=seed, settings=settings, device=device)
    from .device import check_supported

    check_supported(cfg)
    return cfg


def to_dict(cfg: IclConfig) -> dict:
    """TOML-able dict of a validated ICL config (None values omitted)."""
    out: dict[str, Any] = {"model": cfg.model, "seed": cfg.seed, "device": cfg.device}
    for toml_name, sec in cfg.sections().items():
        d = {}
        for f in dataclasses.fields(sec):
            v = getattr(sec, f.name)
            if toml_name == "attention" and f.name == "name":
                continue
            if v is None:
                continue
            d[f.name] = list(v) if isinstance(v, tuple) else v
        out[toml_name] = d
    return out


_ = typing  # annotations are read as strings
