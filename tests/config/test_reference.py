"""The config reference (issue 17, acceptance 4): ``docs/config.md`` equals what
``fastdyn config keys --markdown`` generates from the schema, every key the shipped configs use is
in it, and the help texts cite only files that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
from click.testing import CliRunner

from fastdyn.cli import main
from fastdyn.config import load_config, to_dict
from fastdyn.config.reference import dotted_keys

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "config.md"
#: the shipped configs (and presets, where a checkout keeps them beside the package)
SHIPPED = sorted([*ROOT.glob("data/configs/*.toml"), *ROOT.glob("fastdyn/presets/*.toml")])


def _fastdyn(*args: str) -> subprocess.CompletedProcess:
    """A fresh process: no test-only model is registered there."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "fastdyn", *args], capture_output=True, text=True, env=env, cwd=ROOT)  # fmt: skip


def _model_part(doc: str, model: str) -> str:
    """The part of the markdown reference under the heading that names ``model``."""
    parts = re.split(r"^## ", doc, flags=re.M)
    hits = [p for p in parts[1:] if f'`model = "{model}"`' in p.splitlines()[0]]
    assert len(hits) == 1, model
    return hits[0]


def test_docs_config_md_is_the_generated_reference():
    res = _fastdyn("config", "keys", "--markdown")
    assert res.returncode == 0, res.stderr
    assert DOC.read_text() == res.stdout, (
        "docs/config.md differs from the schema: regenerate it with "
        "`fastdyn config keys --markdown > docs/config.md`"
    )


def test_every_key_of_the_shipped_configs_is_in_the_reference():
    doc = DOC.read_text()
    assert len(SHIPPED) >= 10
    seen = 0
    for path in SHIPPED:
        data = tomllib.loads(path.read_text())
        part = _model_part(doc, data.get("model", "msfr"))
        for key in dotted_keys(data):
            assert f"| `{key}` |" in part, f"{path.name}: {key} is not in docs/config.md"
            seen += 1
    assert seen >= 100


def test_every_key_of_every_default_config_is_listed():
    """Independent of the generator: the keys ``to_dict`` writes for each model's defaults."""
    doc = DOC.read_text()
    for model in ("msfr", "msfr-attn", "attn-m", "attn-s", "mlp-cubic"):
        finite = ["task.n_samples=1000"] if model == "msfr-attn" else []  # its default is "inf"
        keys = dotted_keys(to_dict(load_config(None, [f'model="{model}"', *finite])))
        text = CliRunner().invoke(main, ["config", "keys", model])
        assert text.exit_code == 0, text.output
        section = ""
        listed = set()
        for line in text.output.splitlines():
            if m := re.match(r"^\[([\w.]+)\]", line):
                section = m.group(1) + "."
            elif m := re.match(r"^(\w+) = ", line):
                listed.add(section + m.group(1))
        assert set(keys) <= listed, (model, set(keys) - listed)
        part = _model_part(doc, model)
        assert all(f"| `{k}` |" in part for k in keys), model


def test_unknown_model_is_one_line_exit_2():
    res = CliRunner().invoke(main, ["config", "keys", "nope"])
    assert res.exit_code == 2
    (line,) = res.output.splitlines()
    assert line.startswith("fastdyn: error: model: must be one of ") and line.endswith("got 'nope'")
    assert all(repr(m) in line for m in ("msfr", "msfr-attn", "attn-m", "attn-s", "mlp-cubic"))


#: a file name a help text may cite: ``docs/cuda.md``, ``drive/optim.py``, ``msfr.md``
_CITED = re.compile(r"[\w./-]*\w\.(?:md|py|toml)\b")


def _helps(cmd: click.Command, ctx: click.Context) -> list[str]:
    out = [cmd.get_help(ctx)]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            out += _helps(sub, click.Context(sub, info_name=name, parent=ctx))
    return out


def test_help_texts_cite_files_that_exist():
    texts = _helps(main, click.Context(main, info_name="fastdyn")) + [DOC.read_text()]
    cited = {c for t in texts for c in _CITED.findall(t)}
    assert "docs/cuda.md" in cited  # the scan finds citations at all
    for c in sorted(cited):
        if c.startswith("."):  # a suffix such as ".npz" or ".h5" in prose, not a file
            continue
        here = [ROOT / c, ROOT / "fastdyn" / c, ROOT / "docs" / c]
        assert any(p.exists() for p in here), (
            f"a help text cites {c}, which is not in the repository"
        )
    for t in texts:
        assert not re.search(r"\bspec (?:§|\w+\.md)", t), t
