"""No import circle between ffjobs's files, nor between its packages: every import of the
package's own modules counts, at the top or inside a function, except those under
``if TYPE_CHECKING:``. A circle means two modules (or packages) that cannot be understood (or
changed) apart; the fix is a third module both use, or moving a file to the layer it belongs to.

Packages are ``ffjobs.<name>/`` folders; a module at the root (``ffjobs/pipeline.py``) counts as a
package of its own."""

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


def _package(module: str) -> str:
    """``ffjobs.train.stage`` -> ``ffjobs.train``; ``ffjobs.pipeline`` stays itself; the
    sections ``ffjobs.config.train``, ``ffjobs.config.data``... -> ``ffjobs.config``."""
    parts = module.split(".")
    if len(parts) == 3 and parts[2] == "config":
        return "ffjobs.config"
    if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir():
        return ".".join(parts[:2])
    return module


def _file_edges() -> dict[str, set[str]]:
    files = {_module(path): path for path in PACKAGE.rglob("*.py")}
    return {name: _imported(path, set(files)) for name, path in files.items()}


def _package_edges(
    file_edges: dict[str, set[str]],
) -> tuple[dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    """The packages each package imports, and for each such pair the ``a -> b`` module imports
    that make it (the package ``ffjobs`` itself, its ``__init__``, is left out: it imports
    nothing)."""
    edges: dict[str, set[str]] = {}
    why: dict[tuple[str, str], set[str]] = {}
    for module, imported in file_edges.items():
        edges.setdefault(_package(module), set())
        for other in imported:
            here, there = _package(module), _package(other)
            if here != there and "ffjobs" not in (here, there):
                edges[here].add(there)
                why.setdefault((here, there), set()).add(f"{module} -> {other}")
    return edges, why


def test_no_import_circle_between_files():
    assert _circles(_file_edges()) == []


def test_no_import_circle_between_packages():
    edges, why = _package_edges(_file_edges())
    found = []
    for circle in _circles(edges):
        inside = set(circle)
        imports = sorted(
            line
            for (here, there), lines in why.items()
            if here in inside and there in inside
            for line in lines
        )
        found.append(" <-> ".join(circle) + "\n  " + "\n  ".join(imports))
    assert not found, "package circles (the imports inside each):\n" + "\n".join(found)


def test_the_circle_finder_finds_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_packages_group_modules_and_name_the_imports_between_them():
    assert [_package(m) for m in ("ffjobs.train.stage", "ffjobs.train", "ffjobs.pipeline")] == [
        "ffjobs.train",
        "ffjobs.train",
        "ffjobs.pipeline",
    ]
    assert _package("ffjobs.config.data") == "ffjobs.config"
    edges, why = _package_edges(
        {"ffjobs.a.x": {"ffjobs.b.y"}, "ffjobs.b.y": {"ffjobs.a.z"}, "ffjobs.a.z": set()}
    )
    assert _circles(edges) == [["ffjobs.a", "ffjobs.b"]]
    assert why == {
        ("ffjobs.a", "ffjobs.b"): {"ffjobs.a.x -> ffjobs.b.y"},
        ("ffjobs.b", "ffjobs.a"): {"ffjobs.b.y -> ffjobs.a.z"},
    }
