"""Config schema: frozen dataclasses whose fields carry their allowed values, units and help.

A field is declared with one of :func:`number`, :func:`integer`, :func:`choice`, :func:`flag`,
:func:`numbers`, :func:`integers`, :func:`text` (or restated from a base section with another
default by :func:`like`); :func:`fastdyn.config.load.build` turns a TOML
table into the dataclass, rejecting unknown keys, wrong types, non-finite numbers and values out of
range with one line that names the field (``task.n_tasks: must be an integer ≥ 1, got 0``).
Cross-field rules live in each section's ``check()`` method and raise :class:`ConfigError`; the
keys and rules several models share are declared once in :mod:`fastdyn.config.common`.

Every section of fastdyn's own models derives from :class:`Section`, and so validates the same way
when constructed directly in Python (``DataSettings(P=0)`` raises the same one-line ConfigError as
``--set data.P=0``): its ``__post_init__`` runs every field's rule, stores the canonical value and
calls ``check()``. A plug-in's schema may still be plain frozen dataclasses: ``build`` runs their
rules and then their ``check()``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers as _numbers
import re
from dataclasses import dataclass, field
from typing import Any

#: the optimisers of ``drive/optim.py``, by the name an ``[optim]`` section gives
OPTIMIZERS = ("gd", "sgd", "adam", "adamw")


class ConfigError(ValueError):
    """A user error in a config: the message is one line naming the field and what is allowed."""


def regular_input(path: Any, field: str) -> int:
    """The size in bytes of the input file ``path`` named by ``field``; ConfigError (one line)
    when it is missing, a directory, or not a regular file: a FIFO blocks the first read for
    ever and a device never ends, so neither is opened."""
    import os
    import stat

    try:
        st = os.stat(path)
    except OSError as e:
        raise ConfigError(f"{field}: {str(path)!r}: cannot be read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{field}: {str(path)!r}: is a directory, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(
            f"{field}: {str(path)!r}: not a regular file (a FIFO, socket or device); give a file"
        )
    return st.st_size


@dataclass(frozen=True)
class Rule:
    """What a field accepts. ``kind`` is one of number, integer, choice, flag, numbers, integers, text, every.
    ``optional``: ``None`` is accepted too (a default meaning "not given"; TOML cannot write it):
    the field factories set it for a ``None`` default."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    options: tuple = ()
    extra: tuple = ()  # extra accepted string literals for numeric fields (e.g. "inf", "all")
    help: str = ""
    units: str = ""
    optional: bool = False

    def describe(self) -> str:
        """Human description of the allowed values, used in error messages and `--help`."""
        if self.kind == "choice":
            return "one of " + ", ".join(repr(o) for o in self.options)
        if self.kind == "flag":
            return "true or false"
        if self.kind == "text":
            return "a string"
        if self.kind == "every":
            return 'a number of seconds ≥ 0 (60, "60s"), "<n> steps" or "off"'
        base = {
            "number": "a finite number",
            "integer": "an integer",
            "numbers": "a list of finite numbers",
            "integers": "a list of integers",
        }[self.kind]
        bounds = []
        if self.lo is not None:
            bounds.append(("> " if self.lo_open else "≥ ") + _fmt(self.lo))
        if self.hi is not None:
            bounds.append(("< " if self.hi_open else "≤ ") + _fmt(self.hi))
        s = base + (" " + " and ".join(bounds) if bounds else "")
        if self.extra:
            s += " or " + " or ".join(repr(e) for e in self.extra)
        return s

    def coerce(self, name: str, value: Any) -> Any:
        """Validate ``value`` for field ``name`` and return it in canonical form."""
        bad = ConfigError(f"{name}: must be {self.describe()}, got {_show(value)}")
        if value is None and self.optional:
            return None
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise bad
            return value
        if self.kind == "text":
            if not isinstance(value, str):
                raise bad
            return value
        if self.kind == "every":
            try:
                unit, x = parse_every(value, name)
            except ValueError as e:
                raise ConfigError(str(e)) from None
            if unit == "off":
                return "off"
            return x if unit == "seconds" else f"{int(x)} steps"
        if self.kind == "choice":
            if (
                isinstance(value, int)
                and not isinstance(value, bool)
                and str(value) in self.options
            ):
                return str(value)  # attention_scale = 1 means "1"
            if not isinstance(value, str) or value not in self.options:
                raise bad
            return value
        if isinstance(value, str) and value in self.extra:
            return value
        if self.kind in ("numbers", "integers"):
            if not isinstance(value, list | tuple):
                raise bad
            scalar = Rule(
                "number" if self.kind == "numbers" else "integer",
                self.lo,
                self.hi,
                self.lo_open,
                self.hi_open,
            )
            try:
                return tuple(scalar.coerce(name, v) for v in value)
            except ConfigError:
                raise bad from None
        if isinstance(value, bool) or not isinstance(value, _numbers.Real):
            raise bad
        if isinstance(value, _numbers.Integral):  # numpy integers from Python callers
            value = int(value)
        elif not isinstance(value, int | float):
            value = float(value)
        if self.kind == "integer":
            if isinstance(value, float):
                if not (math.isfinite(value) and value == int(value)):
                    raise bad
                value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise bad
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            raise bad
        if self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)):
            raise bad
        return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _show(value: Any) -> str:
    s = repr(value)
    return s if len(s) <= 60 else s[:57] + "..."


