"""docs/python.md runs as written: its ``python`` blocks, in order, in one namespace, in an empty
folder (small closed-form-and-ODE runs of 1000 tasks on 33 times: seconds once compiled)."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def _blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_docs_python_examples_run_as_written(tmp_path, monkeypatch, capsys):
    blocks = _blocks(DOC.read_text())
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name}[block {i}]", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    # what the comments beside the prints say
    assert "msfr 1000 2.0" in out and "1.5 1" in out and "task.n_tasks: must be" in out
    assert "runs/a.h5: exists; pass overwrite=True to replace it" in out
    assert "msfr complete 1.5" in out and "3 [1.5, 2.0, 3.0]" in out and "['alpha_3.0.h5']" in out
    assert "('run', 'time')" in out
    assert (tmp_path / "runs" / "both.png").stat().st_size > 5000
    assert (tmp_path / "runs" / "loss.png").stat().st_size > 5000


def test_readme_points_to_the_python_docs():
    readme = (DOC.parents[1] / "README.md").read_text()
    assert "docs/python.md" in readme
