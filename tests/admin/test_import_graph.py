"""No import circle inside nsqpy.admin: no module imports one that imports it back, directly or
through others, counting every import (``TYPE_CHECKING`` blocks and function bodies included).

The daemon (main) builds the HTTP server and hands it what it needs; the modules below it never
reach back up. Read from the source with :mod:`ast`, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nsqpy.admin

pytestmark = pytest.mark.timeout(20)

PACKAGE = "nsqpy.admin"
SOURCE = Path(nsqpy.admin.__file__).parent


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports."""
    modules = {PACKAGE if p.stem == "__init__" else f"{PACKAGE}.{p.stem}": p
               for p in SOURCE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1])
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module or ""
                candidates = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            found |= {c for c in candidates if c in modules and c != name}
        graph[name] = found
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert f"{PACKAGE}.http" in graph and f"{PACKAGE}.main" in graph  # the walk found the package
    circles = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                     if m in reachable(graph, d))
    assert circles == []


def test_the_daemon_is_imported_by_nothing_in_the_package():
    graph = import_graph()
    assert [m for m, deps in graph.items() if f"{PACKAGE}.main" in deps] == []


def test_the_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert reachable(graph, "b") >= {"a", "b", "c"}
    assert "d" not in reachable(graph, "a")
