"""The reference pages of the documentation, generated from the code at build time.

`make docs` (Sphinx) loads this as an extension: before Sphinx reads the sources it writes
`docs/reference/generated/*.md` from

- the CRDs (`benchfarm.api.crdgen.all_crds()`, i.e. the pydantic models, with their descriptions,
  which `kubectl explain` shows too),
- the argparse parser of the `benchfarm` command (`benchfarm.cli.entry.build_parser()`),
- the chart's `helm/benchfarm/values.yaml` with its comments,
- the `BENCHFARM_*` environment variables the code reads (collected from the source; their
  descriptions are the hand-written table of `docs/reference/settings.md`),
- the Prometheus metrics of `benchfarm.operator.state.metrics` and the event reasons the code posts.

`tests/unit/test_docs_reference.py` imports the same functions and fails when a CRD field, a
CLI option or a setting has no description.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
REPO = DOCS.parent
OUT = DOCS / "reference" / "generated"
if str(REPO / "operator") not in sys.path:
    sys.path.insert(0, str(REPO / "operator"))

# Where the settings are read: the operator's package and the embedded lab's.
SETTINGS_ROOTS = ("operator/benchfarm", "devlab/benchfarm_devlab")
_SETTING = re.compile(r"\bBENCHFARM_[A-Z0-9_]*[A-Z0-9]\b")


def _cell(text: Any) -> str:
    """A value as one Markdown table cell."""
    s = " ".join(str(text).split())
    return s.replace("|", "\\|")


def _code(text: Any) -> str:
    s = str(text)
    return f"``{s}``" if "`" in s else f"`{s}`"


# -- CRD fields ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    kind: str
    path: str
    type: str
    description: str       # "" when the model does not describe it (a unit test fails then)
    default: Any = None
    required: bool = False


def _type_of(schema: dict[str, Any]) -> str:
    t = schema.get("type", "")
    if "enum" in schema:
        return "enum: " + ", ".join(str(v) for v in schema["enum"])
    if t == "array":
        return f"array of {_type_of(schema.get('items') or {}) or 'any'}"
    if t == "object" and "additionalProperties" in schema and "properties" not in schema:
        inner = schema["additionalProperties"]
        return f"map of {_type_of(inner) if isinstance(inner, dict) else 'any'}"
    if schema.get("format"):
        return f"{t} ({schema['format']})"
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    return str(t or "any")


def _walk(kind: str, prefix: str, schema: dict[str, Any], required: set[str],
          out: list[Field]) -> None:
    props = schema.get("properties") or {}
    for name, sub in props.items():
        path = f"{prefix}.{name}"
        out.append(Field(kind, path, _type_of(sub), str(sub.get("description") or "").strip(),
                         sub.get("default"), name in required))
        if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
            _walk(kind, f"{path}[]", sub["items"], set(sub["items"].get("required", [])), out)
        else:
            _walk(kind, path, sub, set(sub.get("required", [])), out)


def crd_fields() -> list[Field]:
    """Every field of every CRD's spec (and status, where the CRD declares one), in order."""
    from benchfarm.api.crdgen import all_crds
    out: list[Field] = []
    for body in all_crds().values():
        if body.get("kind") != "CustomResourceDefinition":
            continue
        kind = body["spec"]["names"]["kind"]
        root = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for part in ("spec", "status"):
            schema = root["properties"].get(part)
            if schema:
                _walk(kind, part, schema, set(schema.get("required", [])), out)
    return out


def crd_kinds() -> list[tuple[str, str, str, list[str]]]:
    from benchfarm.api.crdgen import all_crds
    out = []
    for body in all_crds().values():
        if body.get("kind") == "CustomResourceDefinition":
            names = body["spec"]["names"]
            out.append((names["kind"], names["plural"], body["spec"]["scope"],
                        list(names.get("shortNames", []))))
    return out


def _crd_page() -> str:
    lines = ["# Custom resources", "",
             "Generated from the pydantic models in `operator/benchfarm/api` (the same schema "
             "`make crds` writes to `crds/`, and `kubectl explain` shows), with their "
             "descriptions. Group and version: `benchfarm.io/v1alpha1`.", ""]
    fields = crd_fields()
    for kind, plural, scope, short in crd_kinds():
        lines += [f"## {kind}", "",
                  f"`{plural}` ({scope.lower()}; short names: "
                  f"{', '.join(_code(s) for s in short) or 'none'})", "",
                  "| field | type | description |", "|---|---|---|"]
        for f in fields:
            if f.kind != kind:
                continue
            default = "" if f.default in (None, "", [], {}) else f" Default: {_code(f.default)}."
            req = " Required." if f.required else ""
            lines.append(f"| {_code(f.path)} | {_cell(f.type)} | "
                         f"{_cell(f.description or '(undocumented)')}{req}{_cell(default)} |")
        lines.append("")
    return "\n".join(lines)


