"""The dashboard's pages as text, from what its handlers read: pure, and the pages drawn from a
tenant's figures (a history's chart, a run's results, a comparison of two builds) run in a
budgeted child (`benchfarm.budgeted`), never on the server's event loop.

One run's figures once hung every user's page: an axis's loop stood still on a spread of one
unit in the last place, on the event loop, on every visit to that history. Whatever a renderer
does with a tenant's figures now costs at most BENCHFARM_WEB_RENDER_CPU_SECONDS and
BENCHFARM_WEB_RENDER_MEMORY_MIB in a child of the dashboard's forkserver; past it that page
answers 503 saying so (`server`), and the event loop answered every other page meanwhile.
Each function here is what such a child runs: its arguments and its page are pickled.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jinja2
import yaml

from benchfarm.report.conditions import EXCLUDED, HEADER, SIMULATED
from benchfarm.report.svg import fmt
from benchfarm.web import charts, views

# what the dashboard's forkserver imports once: these renderers (jinja2, the charts), the
# server with the types its pages' arguments hold (access.Person imports the Kubernetes client:
# 0.4 s a page when each child imported it) and the dashboard's main module
PRELOAD = ("benchfarm.web.rendering", "benchfarm.web.server", "benchfarm.cli")


@functools.cache
def environment() -> jinja2.Environment:
    """The pages' templates, HTML-escaped, with the filters they use (one per process)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("benchfarm.web", "templates"),
                             autoescape=True)
    env.filters["when"] = when
    env.filters["result"] = result
    env.filters["num"] = fmt
    env.globals["quote"] = quote
    return env


def render(template: str, context: dict[str, Any]) -> str:
    return environment().get_template(template).render(**context)


def run_page(context: dict[str, Any], metrics: bytes | None) -> str:
    """The run page, with what each step was measured under from its metrics.json (read here,
    in the budgeted child: it is the tenant's figures)."""
    return render("run.html.j2", {**context, "measured": views.measured_under(metrics),
                                  "conditions_header": HEADER, "excluded": EXCLUDED,
                                  "simulated": SIMULATED})


def history_page(context: dict[str, Any], doc: dict[str, Any], unit: str) -> str:
    """The history page: the series' chart, its change points and the builds to compare."""
    svg = charts.history_svg(doc, unit, lambda run: "/runs/" + quote(run)) \
        if context.get("known") else ""
    softwares = sorted({p["software"] for p in doc["series"] if p.get("software")})
    return render("history.html.j2", {**context, "svg": svg, "doc": doc, "softwares": softwares})


def bisect_page(context: dict[str, Any], key: views.SeriesKey, change: dict[str, Any],
                before: dict[str, Any] | None, after: dict[str, Any],
                runs: dict[str, dict[str, Any]], higher_is_better: bool) -> str:
    """A change point's bisection, to complete and create (`views.bisection_draft`)."""
    body, todo = views.bisection_draft(
        key, before, after, runs, improvement=change.get("direction") != "regression",
        higher_is_better=higher_is_better)
    return render("bisect.html.j2", {**context, "change": change, "name": body["metadata"]["name"],
                                     "namespace": key.namespace, "todo": todo,
                                     "manifest": yaml.safe_dump(body, sort_keys=False)})


def compare_page(context: dict[str, Any], docs: list[tuple[str, dict[str, Any]]], a: str,
                 b: str) -> str:
    """The compare page: per metric (its name, its history), the runs of build `a` against
    those of `b`."""
    rows = []
    for metric, doc in docs:
        sa = [s for p in doc["series"] if p.get("software") == a for s in p["samples"]]
        sb = [s for p in doc["series"] if p.get("software") == b for s in p["samples"]]
        if sa and sb:
            ma, mb = sum(sa) / len(sa), sum(sb) / len(sb)
            rows.append({"metric": metric, "a": ma, "amin": min(sa), "amax": max(sa),
                         "b": mb, "bmin": min(sb), "bmax": max(sb), "runs": (
                             sum(p.get("software") == a for p in doc["series"]),
                             sum(p.get("software") == b for p in doc["series"])),
                         "change": (mb - ma) / ma * 100 if ma else None})
    return render("compare.html.j2", {**context, "rows": rows, "a": a, "b": b})


def when(value: Any) -> str:
    """An ISO time or seconds since the epoch, as UTC to the second."""
    if value in (None, ""):
        return ""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value).replace("T", " ").replace("Z", " UTC").replace("+00:00", " UTC")


def result(value: Any) -> str:
    """A headline figure of `status.results` as the guides print it: its `display`, and a
    suite's headline metric with it."""
    if isinstance(value, dict) and "display" in value:
        return f"{value.get('phase', '')} {value['display']}".strip()
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v.get('headline', '')} {v.get('value', '')}".rstrip()
                         if isinstance(v, dict) else f"{k}: {v}" for k, v in value.items())
    return str(value)


# The templates compiled where this module is imported: in the dashboard's forkserver too, so
# each render's child starts with them compiled.
for _name in ("run.html.j2", "history.html.j2", "compare.html.j2"):
    environment().get_template(_name)
