"""One vocabulary for a run's course: no module of the package spells a reason, a phase, a
hand-back, a verdict or a condition type of `api.outcomes` as a string literal; it names the
enum's member. Blame, and so `benchfarm submit`'s exit code (2: the run's fault, 3: the lab's),
is decided on these strings: one spelled differently on one side would be blamed on the lab.

The check walks the syntax tree of every module of operator/benchfarm and fails on any string
constant equal to such a value, wherever it stands: a positional or keyword argument, a
comparison, a default, a dict's value, a return, an assignment; and on any `reason=` given as a
literal, a reason no enum holds yet included. It leaves alone what is not a use
of the vocabulary: a docstring; a dict's key (a document's field name: `"regressed": [...]` in
submit's JSON); another enum's own members (`ColumnPhase.succeeded = "Succeeded"`: their own
vocabulary, defined once); the name a `TypeVar` is given (it must repeat its variable's name).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

from benchfarm import errors
from benchfarm.api import outcomes

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "benchfarm"

#: Not checked: `SessionKind`'s values are the command line's words (`run`, `health`): "run" is
#: also every document's field naming a run.
NOT_VOCABULARY = {outcomes.SessionKind}

#: Where a value of the vocabulary may stand as a literal, and why (paths below the package).
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "api/outcomes.py": (frozenset(), "the definitions themselves"),
    "api/crdgen.py": (frozenset({"Succeeded", "Regressed", "Running", "Failed", "Pending", "Run"}),
                      "kubectl's column headings of the CRDs (a heading, not a value)"),
    "errors.py": (frozenset({"BoardFault", "BootFailed"}),
                  "below api in the layers: the two default reasons, pinned to BoardFaultKind "
                  "by test_the_errors_defaults_are_board_fault_kinds"),
    "operator/launch/warm.py": (frozenset({"Running", "Failed"}),
                                "Kubernetes' own words: a Pod's phase, a Job's condition"),
}


def vocabulary() -> dict[str, str]:
    """Every value of api.outcomes' enums (but NOT_VOCABULARY's), with the members it is."""
    found: dict[str, list[str]] = {}
    for name, obj in vars(outcomes).items():
        if isinstance(obj, type) and issubclass(obj, StrEnum) and obj is not StrEnum \
                and obj.__module__ == outcomes.__name__ and obj not in NOT_VOCABULARY:
            for member in obj:
                found.setdefault(member.value, []).append(f"{name}.{member.name}")
    return {value: " or ".join(members) for value, members in found.items()}


def _exempt(tree: ast.AST) -> set[int]:
    """The constants that are not uses of the vocabulary (the module docstring's explanation)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))                       # a docstring
        if isinstance(node, ast.Dict):
            out.update(id(k) for k in node.keys if k is not None)  # a field name
        if isinstance(node, ast.ClassDef) and any(
                (b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute)
                 else "").endswith("Enum") for b in node.bases):
            out.update(id(n) for stmt in node.body if isinstance(stmt, ast.Assign)
                       for n in ast.walk(stmt.value))             # another enum's members
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "TypeVar" and node.args:
            out.add(id(node.args[0]))                             # a TypeVar's own name
    return out


def literals(source: str, allowed: frozenset[str] = frozenset()) -> Iterator[tuple[int, str]]:
    """(line, value) of every string constant in `source` that spells a value of the vocabulary
    and is not exempt."""
    words = vocabulary()
    tree = ast.parse(source)
    exempt = _exempt(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in words and node.value not in allowed and id(node) not in exempt:
            yield node.lineno, node.value


def literal_reasons(source: str) -> Iterator[tuple[int, str]]:
    """(line, value) of every `reason=` given as a string literal: a reason no enum holds yet
    is a literal too (a positional one cannot be told from a message, so only the keyword)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "reason" \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.value.lineno, node.value.value


def test_no_module_spells_a_reason_a_phase_or_a_condition_as_a_literal():
    words = vocabulary()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "api/outcomes.py":
            continue
        allowed = ALLOWED.get(rel, (frozenset(), ""))[0]
        source = path.read_text()
        found += [f"{rel}:{line}: {value!r} is {words[value]}"
                  for line, value in literals(source, allowed)]
        found += [f"{rel}:{line}: reason={value!r} is in no enum: add it to one (api.outcomes)"
                  for line, value in literal_reasons(source) if value not in words]
    assert not found, "name the enum's member:\n" + "\n".join(found)


def test_the_allowlist_holds_only_what_is_there():
    """An allowance no longer needed goes: a file moved or mended is not left a licence."""
    for rel, (values, _why) in ALLOWED.items():
        path = PACKAGE / rel
        assert path.exists(), rel
        if values:
            assert {v for _, v in literals(path.read_text())} == values, rel


def test_the_check_finds_a_planted_literal_wherever_it_stands():
    planted = '''
def f(status, fail):
    fail("PlaceMissing")                                  # positional
    raise RunError("boom", reason="InternalError")        # keyword
    if status.get("phase") == "Succeeded":                # comparison
        return {"reason": "QueueTimeout"}                 # a dict's value
    finish(Phase.failed, RunFailure.place_missing, "the place is gone")   # typed: fine
    return "Busy"                                         # a return
'''
    assert sorted(literals(planted)) == [(3, "PlaceMissing"), (4, "InternalError"),
                                         (5, "Succeeded"), (6, "QueueTimeout"), (8, "Busy")]
    new_reason = 'raise InfraError("the PDU is on fire", reason="PduOnFire")\n'
    assert list(literals(new_reason)) == []            # no enum's value yet: the keyword rule
    assert list(literal_reasons(new_reason)) == [(1, "PduOnFire")]


def test_the_check_leaves_alone_what_is_no_use_of_the_vocabulary():
    clean = '''
"""A run ends Succeeded or Failed."""
from enum import StrEnum
from typing import TypeVar

Run = TypeVar("Run")


class ColumnPhase(StrEnum):
    succeeded = "Succeeded"


def doc(d):
    """The verdict: "regressed"."""
    return {"regressed": d.regressed, "run": d.ref}
'''
    assert list(literals(clean)) == []


def test_the_errors_defaults_are_board_fault_kinds():
    """errors.py is below api and cannot name the enum: its defaults are pinned here."""
    assert errors.BoardFault.reason == outcomes.BoardFaultKind.other
    assert errors.DeployedBootFailed.reason == outcomes.BoardFaultKind.boot_failed
