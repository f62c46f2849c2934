"""Sweep files (TOML) → a list of points, each one validated config with a stable name.

A sweep file (docs/sweeps.md has the full reference)::

    [sweep]
    base = "../configs/quickstart.toml"   # a config path (relative to this file) or a preset name
    output = "results/d_scan"             # output directory (relative to the working directory)
    seeds = [0, 1]                        # or {count = 3, start = 0}; innermost axis, sets `seed`
    sets = ["time.n_times=64"]            # --set style overrides applied to the base

    [base]                                # inline config (merged over sweep.base, if both given)
    task.n_tasks = 100_000

    [grid]                                # Cartesian product, first axis slowest
    task.model_size = {log = [100, 100_000], num = 7, integer = true}
    task.alpha = [1.5, 2.0]

    [[zip]]                               # advanced together; one axis of the product
    task.model_size = [100, 1000]
    time.t_max = [1e6, 1e8]

    [resources]                           # slurm / pbs jobs (dask-jobqueue) and --print-array
    cores = 8

Points: the product of the grid axes (in file order), then the zip groups (in file order), then
the seeds; point ``i`` is named ``p{i:04d}`` (wider when there are more than 10 000 points).
Every error is a :class:`SweepError` (a ConfigError): one line naming the field, exit 2.
"""

from __future__ import annotations

import copy
import itertools
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.load import set_dotted
from ..config.schema import ConfigError

#: keys of an axis range table
_RANGE_KEYS = {"log", "lin", "num", "integer"}
_TOP_KEYS = {"sweep", "base", "grid", "zip", "resources", "split"}
_SWEEP_KEYS = {"base", "output", "seeds", "sets", "index"}
RESOURCE_KEYS = {
    "jobs": int,
    "cores": int,
    "workers_per_job": int,
    "memory": str,
    "walltime": str,
    "queue": str,
    "account": str,
    "job_extra": list,
    "prologue": list,
    "interface": str,
}


class SweepError(ConfigError):
    """A user error in a sweep file or sweep options (one line naming the field)."""


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its position, name, swept values and resolved config (TOML text)."""

    id: int
    name: str
    params: dict[str, Any]
    config_toml: str

    @property
    def relpath(self) -> str:
        """The point file, relative to the sweep's output directory."""
        return f"points/{self.name}.h5"


@dataclass
class Sweep:
    """A parsed sweep file."""

    text: str
    source: Path | None
    base: dict[str, Any]
    axes: list[list[tuple[str, list[Any]]]]  # each product axis: one or more zipped (key, values)
    seeds: list[int] | None
    output: str | None
    index_name: str = "index.h5"
    resources: dict[str, Any] = field(default_factory=dict)
    split: dict[str, Any] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        """Swept parameter names in column order (``seed`` last when seeds are swept)."""
        out = [k for axis in self.axes for k, _ in axis]
        return out + (["seed"] if self.seeds is not None else [])

    @property
    def stem(self) -> str:
        return self.source.stem if self.source is not None else "sweep"

    def points(self) -> list[Point]:
        """Every point, in order, each validated (SweepError naming the point and field)."""
        return expand(self)


def _err(msg: str) -> SweepError:
    return SweepError(msg)


def _flatten_axes(table: Any, where: str, prefix: str = "") -> list[tuple[str, Any]]:
    """``{task: {alpha: [..]}}`` or ``{"task.alpha": [..]}`` → [("task.alpha", [..])]."""
    if not isinstance(table, dict):
        raise _err(f"{where}: must be a table of dotted config keys, got {type(table).__name__}")
    out: list[tuple[str, Any]] = []
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and not (set(v) & _RANGE_KEYS):
            out += _flatten_axes(v, where, key + ".")
        else:
            out.append((key, v))
    return out


