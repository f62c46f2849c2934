"""``fastdyn inspect FILE``: config, status and the series with their shapes."""

from __future__ import annotations

import json
from typing import Any

import click

from ._common import guarded


@click.command("inspect")
@click.argument("file")
@click.option("--config/--no-config", "show_config", default=True, help="Print the stored config.")
@click.option(
    "--verify/--no-verify",
    default=True,
    help="Read every dataset, checking its checksums (a damaged file exits 2).",
)
@guarded
def command(file: str, show_config: bool, verify: bool) -> None:
    """Describe a fastdyn HDF5 FILE."""
    from ..h5.reader import FileFormatError, open_file

    f = open_file(file)
    try:
        lines = _describe(f, file, show_config, verify)
    except FileFormatError:
        raise
    except Exception as e:  # noqa: BLE001 — whatever a damaged file makes h5py raise: one line, exit 2
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise FileFormatError(f"{file}: damaged file ({why})") from None
    finally:
        f.close()
    click.echo("\n".join(lines))


def _describe(f, file: str, show_config: bool, verify: bool) -> list[str]:
    """The report as lines, built completely before anything is printed (a damaged dataset
    found part-way gives one error line, not half a report)."""
    import h5py

    from ..h5.reader import FileFormatError
    from ..h5.repair import state
    from ..h5.verify import read_verified
    from ..h5.writer import CHECKPOINT, check_identity, checkpoint_damage, read_checkpoint

    out: list[str] = []
    echo = out.append
    if True:
        a = f.attrs
        if verify:
            try:
                check_identity(a, file)
            except ValueError as e:
                raise FileFormatError(str(e)) from None
        get = lambda k: (lambda v: v.decode() if isinstance(v, bytes) else v)(a.get(k, ""))  # noqa: E731
        echo(f"file:     {file}")
        echo(f"model:    {get('model')}")
        echo(f"status:   {get('status')}")
        echo(f"state:    {state(file, str(get('status')))}")
        echo(f"format:   {get('format')} v{get('format_version')}  ({get('generated_by')})")
        echo(f"seed:     {get('seed')}")
        if made := _made_by(get("versions")):
            echo(f"made by:  {made}")
        if get("note"):
            echo(f"note:     {get('note')}")
        echo(f"timings:  {_timings(get('timings'))}")
        echo("series:")
        coords: list[str] = []

        def line(name, obj) -> str:
            units = obj.attrs.get("units", "")
            units = units.decode() if isinstance(units, bytes) else units
            units = "dimensionless" if units == "1" else units  # CF's "1"
            return f"  /{name:28s} {str(obj.shape):>14s} {obj.dtype}  [{units}]"

        def show(name, obj):
            if isinstance(obj, h5py.Dataset) and verify:
                read_verified(obj)  # every dataset's checksum (a torn last chunk: verified)
            if name.startswith(CHECKPOINT) or not isinstance(obj, h5py.Dataset):
                return
            if obj.attrs.get("CLASS") in (b"DIMENSION_SCALE", "DIMENSION_SCALE"):
                return  # an axis of the series (time, task index), listed under coordinates
            echo(line(name, obj) + _axes(obj))

        def scale(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith(CHECKPOINT):
                if obj.attrs.get("CLASS") in (b"DIMENSION_SCALE", "DIMENSION_SCALE"):
                    # each scale once, by its own path (the series groups hold hard links to it)
                    own = next((p for p in ("time", "tasks/index") if p in f and f[p] == obj), name)
                    if line(own, obj) not in coords:
                        coords.append(line(own, obj))

        f.visititems(show)
        f.visititems(scale)
        if coords:
            echo("coordinates:")
            for line in coords:
                echo(line)
        if verify and (bad := checkpoint_damage(f)):
            raise FileFormatError(f"{file}: damaged checkpoint ({bad})")
        ck = read_checkpoint(f) if CHECKPOINT in f else None
        if CHECKPOINT in f:
            where = "none valid" if ck is None else f"#{ck[2]}, after row {ck[1]}"
            echo(f"checkpoint: {where}; {_checkpoint_size(f[CHECKPOINT])}")
        if show_config:
            echo("config:")
            for line in str(get("config")).splitlines():
                echo("  " + line)
    return out


def _made_by(text: Any) -> str:
    """The packages and commit of the root attribute ``versions`` in one line ("" when absent)."""
    try:
        v = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return ""
    if not isinstance(v, dict):
        return ""
    parts = [f"fastdyn {v['fastdyn']}"] if "fastdyn" in v else []
    pkg = str(v.get("model_package", ""))
    if pkg and not pkg.startswith("fastdyn "):
        parts.append(f"model from {pkg}")
    parts += [f"{k} {v[k]}" for k in ("numba", "numpy", "h5py") if k in v]
    if "git_commit" in v:
        modified = " (with uncommitted changes)" if v.get("git_modified") else ""
        parts.append(f"git {str(v['git_commit'])[:12]}{modified}")
    return ", ".join(parts)


def _axes(ds) -> str:
    """``  (time, head)``: the names of the dimension scales on the axes of ``ds`` ("" when it
    has none: a scalar); an axis without one, or whose scale HDF5 cannot name, shows as ``-``."""
    if not ds.ndim:
        return ""
    names = []
    for scales in ds.dims:
        name = scales[0].name if len(scales) else None
        names.append(name.rsplit("/", 1)[-1] if name else "-")
    return f"  ({', '.join(names)})"


def _checkpoint_size(group) -> str:
    """What the resume state costs on disk: "12.3 MB (the state --resume restarts from; dropped
    when the run completes unless output.keep_checkpoint)"."""
    import h5py

    total = 0

    def add(_name, obj) -> None:
        nonlocal total
        if isinstance(obj, h5py.Dataset):
            total += obj.id.get_storage_size()

    group.visititems(add)
    size = f"{total / 1e6:.1f} MB" if total >= 1e5 else f"{total / 1e3:.1f} kB"
    return f"{size} (the state --resume restarts from; dropped when the run completes unless output.keep_checkpoint)"


#: what each key of the ``timings`` attribute measures (seconds of wall time of the last session:
#: a resumed run counts from its --resume)
_TIMING_NAMES = {
    "total": "the whole run, set-up and compilation included",
    "wall": "from opening the file to closing it",
    "kernels": "inside the compiled kernels",
}


def _timings(raw: str) -> str:
    """The ``timings`` attribute in words: "total 6.09 s (the whole run, ...); ..."; the raw text
    when it is not a JSON object of numbers."""
    import datetime
    import json

    try:
        t = json.loads(raw)
        parts = []
        for k, v in t.items():
            if k == "resumed_at":
                when = datetime.datetime.fromtimestamp(float(v), datetime.UTC)
                parts.append(f"this session resumed the run at {when:%Y-%m-%d %H:%M:%S} UTC")
            else:
                why = f" ({_TIMING_NAMES[k]})" if k in _TIMING_NAMES else ""
                parts.append(f"{k} {float(v):.3g} s{why}")
    except (TypeError, ValueError, AttributeError, OverflowError, OSError):
        return str(raw)
    return "; ".join(parts) or "none recorded"
