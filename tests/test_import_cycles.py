"""No import cycles between lipgnn's modules.

One edge per ``import``/``from ... import`` of a lipgnn module, wherever it stands (module level,
function body, ``try``/``if`` blocks) except under ``if TYPE_CHECKING:`` (never executed). An import
deferred into a function body still ties the two modules together: a cycle through it is a design
knot that only the deferral keeps from failing at load time, and it breaks the moment someone
hoists the import. A package's re-export is resolved: ``from lipgnn.nn import LipGATConv`` is an edge
to the module that defines ``LipGATConv``, so a package re-exporting its own submodules does not count
as a cycle; a name the package ``__init__`` defines itself (``from lipgnn.data import load``) is an
edge to the package.
"""
from __future__ import annotations

import ast
from pathlib import Path

import lipgnn

PKG_ROOT = Path(lipgnn.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, name: str, is_pkg: bool) -> list[tuple[str, str | None]]:
    """(module, imported name or None) for every import outside ``if TYPE_CHECKING:`` blocks."""
    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.extend((mod, alias.name) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the lipgnn modules it imports (package ``__init__`` re-exports resolved)."""
    files = {_module_name(p): p for p in PKG_ROOT.rglob("*.py")}
    packages = {m for m, p in files.items() if p.name == "__init__.py"}
    parsed = {m: _imports(ast.parse(p.read_text()), m, m in packages) for m, p in files.items()}

    def targets(mod: str, attr: str | None, seen: frozenset[str] = frozenset()) -> set[str]:
        if mod not in files or mod in seen:
            return set()
        if attr is not None and f"{mod}.{attr}" in files:
            return targets(f"{mod}.{attr}", None, seen)
        if mod not in packages:
            return {mod}
        # A package: follow its re-export of `attr` (all of them for a bare `import pkg`); a name it does not
        # re-export is its own (lipgnn.store's write_record, lipgnn.data's load): an edge to the package itself.
        out: set[str] = set()
        for sub, name in parsed[mod]:
            if attr is None or name == attr:
                out |= targets(sub, name, seen | {mod})
        return out if out or attr is None else {mod}

    graph: dict[str, set[str]] = {}
    for mod in sorted(files):
        graph[mod] = set()
        for target, attr in parsed[mod]:
            graph[mod] |= targets(target, attr)
        graph[mod].discard(mod)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if state.get(start):
            continue
        state[start] = 1
        path = [start]
        stack = [sorted(graph[start])]
        while stack:
            if not stack[-1]:
                state[path.pop()] = 2
                stack.pop()
                continue
            nxt = stack[-1].pop(0)
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(sorted(graph.get(nxt, ())))
    return None


def test_graph_resolves_imports() -> None:
    graph = import_graph()
    assert "lipgnn.config" in graph["lipgnn.sweep"]
    # A package's re-export is an edge to the defining module, a name the package defines an edge to the package.
    assert "lipgnn.models.builder" in graph["lipgnn.seeding"]
    assert {"lipgnn.data", "lipgnn.store"} <= graph["lipgnn.runs.layer"] | graph["lipgnn.seeding"]


def test_finder_reports_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
