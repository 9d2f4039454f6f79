"""No package of benchfarm's imports its own modules in a circle, lazily (inside a function) or
not: a circle is two modules that cannot be understood, tested or moved apart. import-linter's
layers keep the rooms of `operator/benchfarm` apart; this keeps the modules inside each room (and
the embedded lab's) apart too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [REPO / "devlab" / "benchfarm_devlab", REPO / "operator" / "benchfarm",
            *sorted(p for p in (REPO / "operator" / "benchfarm").iterdir()
                    if (p / "__init__.py").exists())]


def imports(package: Path) -> dict[str, set[str]]:
    """Module -> the sibling modules it imports (`from .x import`, `from . import x`)."""
    modules = {f.stem for f in package.glob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for f in package.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module.split(".")[0]] if node.module else \
                    [a.name for a in node.names]
                graph[f.stem].update(n for n in names if n in modules and n != f.stem)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circles_finds_a_circle_and_only_that():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_package_imports_its_own_modules_in_a_circle(package):
    assert circles(imports(package)) == []
