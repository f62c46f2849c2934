"""What a user reads stands on its own: the README, docs/, data/ comments, the presets, the scripts,
the example plug-in and every message fastdyn prints cite the papers and docs/theory.md, never the
developers' notes ("spec/msfr.md", "spec §6", "msfr spec", "the spec's …"), which are not shipped."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: a citation of the developers' spec notes (not "spectrum", "inspect", "_spec", "sweep spec" …)
CITATION = re.compile(
    r"spec/|\bspec\s*§|\bspec\s+(msfr|icl)\b|\b(msfr|icl)\s+spec\b|\bspec(\.md)?\s+section"
    r"|\bthe spec('s)?\b|\(spec\b|\bspec:",
    re.IGNORECASE,
)

#: user-facing text files (every file below a folder, whatever its type)
TEXT = ["README.md", "docs", "data", "scripts", "examples", "fastdyn/presets"]


def _files() -> list[Path]:
    out: list[Path] = []
    for name in TEXT:
        p = ROOT / name
        found = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
        out += [q for q in found if "__pycache__" not in q.parts and ".egg-info" not in str(q)]
    return out


def _messages(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings (what it prints or writes)."""
    tree = ast.parse(path.read_text())
    docs: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                docs.add(id(body[0].value))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_the_pattern_finds_the_citations_it_is_for() -> None:
    for bad in (
        "spec/msfr.md §4",
        "msfr spec §6",
        "spec §5's row",
        "(spec icl.md §2)",
        "the spec's G",
    ):
        assert CITATION.search(bad), bad
    for fine in ("data.spectrum", "fastdyn inspect", "models._spec", "sweep.spec", "spectra"):
        assert not CITATION.search(fine), fine


def test_no_user_facing_file_cites_the_unshipped_spec() -> None:
    bad = []
    for f in _files():
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue  # a figure or a data file
        for i, line in enumerate(text.splitlines(), 1):
            if CITATION.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_no_message_fastdyn_prints_cites_the_unshipped_spec() -> None:
    bad = []
    for f in sorted((ROOT / "fastdyn").rglob("*.py")):
        for line, text in _messages(f):
            if "\\(" in text:
                continue  # a regular expression (config/reference.py strips such citations)
            if CITATION.search(text):
                bad.append(f"{f.relative_to(ROOT)}:{line}: {text[:100]!r}")
    assert not bad, "\n".join(bad)