# -- CLI -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Option:
    command: str            # "benchfarm history"
    names: str              # "--since" or "metric"
    help: str
    default: Any = None
    choices: Any = None


def _commands(parser: Any, prefix: str) -> list[tuple[str, Any]]:
    import argparse
    out = [(prefix, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                sub._benchfarm_help = helps.get(name) or sub.description or ""
                out += _commands(sub, f"{prefix} {name}")
    return out


def cli_commands() -> list[tuple[str, str, list[Option]]]:
    """(command, its help, its options and arguments) for every command of `benchfarm`."""
    import argparse

    from benchfarm.cli.entry import build_parser
    out = []
    for name, parser in _commands(build_parser(), "benchfarm"):
        opts = []
        for a in parser._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            names = ", ".join(a.option_strings) if a.option_strings else (a.metavar or a.dest)
            default = None if a.default in (None, argparse.SUPPRESS, False, []) else a.default
            opts.append(Option(name, str(names), a.help or "", default,
                               list(a.choices) if a.choices else None))
        out.append((name, getattr(parser, "_benchfarm_help", "") or "", opts))
    return out


def _cli_page() -> str:
    lines = ["# The `benchfarm` command", "",
             "Generated from the command's argparse parser (`benchfarm.cli.entry.build_parser`), the "
             "embedded lab's commands (`benchfarm lab`, `benchfarm demo`) included where the "
             "`devlab` package is installed. `benchfarm COMMAND --help` prints the same.", ""]
    for name, help_, opts in cli_commands():
        if name == "benchfarm":
            continue
        lines += [f"## `{name}`", "", _cell(help_) or "", ""]
        if opts:
            lines += ["| argument or option | description |", "|---|---|"]
            for o in opts:
                extra = ""
                if o.choices:
                    extra += f" One of {', '.join(_code(c) for c in o.choices)}."
                if o.default is not None:
                    extra += f" Default: {_code(o.default)}."
                lines.append(f"| {_code(o.names)} | {_cell(o.help or '(no description)')}"
                             f"{_cell(extra)} |")
            lines.append("")
    return "\n".join(lines)


# -- helm values ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Value:
    path: str
    default: str
    description: str


_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-]+):(?P<rest>.*)$")


