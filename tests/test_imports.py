"""Which part of the library imports which: the picture in ``docs/repository.md``
(section Imports) is the one the sources draw, and it has no circle.

Every import counts: at module level, inside a function, and under ``TYPE_CHECKING``;
importing another package's module counts as importing that package too, as Python runs
its ``__init__`` first.
"""

from __future__ import annotations

import ast
import re

from tests.temporal_support import ROOT

SUBPACKAGES = ("ledger", "activities", "workflows")


def module_graph() -> dict[str, set[str]]:
    """Each library module (``ledger._rule``, ``activities``) with the modules it imports."""
    modules = {
        folder + ("" if path.stem == "__init__" else f".{path.stem}"): path
        for folder in SUBPACKAGES
        for path in (ROOT / folder).glob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package if node.level == 1 else ""
                module = ".".join(part for part in (base, node.module or "") if part)
                targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "temporal_ledger."
            ):
                targets = [(node.module or "").removeprefix("temporal_ledger.")]
            elif isinstance(node, ast.Import):
                targets = [
                    alias.name.removeprefix("temporal_ledger.")
                    for alias in node.names
                    if alias.name.startswith("temporal_ledger.")
                ]
            for target in targets:
                if target in modules:
                    # Another package's module runs that package's __init__ first.
                    found |= {target, target.split(".")[0]} - {package}
        found.discard(name)
        graph[name] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (name.split(".")[0], other.split(".")[0])
        for name, others in graph.items()
        for other in others
        if name.split(".")[0] != other.split(".")[0]
    }


def test_the_picture_in_the_docs_is_the_one_the_sources_draw() -> None:
    page = (ROOT / "docs" / "repository.md").read_text(encoding="utf-8")
    section = page.split("## Imports", 1)[1].split("\n## ", 1)[0]
    drawn = {
        (source, target)
        for source, targets in re.findall(r"^\| `(\w+)` \| (.*) \|$", section, re.M)
        for target in re.findall(r"`(\w+)`", targets)
    }
    assert drawn == package_edges(module_graph())


def test_the_ledger_imports_nothing_of_the_temporal_side() -> None:
    assert not {edge for edge in package_edges(module_graph()) if edge[0] == "ledger"}


def test_no_module_imports_itself_in_a_circle() -> None:
    assert circles(module_graph()) == []


def test_the_imports_run_one_way_between_the_packages() -> None:
    assert package_edges(module_graph()) == {
        ("activities", "ledger"),
        ("activities", "workflows"),
        ("workflows", "ledger"),
    }


def test_a_circle_is_found_where_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
