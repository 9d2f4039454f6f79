"""The operator stays readable: each module of `kube/` does one job in at most 400 lines, and no
class has more than 15 methods. A module that grows past that is split by job (as the scheduler,
the seats and the transitions were split from the runtime), not allowed to grow."""

from __future__ import annotations

import ast
from pathlib import Path

KUBE = Path(__file__).resolve().parents[2] / "operator" / "benchfarm" / "kube"
MAX_LINES = 400
MAX_METHODS = 15


def test_no_module_of_the_operator_is_over_400_lines():
    long = {f.name: n for f in sorted(KUBE.glob("*.py"))
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert len(list(KUBE.glob("*.py"))) > 20
    assert long == {}, f"split these by job: {long}"


def test_no_class_of_the_operator_has_more_than_15_methods():
    big = {}
    for f in sorted(KUBE.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = [d for d in node.body
                           if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef)]
                if len(methods) > MAX_METHODS:
                    big[f"{f.name}:{node.name}"] = len(methods)
    assert big == {}, f"split these by job: {big}"