def helm_values(path: Path | None = None) -> list[Value]:
    """Every key of the chart's values.yaml with its default and its comments (the block above
    it and the one at the end of its line)."""
    text = (path or REPO / "helm" / "benchfarm" / "values.yaml").read_text()
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    out: list[Value] = []
    last: Value | None = None
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped:
            comment = []
            last = None
            continue
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            body = body[2:].strip() if body.startswith("--") else body
            if last is not None and raw.startswith(" " * (len(raw) - len(raw.lstrip())))\
                    and len(raw) - len(raw.lstrip()) > 10:
                # a comment continuing the previous line's trailing comment
                out[-1] = Value(last.path, last.default, f"{last.description} {body}".strip())
                last = out[-1]
                continue
            comment.append(body)
            last = None
            continue
        m = _KEY.match(raw)
        if not m or stripped.startswith("- "):
            last = None
            continue
        indent = len(m["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value, _, trailing = m["rest"].partition(" #")
        value = value.strip()
        path_ = ".".join([k for _, k in stack] + [m["key"]])
        desc = " ".join(comment + ([trailing.strip()] if trailing.strip() else []))
        out.append(Value(path_, value, desc))
        last = out[-1] if trailing.strip() else None
        comment = []
        if not value:
            stack.append((indent, m["key"]))
    return out


def _helm_page() -> str:
    lines = ["# Helm values", "",
             "Generated from `helm/benchfarm/values.yaml` and its comments (a section's comment "
             "applies to the keys under it); `helm show values helm/benchfarm` prints the file.",
             "", "| value | default | description |", "|---|---|---|"]
    for v in helm_values():
        lines.append(f"| {_code(v.path)} | {_code(v.default) if v.default else ''} | "
                     f"{_cell(v.description)} |")
    return "\n".join(lines) + "\n"


# -- settings ------------------------------------------------------------------------------------

def settings_in_code() -> dict[str, list[str]]:
    """Every BENCHFARM_* name the code of SETTINGS_ROOTS spells, with the files that spell it."""
    found: dict[str, set[str]] = {}
    for root in SETTINGS_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            for name in set(_SETTING.findall(path.read_text(errors="replace"))):
                found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return {k: sorted(v) for k, v in sorted(found.items())}


def settings_documented() -> dict[str, str]:
    """variable -> description: every field of `benchfarm.settings.Settings` (its docstring),
    and the hand-written tables of docs/reference/settings.md (what benchfarm writes for a
    suite's command, the embedded lab's own)."""
    from benchfarm.settings import variables
    out = {variable: text for variable, _, _, _, text in variables()}
    for line in (DOCS / "reference" / "settings.md").read_text().splitlines():
        m = re.match(r"^\|\s*`(BENCHFARM_[A-Z0-9_]+)`\s*\|(.*)\|\s*$", line)
        if m:
            out[m[1]] = m[2].split("|")[-1].strip()
    return out


def _settings_page() -> str:
    from benchfarm.settings import _GROUP_TITLES, variables
    lines = ["# Every setting", "",
             "Generated from `operator/benchfarm/settings.py`, the one typed object every "
             "program of benchfarm builds from its environment when it starts (`benchfarm "
             "settings` prints the same). An empty value is the default, except for "
             "`BENCHFARM_LIVENESS`, where empty means none. [Settings](../settings.md) says "
             "how they are set.", ""]
    group = None
    for variable, _, g, default, text in variables():
        if g is not group:
            group = g
            lines += ["", f"## {_GROUP_TITLES[g]}", "", "| variable | default | what it does |",
                      "|---|---|---|"]
        shown = "" if default in (None, "") else f"`{default}`"
        lines.append(f"| `{variable}` | {shown} | {_cell(text)} |")
    lines += ["", "## Where each variable is spelled", "",
              "Every `BENCHFARM_*` name found in the code of the package and the embedded lab, "
              "and the modules that spell it.", "", "| variable | spelled in |", "|---|---|"]
    for name, files in settings_in_code().items():
        lines.append(f"| `{name}` | {', '.join(_code(f) for f in files)} |")
    return "\n".join(lines) + "\n"


# -- metrics and event reasons -------------------------------------------------------------------

def metrics() -> list[tuple[str, str, str, list[str]]]:
    """(name as scraped, type, help, labels) of every metric the operator serves."""
    from prometheus_client.metrics import MetricWrapperBase

    from benchfarm.operator.state import metrics as m
    out = []
    for value in vars(m).values():
        if isinstance(value, MetricWrapperBase):
            kind = value._type
            name = value._name + ("_total" if kind == "counter" else "")
            out.append((name, kind, value._documentation, list(value._labelnames)))
    return sorted(out)


def _member_comments(path: Path) -> dict[str, str]:
    """value -> the comment of an enum member: `#:` lines above it and the `#` at its line's
    end (benchfarm.api's way of saying what a reason means)."""
    out: dict[str, str] = {}
    above: list[str] = []
    last: str | None = None         # the member whose end-of-line comment may go on below it
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            above.append(stripped[2:].strip())
            last = None
            continue
        if stripped.startswith("#") and last is not None:
            out[last] = f"{out[last]} {stripped.lstrip('#').strip()}"
            continue
        m = re.match(r'^\s+\w+\s*=\s*"([A-Za-z]+)"\s*(?:#\s*(.*))?$', line)
        last = None
        if m:
            text = " ".join(above + ([m[2].strip()] if m[2] else []))
            if text and m[1] not in out:
                out[m[1]] = text
                last = m[1] if m[2] else None
        above = []
    return out


def reason_meanings() -> dict[str, str]:
    out: dict[str, str] = {}
    for mod in ("outcomes", "campaigns", "notifications"):
        for k, v in _member_comments(REPO / "operator/benchfarm/api" / f"{mod}.py").items():
            out.setdefault(k, v)
    return out


def event_reasons() -> list[tuple[str, str, list[str]]]:
    """(reason, type(s), where) of every event reason the code posts with a literal or an enum
    member, plus every reason of the enums in benchfarm.api (conditions and events)."""
    enums: dict[str, dict[str, str]] = {}
    docs: dict[str, str] = {}
    for mod in ("outcomes", "campaigns", "notifications"):
        tree = ast.parse((REPO / "operator/benchfarm/api" / f"{mod}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                members = {t.targets[0].id: t.value.value for t in node.body
                           if isinstance(t, ast.Assign) and isinstance(t.value, ast.Constant)
                           and isinstance(t.targets[0], ast.Name)}
                enums[node.name] = members
                docs[node.name] = (ast.get_docstring(node) or "").split("\n\n")[0]
    found: dict[str, tuple[set[str], set[str]]] = {}
    for path in sorted((REPO / "operator/benchfarm").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "event" and len(node.args) >= 3):
                continue
            typ, reason = node.args[-3], node.args[-2]
            name = None
            if isinstance(reason, ast.Constant) and isinstance(reason.value, str):
                name = reason.value
            elif (isinstance(reason, ast.Attribute) and isinstance(reason.value, ast.Name)
                  and reason.attr in enums.get(reason.value.id, {})):
                name = enums[reason.value.id][reason.attr]
            if name is None:
                continue
            types, where = found.setdefault(name, (set(), set()))
            if isinstance(typ, ast.Constant):
                types.add(str(typ.value))
            where.add(str(path.relative_to(REPO / "operator")))
    for cls in ("Reason", "Underway", "RunFailure", "Refusal", "BoardFaultKind", "Regression",
                "LeaseReason", "CampaignReason", "NotificationReason"):
        for value in enums.get(cls, {}).values():
            types, where = found.setdefault(value, (set(), set()))
            where.add(f"benchfarm.api: {cls}")
    return [(k, "/".join(sorted(t)) or "Normal or Warning", sorted(w))
            for k, (t, w) in sorted(found.items())]


def _observability_page() -> str:
    lines = ["# Metrics and event reasons", "",
             "Generated from `benchfarm.operator.state.metrics` (served by the operator on "
             "`BENCHFARM_METRICS_PORT`, 9090 in the chart) and from the code that posts "
             "Kubernetes events (`kubectl get events`, `kubectl describe br NAME`).", "",
             "## Prometheus metrics", "", "| metric | type | labels | description |",
             "|---|---|---|---|"]
    for name, kind, help_, labels in metrics():
        lines.append(f"| `{name}` | {kind} | {', '.join(_code(x) for x in labels)} | "
                     f"{_cell(help_)} |")
    lines += ["", "## Event and condition reasons", "",
              "Reasons of the events benchfarm posts and of its conditions (`Succeeded`, "
              "`Scheduled`, `Regressed`, a lease's `Granted`); a reason posted under a variable name is "
              "listed through the enum it comes from (`benchfarm.api.outcomes`, "
              "`benchfarm.api.campaigns`).", "",
              "| reason | event type | what it means | posted by |", "|---|---|---|---|"]
    meanings = reason_meanings()
    for reason, types, where in event_reasons():
        lines.append(f"| `{reason}` | {types} | {_cell(meanings.get(reason, ''))} | "
                     f"{', '.join(_code(w) for w in where)} |")
    return "\n".join(lines) + "\n"


# -- the results database ------------------------------------------------------------------------

def results_schema() -> list[tuple[str, list[tuple[str, str, bool, bool]], list[tuple[str, list[str]]]]]:
    """(table, [(column, SQL type, nullable, in the primary key)], [(index, columns)]) of the
    results database as `benchfarm.history.schema` declares it (the migrations' head)."""
    from sqlalchemy.dialects import postgresql

    from benchfarm.history import schema
    out = []
    for table in [*schema.metadata.sorted_tables, *schema.outbox_metadata.sorted_tables]:
        pk = {c.name for c in table.primary_key.columns}
        cols = [(c.name, c.type.compile(dialect=postgresql.dialect()), bool(c.nullable),
                 c.name in pk) for c in table.columns]
        idx = [(str(i.name), [c.name for c in i.columns]) for i in table.indexes]
        out.append((table.name, cols, sorted(idx)))
    return out


def _schema_page() -> str:
    lines = ["# Results database schema", "",
             "Generated from `benchfarm.history.schema`, which the Alembic migrations in "
             "`operator/benchfarm/history/migrations` create (the operator and `benchfarm results "
             "reindex` run them). [Read it from Grafana](../../howto/grafana.md) shows how to "
             "chart it. `notification_outbox` is the notifier's outbox, not the index's: "
             "[notifications](../../howto/notifications.md).", ""]
    for table, cols, idx in results_schema():
        lines += [f"## `{table}`", "", "| column | type | null | primary key |",
                  "|---|---|---|---|"]
        for name, typ, nullable, pk in cols:
            lines.append(f"| `{name}` | {typ} | {'yes' if nullable else 'no'} | "
                         f"{'yes' if pk else ''} |")
        if idx:
            lines += ["", "Indexes: " + "; ".join(f"`{n}` ({', '.join(c)})" for n, c in idx)
                      + "."]
        lines.append("")
    return "\n".join(lines)


# -- Sphinx --------------------------------------------------------------------------------------

PAGES = {"crds.md": _crd_page, "cli.md": _cli_page, "helm-values.md": _helm_page,
         "settings-where.md": _settings_page, "observability.md": _observability_page,
         "results-schema.md": _schema_page}


def generate(out: Path = OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in PAGES.items():
        path = out / name
        text = page()
        if not path.exists() or path.read_text() != text:   # unchanged: Sphinx keeps its cache
            path.write_text(text)
        written.append(path)
    return written


def _on_config_inited(app: Any, config: Any) -> None:
    generate()


def setup(app: Any) -> dict[str, Any]:
    app.connect("config-inited", _on_config_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    for p in generate():
        print(p.relative_to(REPO))