def axis_values(where: str, spec: Any) -> list[Any]:
    """The values of one axis: a non-empty list, or ``{log|lin = [lo, hi], num = n, integer}``."""
    if isinstance(spec, list):
        if not spec:
            raise _err(
                f"{where}: must be a non-empty list of values or a {{log|lin = [lo, hi], num = n}} range"
            )
        return list(spec)
    if not isinstance(spec, dict):
        raise _err(
            f"{where}: must be a list of values or a {{log|lin = [lo, hi], num = n}} range, got {spec!r}"
        )
    unknown = set(spec) - _RANGE_KEYS
    if unknown:
        raise _err(
            f"{where}.{sorted(unknown)[0]}: unknown range key; allowed: log, lin, num, integer"
        )
    kinds = [k for k in ("log", "lin") if k in spec]
    if len(kinds) != 1:
        raise _err(f"{where}: a range needs exactly one of log = [lo, hi] or lin = [lo, hi]")
    kind = kinds[0]
    ends = spec[kind]
    if not (
        isinstance(ends, list)
        and len(ends) == 2
        and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in ends
        )
    ):
        raise _err(f"{where}.{kind}: must be [lo, hi] (two finite numbers), got {ends!r}")
    lo, hi = float(ends[0]), float(ends[1])
    num = spec.get("num")
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise _err(f"{where}.num: must be an integer ≥ 1 (number of values), got {num!r}")
    if kind == "log" and (lo <= 0 or hi <= 0):
        raise _err(f"{where}.log: both ends must be > 0, got {ends!r}")
    if num == 1:
        vals = [lo]
    elif kind == "log":
        a, b = math.log10(lo), math.log10(hi)
        vals = [10.0 ** (a + (b - a) * i / (num - 1)) for i in range(num)]
        vals[0], vals[-1] = lo, hi
    else:
        vals = [lo + (hi - lo) * i / (num - 1) for i in range(num)]
        vals[-1] = hi
    integer = spec.get("integer", False)
    if not isinstance(integer, bool):
        raise _err(f"{where}.integer: must be true or false, got {integer!r}")
    if integer:
        vals = [int(round(v)) for v in vals]
        if len(set(vals)) != len(vals):
            raise _err(
                f"{where}: rounding to integers gives repeated values {vals}; lower num or widen the range"
            )
    return vals


def _seeds(spec: Any) -> list[int] | None:
    if spec is None:
        return None
    if isinstance(spec, dict):
        unknown = set(spec) - {"count", "start"}
        if unknown:
            raise _err(f"sweep.seeds.{sorted(unknown)[0]}: unknown key; allowed: count, start")
        n, s0 = spec.get("count"), spec.get("start", 0)
        if (
            not isinstance(n, int)
            or isinstance(n, bool)
            or n < 1
            or not isinstance(s0, int)
            or isinstance(s0, bool)
            or s0 < 0
        ):
            raise _err(
                f"sweep.seeds: {{count = n, start = s}} needs integers n ≥ 1 and s ≥ 0, got {spec!r}"
            )
        return list(range(s0, s0 + n))
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 1:
            raise _err(f"sweep.seeds: a count must be ≥ 1, got {spec}")
        return list(range(spec))
    if (
        isinstance(spec, list)
        and spec
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in spec)
    ):
        if len(set(spec)) != len(spec):
            raise _err(f"sweep.seeds: must not repeat a seed, got {spec}")
        return list(spec)
    raise _err(
        f"sweep.seeds: must be a list of integers ≥ 0, a count, or {{count = n, start = s}}, got {spec!r}"
    )


def _deep_merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _base_config(sweep_tbl: dict, inline: Any, base_dir: Path) -> dict:
    from ..config.load import apply_sets, read_toml
    from ..config.presets import resolve

    data: dict = {}
    ref = sweep_tbl.get("base")
    if ref is not None:
        if not isinstance(ref, str):
            raise _err(f"sweep.base: must be a config path or preset name, got {ref!r}")
        p = Path(ref)
        if not p.is_absolute() and (base_dir / p).is_file():
            p = base_dir / p
        elif not p.is_file():
            try:
                p = Path(resolve(ref))
            except (ConfigError, ValueError, OSError) as e:
                raise _err(f"sweep.base: {str(e).splitlines()[0]}") from None
        try:
            data = read_toml(p)
        except ConfigError as e:
            raise _err(f"sweep.base: {e}") from None
    if inline is not None:
        if not isinstance(inline, dict):
            raise _err(f"base: must be a table (an inline config), got {type(inline).__name__}")
        data = _deep_merge(data, inline)
    sets = sweep_tbl.get("sets", [])
    if not (isinstance(sets, list) and all(isinstance(s, str) for s in sets)):
        raise _err(f"sweep.sets: must be a list of 'key=value' strings, got {sets!r}")
    try:
        return apply_sets(data, sets)
    except ConfigError as e:
        raise _err(f"sweep.sets: {e}") from None


