"""Import structure, read from the source with ``ast`` (every import counts, ``TYPE_CHECKING``
ones included): nsqlookupd's modules form no circle, and the HTTP layer imports no daemon."""

from __future__ import annotations

import ast
from pathlib import Path

import nsqpy

SRC = Path(nsqpy.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The nsqpy modules a file imports (``from . import x`` resolved to the module x)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("nsqpy"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("nsqpy"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if (SRC.parent / (sub.replace(".", "/") + ".py")).exists()
                          or (SRC.parent / sub.replace(".", "/")).is_dir() else target)
    return found


def graph(package: str) -> dict[str, set[str]]:
    root = SRC.parent / package.replace(".", "/")
    return {module_name(p): imports_of(p) for p in sorted(root.rglob("*.py"))}


def reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), list(edges.get(start, ()))
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return False


def test_lookupd_modules_form_no_circle():
    edges = graph("nsqpy.lookupd")
    assert "nsqpy.lookupd.state" in edges and edges["nsqpy.lookupd.http"]
    circles = [(a, b) for a, targets in edges.items() for b in targets
               if b in edges and reaches(edges, b, a)]
    assert circles == []


def test_only_the_program_imports_the_daemon():
    """The listeners get a LookupdState; only the entry point builds the daemon."""
    edges = graph("nsqpy.lookupd")
    users = [m for m, targets in edges.items() if "nsqpy.lookupd.nsqlookupd" in targets]
    assert users == ["nsqpy.lookupd.main"], users


def test_http_layer_imports_no_daemon():
    edges = graph("nsqpy.httpserver")
    outside = {t for targets in edges.values() for t in targets
               if not t.startswith("nsqpy.httpserver")}
    assert outside == set(), outside


def test_the_check_sees_a_circle(tmp_path):
    """The checker itself: two modules importing each other are found."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert reaches(edges, "b", "a") and not reaches(edges, "a", "c")
