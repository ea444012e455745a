"""The package's rooms, read from its imports (docs/architecture.md): no module imports one that
imports it back, not even for type hints only, and nsqd's core never imports one of its features.

Imports are read with ``ast`` from the source (nothing is imported), the way a reader follows them:
``from .x import y`` names module ``x`` (or ``x.y`` when that is a module), and an import inside
``if TYPE_CHECKING:`` or inside a function counts like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "nsqpy"
#: nsqd's core: these modules stand below every sub-package of nsqd
NSQD_CORE = {"nsqd", "topic", "channel", "memqueue", "hooks", "diskqueue", "metadata", "lookup", "options"}
NSQD_FEATURES = {"v2", "replication", "lifecycle", "stats", "leases", "auth"}
#: nsqd's floors below the core: mechanisms the core stands on (the storage room)
NSQD_FLOORS = {"storage"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            targets = [f"{base_name}.{a.name}" if f"{base_name}.{a.name}" in modules else base_name
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_module_imports_one_that_imports_it_back():
    assert _circles(_graph()) == []


def test_nsqd_core_imports_no_feature():
    graph = _graph()
    for module in NSQD_CORE:
        for target in graph[f"{PACKAGE}.nsqd.{module}"]:
            parts = target.split(".")
            assert not (parts[:2] == [PACKAGE, "nsqd"] and len(parts) > 2
                        and parts[2] not in NSQD_CORE | NSQD_FLOORS), f"nsqd/{module}.py imports {target}"


def test_the_storage_room_stands_below_nsqd():
    """``nsqd/storage`` (segment files, the group commit) is a mechanism of its own, as
    go-diskqueue is upstream's: it imports nothing of nsqpy outside itself."""
    for name, targets in _graph().items():
        if name.startswith(f"{PACKAGE}.nsqd.storage"):
            outside = {t for t in targets if not t.startswith(f"{PACKAGE}.nsqd.storage")}
            assert not outside, f"{name} imports {outside}"


def test_nsqd_features_do_not_reach_the_assembly():
    """Sub-packages stand on the core; only ``server.py``/``main.py`` import them all."""
    graph = _graph()
    for name, targets in graph.items():
        parts = name.split(".")
        if parts[:2] == [PACKAGE, "nsqd"] and len(parts) > 2 and parts[2] in NSQD_FEATURES:
            for target in targets:
                assert target not in (f"{PACKAGE}.nsqd.server", f"{PACKAGE}.nsqd.main"), name


def test_no_daemon_module_is_imported_back():
    """Each daemon's ``main`` builds its servers and hands them what they need: nothing imports a
    ``main``, and only nsqd's imports nsqd's ``server``, so no module reaches back for the daemon."""
    for name, targets in _graph().items():
        for target in targets:
            assert not target.endswith(".main"), f"{name} imports {target}"
            if target == f"{PACKAGE}.nsqd.server":
                assert name == f"{PACKAGE}.nsqd.main", f"{name} imports {target}"


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_http_layer_is_a_mechanism_of_its_own():
    """``httpserver`` serves nsqd's and nsqlookupd's APIs and knows neither: it imports nothing
    of nsqpy outside itself."""
    for name, targets in _graph().items():
        if name.startswith(f"{PACKAGE}.httpserver"):
            outside = {t for t in targets if not t.startswith(f"{PACKAGE}.httpserver")}
            assert not outside, f"{name} imports {outside}"


def test_only_the_program_builds_the_lookup_daemon():
    """nsqlookupd's listeners get a LookupdState; only its entry point builds the daemon."""
    users = sorted(m for m, targets in _graph().items() if f"{PACKAGE}.lookupd.nsqlookupd" in targets)
    assert users == [f"{PACKAGE}.lookupd.main"], users