def parse(text: str, source: str | Path | None = None) -> Sweep:
    """Parse sweep TOML ``text``; ``source`` (the file) anchors a relative ``sweep.base``."""
    src = Path(source) if source is not None else None
    where = str(src) if src is not None else "sweep"
    from ..config.load import loads_toml

    try:
        data = loads_toml(text, f"sweep file {where!r}")
    except ConfigError as e:
        raise _err(str(e)) from None
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise _err(
            f"{sorted(unknown)[0]}: unknown sweep table; allowed: {', '.join(sorted(_TOP_KEYS))}"
        )
    sw = data.get("sweep", {})
    if not isinstance(sw, dict):
        raise _err("sweep: must be a table")
    unknown = set(sw) - _SWEEP_KEYS
    if unknown:
        raise _err(
            f"sweep.{sorted(unknown)[0]}: unknown key; allowed: {', '.join(sorted(_SWEEP_KEYS))}"
        )
    base_dir = src.parent if src is not None else Path(".")
    base = _base_config(sw, data.get("base"), base_dir)
    axes: list[list[tuple[str, list[Any]]]] = []
    seen: set[str] = set()

    def claim(key: str, where: str) -> None:
        if key == "seed" or key in seen:
            raise _err(
                f"{where}: {key} is swept twice (seeds go in sweep.seeds)"
                if key != "seed"
                else f"{where}: sweep seeds with sweep.seeds, not as an axis"
            )
        seen.add(key)

    for key, spec in _flatten_axes(data.get("grid", {}), "grid"):
        claim(key, f"grid.{key}")
        axes.append([(key, axis_values(f"grid.{key}", spec))])
    zips = data.get("zip", [])
    if isinstance(zips, dict):
        zips = [zips]
    if not isinstance(zips, list):
        raise _err("zip: must be [[zip]] tables")
    for j, z in enumerate(zips):
        group = []
        for key, spec in _flatten_axes(z, f"zip[{j}]"):
            claim(key, f"zip[{j}].{key}")
            group.append((key, axis_values(f"zip[{j}].{key}", spec)))
        if not group:
            raise _err(f"zip[{j}]: must hold at least one axis")
        lens = {len(v) for _, v in group}
        if len(lens) != 1:
            desc = ", ".join(f"{k} has {len(v)}" for k, v in group)
            raise _err(f"zip[{j}]: axes advanced together need the same number of values ({desc})")
        axes.append(group)
    out = sw.get("output")
    if out is not None and not (isinstance(out, str) and out):
        raise _err(f"sweep.output: must be a directory path, got {out!r}")
    index_name = sw.get("index", "index.h5")
    if not (isinstance(index_name, str) and index_name and "/" not in index_name):
        raise _err(f"sweep.index: must be a file name (no directory), got {index_name!r}")
    res = data.get("resources", {})
    if not isinstance(res, dict):
        raise _err("resources: must be a table")
    for k, v in res.items():
        if k not in RESOURCE_KEYS:
            raise _err(f"resources.{k}: unknown key; allowed: {', '.join(sorted(RESOURCE_KEYS))}")
        want = RESOURCE_KEYS[k]
        ok = isinstance(v, want) and not isinstance(v, bool)
        if want is int:
            ok = ok and v >= 1
        if want is list:
            ok = ok and all(isinstance(x, str) for x in v)
        if not ok:
            what = {int: "an integer ≥ 1", str: "a string", list: "a list of strings"}[want]
            raise _err(f"resources.{k}: must be {what}, got {v!r}")
    split = data.get("split", {})
    if not isinstance(split, dict):
        raise _err("split: must be a table")
    return Sweep(
        text, src, base, axes, _seeds(sw.get("seeds")), out, index_name, dict(res), dict(split)
    )


