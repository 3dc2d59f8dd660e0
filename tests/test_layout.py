"""The package layout: every module imports, nothing in transforms/ imports pipelines/, nothing
under transforms/index imports transforms/query, and the import graph (function-level imports
included) has no cycles."""
from __future__ import annotations

import ast
import importlib
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("transforms", "pipelines", "configs")


def _modules() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].replace(os.sep, ".")
                    out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(dirpath, f)
    return out


MODULES = _modules()


def _imports(name: str, path: str) -> set[str]:
    """Project modules `name` imports anywhere in its body (function-level too)."""
    found = set()
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):  # a package's own __init__ is no edge
                found.add(t)
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module):
    importlib.import_module(module)


def test_transforms_never_import_pipelines():
    bad = sorted((m, t) for m, ts in GRAPH.items() if m.startswith("transforms") for t in ts
                 if t.startswith("pipelines"))
    assert not bad, bad


def test_index_never_imports_query():
    """The index side builds what the query side reads: nothing under transforms/index imports
    transforms/query (shared text utilities live in transforms/common)."""
    bad = sorted((m, t) for m, ts in GRAPH.items() if m.startswith("transforms.index")
                 for t in ts if (t + ".").startswith("transforms.query."))
    assert not bad, bad


def test_no_import_cycles():
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
