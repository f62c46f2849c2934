"""① The config reference, generated from the schema: for every model and section, each key with
its type, default, allowed values, units and help text.

``fastdyn config keys [MODEL]`` prints it; ``docs/config.md`` is its markdown
(``fastdyn config keys --markdown > docs/config.md``), and ``tests/config/test_reference.py``
fails when the two drift apart.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from .. import plugins
from .load import schema_for
from .schema import Rule

#: the TOML type of each kind of field
TYPES = {
    "number": "number", "integer": "integer", "choice": "string", "flag": "boolean",
    "text": "string", "numbers": "list of numbers", "integers": "list of integers",
    "every": "number or string",
}  # fmt: skip


@dataclass(frozen=True)
class Key:
    """One config key: ``name`` as ``--set`` takes it (``task.n_tasks``), the rest as text."""

    name: str
    type: str
    default: str
    allowed: str
    units: str
    help: str


@dataclass(frozen=True)
class Table:
    """A TOML table (``section`` ``""``: the top level) with its keys."""

    section: str
    doc: str
    keys: tuple[Key, ...]


def models(builtin: bool = False) -> list[str]:
    """Every model's name (``builtin``: fastdyn's own), sorted."""
    return [m for m in plugins.names() if not builtin or plugins.is_builtin(m)]


def groups(names: list[str] | None = None) -> list[tuple[list[str], type]]:
    """``names`` (default: every model) grouped by shared schema (several models may share one)."""
    out: list[tuple[list[str], type]] = []
    for m in names if names is not None else models():
        cls = schema_for(m)
        for ms, c in out:
            if c is cls:
                ms.append(m)
                break
        else:
            out.append(([m], cls))
    return out


def tables(model: str) -> list[Table]:
    """The tables of ``model``'s config, the top level first."""
    root = schema_for(model)
    top: list[Key] = []
    out: list[Table] = []
    for f in dataclasses.fields(root):
        if dataclasses.is_dataclass(f.default):
            out += _section(f.name, type(f.default))
        else:
            top.append(_key(f.name, f, f.default))
    return [Table("", "", tuple(top)), *out]


def _section(name: str, cls: type) -> list[Table]:
    """The tables of section ``cls``; defaults are its fields' (what a TOML file without the key
    gets), not the root's default instance's."""
    keys: list[Key] = []
    nested: list[Table] = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default):
            nested += _section(f"{name}.{f.name}", type(f.default))
        else:
            keys.append(_key(f"{name}.{f.name}", f, f.default))
    return [Table(name, _doc(cls, name), tuple(keys)), *nested]


def _doc(cls: type, name: str) -> str:
    """The section docstring's first paragraph, without its ``[name]:`` head and without
    citations of the paper-notation notes (``spec …``), which are not shipped."""
    para = (cls.__doc__ or "").strip().split("\n\n")[0]
    s = " ".join(para.split())
    s = re.sub(rf"^\[{re.escape(name.split('.')[-1])}\]:\s*", "", s)
    s = re.sub(r"\s*\(spec[^)]*\)", "", s)
    return s.replace("``", "`")


def _key(name: str, f: dataclasses.Field, default: Any) -> Key:
    rule: Rule = f.metadata["rule"]
    allowed = rule.describe()
    if rule.optional:
        allowed += ", or omitted"
    help_ = rule.help or (
        "the model: picks the schema of the other keys" if name == "model" else ""
    )
    kind = TYPES[rule.kind] + (" or string" if rule.extra else "")
    return Key(name, kind, _value(default), allowed, rule.units, help_)


def _value(v: Any) -> str:
    """``v`` as TOML writes it (``not set`` for ``None``)."""
    if v is None:
        return "not set"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "inf" if v > 0 else "-inf" if v < 0 else "nan"
        if v != 0 and not 1e-4 <= abs(v) < 1e6:
            m, e = f"{v:.14e}".split("e")
            return f"{m.rstrip('0').rstrip('.')}e{int(e)}"
        s = f"{v:.15g}"
        return s if "." in s else s + ".0"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return repr(v)


def text(names: list[str] | None = None) -> str:
    """Plain text: per model a TOML-like listing, ``key = default  allowed [units] — help``."""
    lines: list[str] = []
    for ms, _cls in groups(names):
        lines.append(f"# model = {' | '.join(repr(m) for m in ms)}")
        for t in tables(ms[0]):
            if t.section:
                lines += ["", f"[{t.section}]" + (f"  {t.doc}" if t.doc else "")]
            width = max((len(_short(k, t)) + 3 + len(k.default) for k in t.keys), default=0)
            for k in t.keys:
                head = f"{_short(k, t)} = {k.default}"
                units = f" [{k.units}]" if k.units else ""
                helps = f" — {k.help}" if k.help else ""
                lines.append(f"{head:<{width}}  {k.allowed}{units}{helps}")
        lines.append("")
    return "\n".join(lines)


def _short(k: Key, t: Table) -> str:
    return k.name[len(t.section) + 1 :] if t.section else k.name


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("*", "\\*").replace("<", "\\<") if s else ""


def markdown(names: list[str] | None = None, summaries: dict[str, str] | None = None) -> str:
    """``docs/config.md``: the keys of ``names`` (default: fastdyn's own models), a table per section
    (``summaries``: a line per model, from the model registry)."""
    summaries = summaries or {}
    out = [
        "# Config reference",
        "",
        "<!-- Generated from the schemas (each model package's config module, fastdyn/models/) by"
        " `fastdyn config keys --markdown > docs/config.md`; do not edit by hand:"
        " tests/config/test_reference.py fails when this file and the schema differ. -->",
        "",
        "A config is a TOML file whose top-level `model` picks the schema below; any key can be"
        " overridden with `fastdyn simulate CONFIG --set section.key=value`, and"
        " `fastdyn simulate CONFIG --check` validates without running. A value outside what is"
        " allowed is one line naming the key (`fastdyn: error: task.n_tasks: must be an integer"
        " ≥ 1 …`), exit code 2. The shipped configs are in `data/configs/`;"
        " `fastdyn config keys MODEL` prints the same reference on the terminal.",
        "",
        "A `--set task.n_tasks=N` below the config file's `output.track` (the `quickstart` preset"
        " tracks s up to 10^5) drops the tracked indices above N with a one-line note on stderr;"
        " an `output.track` given with `--set` is used as given, and refused when an index"
        " exceeds `task.n_tasks`.",
        "",
    ]
    for ms, _cls in groups(names if names is not None else models(builtin=True)):
        out.append("## " + ", ".join(f'`model = "{m}"`' for m in ms))
        out.append("")
        out += [f"- `{m}`: {summaries[m]}" for m in ms if summaries.get(m)]
        if any(summaries.get(m) for m in ms):
            out.append("")
        for t in tables(ms[0]):
            out.append(f"### `[{t.section}]`" if t.section else "### Top level")
            out.append("")
            if t.doc:
                out += [_cell(t.doc), ""]
            out.append("| key | type | default | allowed | units | meaning |")
            out.append("|---|---|---|---|---|---|")
            for k in t.keys:
                cells = [f"`{k.name}`", k.type, f"`{k.default}`", _cell(k.allowed), _cell(k.units), _cell(k.help)]  # fmt: skip
                out.append("| " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def dotted_keys(data: dict, prefix: str = "") -> list[str]:
    """The keys of a TOML table as ``--set`` names them (``task.n_tasks``)."""
    out: list[str] = []
    for k, v in data.items():
        if isinstance(v, dict):
            out += dotted_keys(v, f"{prefix}{k}.")
        else:
            out.append(prefix + k)
    return out