def _field(default: Any, rule: Rule, key: str | None = None) -> Any:
    if isinstance(default, list):
        default = tuple(default)
    meta = {"rule": rule} if key is None else {"rule": rule, "key": key}
    return field(default=default, metadata=meta)


def number(
    default: float, lo=None, hi=None, *, lo_open=False, hi_open=False, extra=(), help="", units=""
) -> Any:
    """A finite float field with optional bounds."""
    return _field(
        default,
        Rule("number", lo, hi, lo_open, hi_open, extra=tuple(extra), help=help, units=units),
    )


def integer(
    default: int | None, lo=None, hi=None, *, extra=(), optional=False, help="", units=""
) -> Any:
    """An integer field with optional bounds (a ``None`` default, or ``optional``: also ``None``,
    "not given")."""
    optional = optional or default is None
    return _field(
        default,
        Rule("integer", lo, hi, extra=tuple(extra), help=help, units=units, optional=optional),
    )


def choice(default: str, options, *, help="", key: str | None = None) -> Any:
    """A string field restricted to ``options`` (``key``: the name errors give, when it is not
    ``<section>.<field>``)."""
    return _field(default, Rule("choice", options=tuple(options), help=help), key)


def flag(default: bool | None, *, optional=False, help="") -> Any:
    """A boolean field (a ``None`` default, or ``optional``: also ``None``, "not given", left out of
    the resolved TOML)."""
    return _field(default, Rule("flag", help=help, optional=optional or default is None))


def text(default: str | None, *, optional=False, help="") -> Any:
    """A free string field (paths; a ``None`` default, or ``optional``: also ``None``, "not given")."""
    return _field(default, Rule("text", help=help, optional=optional or default is None))


def numbers(default, lo=None, hi=None, *, lo_open=False, help="", units="") -> Any:
    """A list of finite floats (stored as a tuple)."""
    return _field(default, Rule("numbers", lo, hi, lo_open, help=help, units=units))


def like(section: type, name: str, default: Any = dataclasses.MISSING, **rule: Any) -> Any:
    """Field ``name`` of ``section`` as declared there, with another ``default`` and the ``Rule``
    attributes in ``rule`` replaced (``hi``, ``options``, ``help``): a subclass that changes a key
    states only what differs."""
    f = next(f for f in dataclasses.fields(section) if f.name == name)
    value = f.default if default is dataclasses.MISSING else default
    return _field(value, dataclasses.replace(f.metadata["rule"], **rule), f.metadata.get("key"))


def physical_memory() -> int:
    """Bytes of physical memory of this machine (0 when unknown)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


#: environment variable capping the memory a run may plan to use (bytes, or "8GiB", "500 MB")
MEMORY_ENV = "FASTDYN_MEMORY_LIMIT"
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
          "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}  # fmt: skip


def _cgroup_limit() -> int:
    """The memory limit of this process's cgroup (v2 or v1) in bytes, 0 when none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return 0


def memory_limit() -> tuple[int, str]:
    """(bytes, description) of the memory a run may plan to use: ``FASTDYN_MEMORY_LIMIT`` when
    set, else the smallest of physical memory, the cgroup limit and RLIMIT_AS (0: unknown)."""
    import os
    import resource

    raw = os.environ.get(MEMORY_ENV, "").strip()
    if raw:
        m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)", raw)
        unit = m and _UNITS.get(m.group(2).lower())
        if not unit or float(m.group(1)) * unit < 1:
            raise ConfigError(
                f'{MEMORY_ENV}: must be a positive size in bytes or with a unit ("8GiB", "500MB"), got {raw!r}'
            )
        return int(float(m.group(1)) * unit), f"{MEMORY_ENV} = {raw}"
    limits = [
        (physical_memory(), "this machine's memory"),
        (_cgroup_limit(), "this cgroup's memory limit"),
    ]
    try:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append((int(soft), "the address-space limit (ulimit -v)"))
    except (ValueError, OSError):
        pass
    known = [(b, w) for b, w in limits if b > 0]
    if not known:
        return 0, "unknown"
    return min(known)


