"""No import cycle anywhere in fastdyn/, lazy (function-level) imports included.

The rule, on grimp's graph of the package (the library import-linter runs on):

- one node per module; a package is its ``__init__``;
- an edge for every import a module writes: at module level, inside a function or under
  ``TYPE_CHECKING`` (grimp reads them all), ``from pkg import name`` going to ``pkg.name`` where
  that is a module and to ``pkg`` otherwise;
- importing ``a.b.c`` first runs ``a/__init__`` and ``a/b/__init__``: so an edge also goes to each
  package above the imported module that is not above the importer too (the importer's own
  packages are already being imported when it runs).

A package whose ``__init__`` imports its own submodule is then one edge, package → child, and no
cycle; it is one only when the child, or anything it imports, imports the package back (``from .
import main`` in a command module of the package that registers it). A cycle is a set of two or
more modules that all reach each other (a strongly connected component); the test names each
with one closed path through it. Such a cycle breaks as soon as one of its imports moves to module
level (a partially initialised module), so each is broken by moving the shared piece to a lower
module, never by hiding an import.
"""

from __future__ import annotations

import sys
import textwrap

import grimp


def _graph(package: str) -> dict[str, set[str]]:
    """Module → the modules it imports (the rule above), within ``package``."""
    g = grimp.build_graph(package, cache_dir=None)
    mods = set(g.modules)

    def above(m: str) -> set[str]:
        parts = m.split(".")
        return {".".join(parts[:k]) for k in range(1, len(parts))}

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        for imported in g.find_modules_directly_imported_by(m):
            if imported in mods:
                edges[m].add(imported)
                edges[m] |= (above(imported) - above(m) - {m}) & mods
    return edges


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _closed_path(edges: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start, inside = comp[0], set(comp)
    prev: dict[str, str] = {}
    todo = [start]
    while todo:
        nxt = []
        for v in todo:
            for w in sorted(edges[v] & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        todo = nxt
    raise AssertionError(f"{comp} is not strongly connected")


def import_cycles(package: str) -> list[str]:
    """One line per cycle of ``package``: ``a -> b -> a`` (and the other modules caught in it)."""
    edges = _graph(package)
    lines = []
    for comp in _components(edges):
        path = _closed_path(edges, comp)
        rest = sorted(set(comp) - set(path))
        lines.append(" -> ".join(path) + (f" (with {', '.join(rest)})" if rest else ""))
    return lines


def test_fastdyn_has_no_import_cycle():
    cycles = import_cycles("fastdyn")
    assert not cycles, "import cycles in fastdyn/:\n  " + "\n  ".join(cycles)


def _package(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_rule_flags_what_it_says(tmp_path, monkeypatch):
    """The check can fail, and only where the rule says: a lazy import back to the package that
    imports the module, and a cycle through a package's ``__init__`` run by importing its
    submodule; a package importing its own child is no cycle."""
    _package(
        tmp_path,
        {
            "cyc_demo/__init__.py": "",
            # a package that imports its child, which imports it back lazily: a cycle
            "cyc_demo/cli/__init__.py": "from . import warm\n",
            "cyc_demo/cli/warm.py": "def run():\n    from . import main\n",
            # a package that imports its child, and the child only a sibling: no cycle
            "cyc_demo/ok/__init__.py": "from . import child\n",
            "cyc_demo/ok/child.py": "from . import leaf\n",
            "cyc_demo/ok/leaf.py": "",
            # importing feat.kernels runs feat/__init__, which imports base: a cycle
            "cyc_demo/base.py": "def f():\n    from .feat.kernels import k\n",
            "cyc_demo/feat/__init__.py": "from ..base import f\n",
            "cyc_demo/feat/kernels.py": "k = 1\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = import_cycles("cyc_demo")
    for name in list(sys.modules):
        if name.startswith("cyc_demo"):
            monkeypatch.delitem(sys.modules, name)
    assert found == [
        "cyc_demo.base -> cyc_demo.feat -> cyc_demo.base",
        "cyc_demo.cli -> cyc_demo.cli.warm -> cyc_demo.cli",
    ]