def is_sweep_text(text: str) -> bool:
    """Whether TOML ``text`` is a sweep file (only sweep tables at the top) rather than a config."""
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return True  # let parse() report the TOML error
    return set(data) <= _TOP_KEYS


def from_config(path: str | Path) -> Sweep:
    """A one-point sweep whose base is the config file ``path`` (for split runs of a config)."""
    p = Path(path).resolve()
    return parse(f"[sweep]\nbase = {str(p)!r}\n", p.with_suffix(".split.toml"))


def load(path: str | Path) -> Sweep:
    """Read and parse a sweep file (SweepError when missing or malformed)."""
    p = Path(path)
    if not p.is_file():
        raise _err(f"sweep file {str(p)!r}: not found")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise _err(f"sweep file {str(p)!r}: cannot be read ({e})") from None
    return parse(text, p)


def _set_key(data: dict, key: str, value: Any) -> None:
    set_dotted(data, key.split("."), value, lambda p: _err(f"{key}: {p} is not a config table"))


def point_width(n: int) -> int:
    """Digits of point names: 4, or more for sweeps of more than 10 000 points."""
    return max(4, len(str(max(n - 1, 0))))


def expand(sweep: Sweep) -> list[Point]:
    """The points of ``sweep`` in order, each config validated (SweepError naming the point)."""
    from ..config.load import from_dict, to_toml

    per_axis = []
    for axis in sweep.axes:
        n = len(axis[0][1])
        per_axis.append([[(k, vals[i]) for k, vals in axis] for i in range(n)])
    if sweep.seeds is not None:
        per_axis.append([[("seed", s)] for s in sweep.seeds])
    combos = list(itertools.product(*per_axis)) if per_axis else [()]
    width = point_width(len(combos))
    points = []
    for i, combo in enumerate(combos):
        data = copy.deepcopy(sweep.base)
        params: dict[str, Any] = {}
        for group in combo:
            for k, v in group:
                _set_key(data, k, v)
                params[k] = v
        name = f"p{i:0{width}d}"
        try:
            cfg = from_dict(data)
        except ConfigError as e:
            vals = ", ".join(f"{k} = {v!r}" for k, v in params.items())
            raise _err(f"point {name} ({vals}): {str(e).splitlines()[0]}") from None
        points.append(Point(i, name, params, to_toml(cfg)))
    return points


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` → (i, n) with 0 ≤ i < n."""
    try:
        a, b = text.split("/")
        i, n = int(a), int(b)
    except ValueError:
        raise _err(
            f"--shard: must be i/n with integers 0 ≤ i < n (e.g. 0/4), got {text!r}"
        ) from None
    if not (n >= 1 and 0 <= i < n):
        raise _err(f"--shard: must be i/n with 0 ≤ i < n, got {text!r}")
    return i, n


def shard_from_env(env: dict[str, str]) -> tuple[int, int] | None:
    """(i, n) from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT (offset by SLURM_ARRAY_TASK_MIN)."""
    if "SLURM_ARRAY_TASK_ID" not in env or "SLURM_ARRAY_TASK_COUNT" not in env:
        return None
    try:
        tid = int(env["SLURM_ARRAY_TASK_ID"])
        n = int(env["SLURM_ARRAY_TASK_COUNT"])
        lo = int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
    except ValueError:
        raise _err("SLURM_ARRAY_TASK_ID/COUNT: must be integers") from None
    i = tid - lo
    if not (n >= 1 and 0 <= i < n):
        raise _err(
            f"SLURM_ARRAY_TASK_ID: {tid} is outside the array (min {lo}, count {n}); use --array=0-{n - 1} or 1-{n}"
        )
    return i, n


def in_shard(point_id: int, shard: tuple[int, int] | None) -> bool:
    """Points are dealt round-robin: shard i of n runs the ids ≡ i (mod n)."""
    return shard is None or point_id % shard[1] == shard[0]
