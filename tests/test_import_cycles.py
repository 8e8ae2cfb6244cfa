"""No import circle between ffjobs's files: every import of the package's own modules counts,
at the top or inside a function, except those under ``if TYPE_CHECKING:``. A circle means two
modules that cannot be understood (or changed) apart; the fix is a third module both use."""

from __future__ import annotations

import ast
from pathlib import Path

import ffjobs

PACKAGE = Path(ffjobs.__file__).parent


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports (``from a import b`` counts ``a`` and ``a.b``)."""
    this, found = _module(path), set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = this.split(".")[: len(this.split(".")) - node.level]
                if path.name == "__init__.py":
                    parent = this.split(".")[: len(this.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return (found & known) - {this}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges[node]:
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            if group:
                circles.append(sorted([node, *group]))

    for node in sorted(edges):
        if node not in index:
            strong(node)
    return circles


def test_no_import_circle_between_files():
    files = {_module(path): path for path in PACKAGE.rglob("*.py")}
    edges = {name: _imported(path, set(files)) for name, path in files.items()}
    assert _circles(edges) == []


def test_the_circle_finder_finds_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