def check_memory(need: float, field: str, what: str, fix: str) -> None:
    """ConfigError naming ``field`` when a run's estimated ``need`` (bytes) exceeds :func:`memory_limit`."""
    limit, where = memory_limit()
    if limit and need > limit:
        raise ConfigError(
            f"{field}: {what} need ~{size_text(need)}, more than the {size_text(limit)} allowed ({where}); {fix}"
        )


def size_text(b: float) -> str:
    """``b`` bytes as "3.2 GiB" / "512 MiB"."""
    return f"{b / 2**30:.3g} GiB" if b >= 2**30 else f"{b / 2**20:.3g} MiB"


def every(default, *, help="") -> Any:
    """How often to checkpoint: seconds (a number or "<x>s") or "<n> steps" (see :func:`parse_every`)."""
    return _field(default, Rule("every", help=help))


_EVERY = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*(s|sec|seconds?|steps?)?\s*$")


def parse_every(value: Any, field: str = "output.checkpoint_every") -> tuple[str, float]:
    """("seconds", x) or ("steps", n) from a ``checkpoint_every`` value: a number or "<x>s" is
    seconds of wall time, "<n> steps" counts the run's own steps, 0 = at every chunk boundary,
    "off" = none on a schedule (only when a signal stops the run): ("off", inf)
    (ValueError naming ``field`` otherwise)."""
    bad = ValueError(
        f'{field}: must be a number of seconds ≥ 0 (60, "60s"), "<n> steps" or "off", got {_show(value)}'
    )
    if isinstance(value, bool):
        raise bad
    if isinstance(value, str) and value.strip().lower() in ("off", "never", "none"):
        return "off", math.inf
    if isinstance(value, int | float):
        if value == math.inf:
            return "off", math.inf
        if not (math.isfinite(value) and 0 <= value <= 1e12):
            raise bad
        return "seconds", float(value)
    if not isinstance(value, str):
        raise bad
    m = _EVERY.match(value)
    if not m:
        raise bad
    x = float(m.group(1))
    unit = m.group(2) or "s"
    if unit.startswith("step"):
        if x != int(x) or x > 1e15:
            raise bad
        return "steps", float(int(x))
    if x > 1e12:
        raise bad
    return "seconds", x


def integers(default, lo=None, hi=None, *, optional=False, help="") -> Any:
    """A list of integers (stored as a tuple); a ``None`` default, or ``optional``: None (not given)
    is allowed too."""
    return _field(
        default, Rule("integers", lo, hi, help=help, optional=optional or default is None)
    )


class Section:
    """Base of config sections that validate on construction, from TOML or directly in Python.

    Subclasses are frozen dataclasses whose fields are declared with the rules above (or hold a
    nested section, whose default is an instance of its class). The class keyword ``prefix`` is
    the section's TOML name with a dot (``class DataSettings(Section, prefix="data.")``; none at
    the top level; a subclass keeps its base's), kept as ``_prefix``: errors name
    ``<prefix><field>``, or a field's own ``key``. Cross-field rules go in :meth:`check`.
    """

    _prefix = ""

    def __init_subclass__(cls, prefix: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if prefix is not None:
            cls._prefix = prefix

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            rule = f.metadata.get("rule")
            if rule is not None:
                key = f.metadata.get("key") or self._prefix + f.name
                object.__setattr__(self, f.name, rule.coerce(key, value))
            elif dataclasses.is_dataclass(f.default) and not isinstance(value, type(f.default)):
                raise ConfigError(
                    f"{self._prefix}{f.name}: must be a {type(f.default).__name__}, got {_show(value)}"
                )
        self.check()

    def check(self) -> None:
        """Cross-field rules (ConfigError naming the field); none by default."""

    def derived(self, **values: Any) -> Any:
        """A copy with ``values`` that ``resolve()`` derived from a file (a task table's length),
        stored as they are: they are checked where they are read, not against the key's range."""
        import copy

        new = copy.copy(self)
        for name, value in values.items():
            object.__setattr__(new, name, value)
        return new
