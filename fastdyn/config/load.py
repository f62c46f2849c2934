"""TOML + ``--set`` overrides → one frozen, validated config; and back to TOML text.

Config files are data only: parsed with :mod:`tomllib`, no evaluation, no includes.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import plugins
from .schema import ConfigError, Rule, Section, regular_input

#: deepest nesting of tables and arrays a TOML input may have (a config needs 3: root, section,
#: list); deeper input is refused before anything recurses over it
MAX_DEPTH = 32
#: the largest config file read (a config is a few KiB; a sweep's point list stays far below)
MAX_TOML_BYTES = 16 << 20


def _deep_path(data: Any) -> str | None:
    """The path (``a.b[0]…``) of the first value nested deeper than :data:`MAX_DEPTH`, else None.
    Iterative, so any depth is safe."""
    stack = [(data, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return path
        if isinstance(node, dict):
            stack += [(v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in node.items()]
        elif isinstance(node, list | tuple):
            stack += [(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node)]
    return None


def _show_path(path: str) -> str:
    return path if len(path) <= 60 else path[:40] + "…" + path[-12:]


def check_depth(data: Any, where: str) -> None:
    """ConfigError naming ``where`` and the path when ``data`` nests deeper than :data:`MAX_DEPTH`."""
    path = _deep_path(data)
    if path is not None:
        raise ConfigError(
            f"{where}: {_show_path(path)}: tables and arrays nested more than {MAX_DEPTH} levels deep; a config nests at most 3 ([section] key = [list])"
        )


def _line_key(line: str) -> str:
    """The key a TOML line starts with (before ``=``, or a table header's name), or "" for a line
    that holds none (a value inside a multi-line array or string)."""
    stripped = line.lstrip()
    if stripped.startswith("["):
        return stripped.strip().strip("[]")
    key = line.split("=", 1)[0] if "=" in line else ""
    return "" if any(c in key for c in ",[]{}") else key


def loads_toml(text: str, where: str) -> dict:
    """Parse TOML ``text`` as data; malformed or too deeply nested input (which would exhaust
    Python's recursion limit inside :mod:`tomllib`) is a one-line ConfigError naming ``where``.
    A key of more than :data:`MAX_DEPTH` dotted names is refused before parsing: tomllib builds
    one table per name, and a key of millions of dots took gigabytes."""
    for n, line in enumerate(text.splitlines(), 1):
        if line.count(".") < MAX_DEPTH:
            continue
        key = _line_key(line)
        if key.count(".") >= MAX_DEPTH:
            raise ConfigError(
                f"{where}: line {n}: {key.strip()[:40]}…: {key.count('.') + 1} dotted names, tables nested that deep; a key is section.name (at most {MAX_DEPTH})"
            )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: malformed TOML ({e})") from None
    except RecursionError:
        raise ConfigError(
            f"{where}: arrays or inline tables nested too deeply to parse; a config nests at most 3 levels ([section] key = [list])"
        ) from None
    check_depth(data, where)
    return data


def schema_for(model: str) -> type:
    """The root config dataclass of ``model``, as its entry point declares it (ConfigError listing
    the known models otherwise)."""
    try:
        entry = plugins.get(model)
    except KeyError as e:
        known = ", ".join(repr(m) for m in plugins.names())
        why = "" if model not in plugins.broken() else f" ({e.args[0]})"
        raise ConfigError(f"model: must be one of {known}, got {model!r}{why}") from None
    return entry.run.schema


def model_names() -> list[str]:
    """Every model a config may name."""
    return plugins.names()


def _did_you_mean(key: str, allowed: Any, prefix: str = "") -> str:
    """ " (did you mean X?)" for a near miss of one of ``allowed`` (difflib), else ""."""
    import difflib

    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.75)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _other_models(section: str, data: dict) -> str:
    """For a top-level key of another model's config: which models have it, and this config's."""
    model = data.get("model") or plugins.default()
    owners = []
    for name in plugins.names():
        schema = getattr(getattr(plugins.get(name), "run", None), "schema", None)
        if schema is not None and section in {f.name for f in dataclasses.fields(schema)}:
            owners.append(name)
    if not owners:
        return ""
    return f" for model {model!r} ([{section}] belongs to model {', '.join(owners)}: set model to one of them)"


def build(cls: type, data: Any, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a TOML table, validating every field (ConfigError on misuse)."""
    where = prefix.rstrip(".") or "config"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a table, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in data:
        if k not in fields:
            allowed = ", ".join(fields)
            hint = _did_you_mean(str(k), fields, prefix) or (
                _other_models(str(k), data) if not prefix else ""
            )
            raise ConfigError(f"{prefix}{k}: unknown key{hint}; allowed in [{where}]: {allowed}")
    kwargs = {}
    for name, f in fields.items():
        if dataclasses.is_dataclass(f.default):
            kwargs[name] = build(type(f.default), data.get(name, {}), f"{prefix}{name}.")
        elif name in data:
            rule: Rule = f.metadata["rule"]
            kwargs[name] = rule.coerce(prefix + name, data[name])
    obj = cls(**kwargs)  # a Section checks itself on construction
    if hasattr(obj, "check") and not isinstance(obj, Section):
        obj.check()
    if hasattr(obj, "resolve"):  # fields derived from files, knowing which keys were given
        obj = obj.resolve(frozenset(data))
    return obj


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """Parse one ``--set section.key=value``; the value is read as TOML, else as a bare string."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment}: must be key=value (e.g. task.n_tasks=1000)")
    key, raw = assignment.split("=", 1)
    if key.count(".") >= MAX_DEPTH:  # before splitting: a key of 10^6 dots built 10^6 tables
        raise ConfigError(
            f"--set {key.strip()[:60]}…: {key.count('.') + 1} dotted names, tables nested that deep; a key is section.name (at most {MAX_DEPTH})"
        )
    path = [p.strip() for p in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"--set {assignment}: key must be dotted names like task.alpha")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise ConfigError(
            f"--set {key.strip()}: value nested too deeply to parse; a config value is a number, string or flat list"
        ) from None
    check_depth(value, f"--set {key.strip()}")
    return path, value


def apply_sets(data: dict, assignments: list[str]) -> dict:
    """Apply ``--set`` assignments to a (deep-copied) TOML dict."""
    data = copy.deepcopy(data)
    for a in assignments:
        path, value = parse_set(a)
        set_dotted(data, path, value, lambda p, a=a: ConfigError(f"--set {a}: {p} is not a table"))
    return data


def set_dotted(
    data: dict, path: Sequence[str], value: Any, not_a_table: Callable[[str], Exception]
) -> None:
    """``data[path[0]][path[1]]… = value``, making the tables on the way; a name on the way that
    holds a value, not a table, raises ``not_a_table(name)``."""
    node = data
    for p in path[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise not_a_table(p)
        node = nxt
    node[path[-1]] = value


def read_toml(path: str | Path) -> dict:
    """Read a TOML file; missing, unreadable or malformed files raise one-line ConfigErrors."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {str(p)!r}: not found")
    size = regular_input(p, "config file")
    if size > MAX_TOML_BYTES:  # before reading it: a config is a few KiB
        raise ConfigError(
            f"config file {str(p)!r}: {size} bytes, more than a config can need ({MAX_TOML_BYTES >> 20} MiB at most)"
        )
    try:
        text = p.read_bytes().decode()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {str(p)!r}: cannot be read ({e})") from None
    return loads_toml(text, f"config file {str(p)!r}")


def from_dict(data: dict) -> Any:
    """Validate a whole config dict (its ``model`` key picks the schema; without one, the default
    model's, :func:`fastdyn.plugins.default`)."""
    if not isinstance(data, dict):
        raise ConfigError("config: must be a table")
    check_depth(data, "config")
    model = data["model"] if "model" in data else plugins.default()
    if not isinstance(model, str):
        raise ConfigError(f"model: must be a string naming the model, got {model!r}")
    return build(schema_for(model), data)


def load_config(
    path: str | Path | None = None,
    sets: list[str] | tuple[str, ...] = (),
    *,
    note: Callable[[str], None] | None = None,
) -> Any:
    """Read ``path`` (or start from the defaults), apply ``--set`` overrides, validate.

    A config file's ``output.track`` that an override made too long (``--set task.n_tasks=1000``
    on a preset tracking s = 10^5) is cut to the indices ≤ ``task.n_tasks``, and ``note`` gets one
    line saying so (default: a ``UserWarning``); see :func:`fit_track`. An ``output.track`` given
    in ``sets`` is never cut: out of range, it is a ConfigError.
    """
    data = read_toml(path) if path is not None else {}
    check_depth(data, "config")  # before apply_sets deep-copies it
    merged = apply_sets(data, list(sets))
    try:
        return from_dict(merged)
    except ConfigError as e:
        fitted = fit_track(data, merged, sets, e)
        if fitted is None:
            raise
        cfg, line = fitted
        if note is None:
            import warnings

            warnings.warn(line, UserWarning, stacklevel=2)
        else:
            note(line)
        return cfg


def fit_track(
    data: dict, merged: dict, sets: Sequence[str], error: ConfigError
) -> tuple[Any, str] | None:
    """The config ``merged`` (file ``data`` + ``sets``) with its file's ``output.track`` cut to
    the tasks that exist, and the note saying so; None where ``error`` is not that case: the
    track was given in ``sets``, or the file alone already tracks beyond its own tasks."""
    if not str(error).startswith("output.track: task indices must be ≤ task.n_tasks"):
        return None
    if any(parse_set(a)[0] == ["output", "track"] for a in sets):
        return None  # asked for explicitly: refused as given
    track = merged.get("output", {}).get("track")
    if not isinstance(track, list) or not all(type(s) is int for s in track):
        return None
    try:
        from_dict(data)  # the file as written must be consistent: only an override broke it
    except ConfigError as e:
        if str(e).startswith("output.track:"):
            return None
    probe = copy.deepcopy(merged)
    probe["output"]["track"] = []
    try:
        n = from_dict(probe).task.n_tasks
    except ConfigError:
        return None
    keep = [s for s in track if s <= n]
    dropped = [s for s in track if s > n]
    fitted = copy.deepcopy(merged)
    fitted["output"]["track"] = keep
    cfg = from_dict(fitted)
    kept = ", ".join(map(str, keep)) if keep else "the default"
    return cfg, (
        f"note: output.track: dropped {', '.join(map(str, dropped))} (> task.n_tasks = {n}); "
        f"tracking {kept}"
    )


def to_dict(cfg: Any) -> dict:
    """The resolved config as plain TOML-able values (tuples → lists; ``None``, a field left
    unset, is omitted)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if v is None:
            continue
        out[f.name] = (
            to_dict(v) if dataclasses.is_dataclass(v) else (list(v) if isinstance(v, tuple) else v)
        )
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(cfg: Any) -> str:
    """The resolved config as TOML text (round-trips through :func:`from_dict`)."""
    d = to_dict(cfg)
    lines = [f"{k} = {_toml_value(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict) and v:  # a section with every field unset is left out
            lines.append(f"\n[{k}]")
            lines += [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"
