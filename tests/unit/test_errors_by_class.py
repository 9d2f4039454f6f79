"""Errors are caught by their class at the boundary: an outage as `Outage`/`API_FAILURES`, a
refusal as `InfraError`, a board's fault as `BoardFault`. `except Exception` is left only

- where a thread or a process must not die: the operator's then counts it as a bug with its
  traceback (`operator.state.metrics.bug`, the BenchfarmOperatorBug alert); elsewhere it is logged with
  its traceback (`log.exception`, `exc_info`);
- where the owner thread runs what another thread asked of it (`operator.state.owner.Owner.call`): what
  that raised is handed back to the caller (`set_exception`), raised there as if it had been
  called there;
- where a library that raises no common class (labgrid's drivers, pexpect) is translated into
  one of benchfarm's errors (`raise ... from exc`).

So a bug of benchfarm's is never retried or reported as if the API server were down."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "benchfarm"


def _broad(handler: ast.ExceptHandler) -> bool:
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts
    return handler.type is None or any(
        isinstance(n, ast.Name) and n.id in ("Exception", "BaseException") for n in names)


def _said(body: list[ast.stmt], *, operator: bool) -> bool:
    """The handler raises (a translation, or in its caller: `set_exception`), or reports what it
    caught with its traceback."""
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if called == "metrics.bug" or called.endswith(".set_exception"):
                return True
            if operator:
                continue
            if called.endswith(".exception") or called == "traceback.print_exc" or any(
                    k.arg == "exc_info" for k in node.keywords):
                return True
    return False


def _broad_handlers() -> list[tuple[str, int, ast.ExceptHandler, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ExceptHandler) and _broad(node):
                found.append((str(path.relative_to(PACKAGE)), node.lineno, node,
                              lines[node.lineno - 1]))
    return found


def test_a_broad_except_raises_a_typed_error_or_reports_a_bug_with_its_traceback():
    handlers = _broad_handlers()
    assert len(handlers) > 20           # the check finds what it looks for
    silent = [f"{f}:{line}" for f, line, h, _ in handlers
              if not _said(h.body, operator=f.startswith("operator/"))]
    assert silent == [], (
        "catch the error's class (API_FAILURES, InfraError, OSError, ...), or report a bug: "
        "metrics.bug in the operator, log.exception or exc_info elsewhere")


def test_no_broad_except_calls_what_it_catches_an_outage():
    said = [f"{f}:{line}" for f, line, _, text in _broad_handlers() if "outage" in text.lower()]
    assert said == [], "an outage has its class (kubeapi.client.API_FAILURES, errors.Outage)"


def test_the_check_sees_a_silent_handler():
    tree = ast.parse("try:\n    f()\nexcept Exception:\n    pass\n")
    handler = next(n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler))
    assert _broad(handler) and not _said(handler.body, operator=False)
    tree = ast.parse("try:\n    f()\nexcept Exception:\n    log.debug('x', exc_info=True)\n")
    handler = next(n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler))
    assert _said(handler.body, operator=False) and not _said(handler.body, operator=True)
