"""A self-contained HTML report with plots: boot phases, cyclictest histogram, lat_mem_rd curve;
its tables in the guides' shapes (report.shapes), like the Markdown and RST reports.

Rendered with jinja2; plots drawn with matplotlib (Agg, no display) and embedded, the boot
timeline as inline SVG (a browser test reads its colours and where its legend is), the others as
PNG data, so the one file uploaded next to the run is all a reader needs.
"""

from __future__ import annotations

import base64
import functools
import io
import os
import re
from collections import defaultdict
from typing import Any

import jinja2

from .shapes import shape

os.environ.setdefault("MPLBACKEND", "Agg")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


BOOT_STAGES = ("first-byte", "kernel", "init", "userspace", "prompt")
# One colour per stage, the same in every boot's bar and in the legend (matplotlib's default cycle
# would give each new bar segment the next colour: boot 2's stages came out in others' colours).
STAGE_COLOURS = dict(zip(BOOT_STAGES, ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"),
                         strict=True))


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "benchfarm"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]      # inline in the page: no XML declaration or doctype


def boot_plot(doc: dict[str, Any]) -> str | None:
    """The boot timeline as inline SVG: a bar per boot, a segment per stage in the stage's own
    colour, the legend above the axes (never on a bar). Each segment's SVG id is
    `boot<N>-<stage>`, the legend's `boot-legend`, the plot area's `boot-axes`."""
    events = doc.get("bootEvents") or []
    if not events:
        return None
    import matplotlib.pyplot as plt
    order = [e for e in BOOT_STAGES if any(e in ev for ev in events)]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.45 * len(events)))
    for i, ev in enumerate(events):
        start = 0.0
        for name in order:
            if name in ev:
                ax.barh(i, ev[name] - start, left=start, color=STAGE_COLOURS[name],
                        gid=f"boot{i + 1}-{name}")
                start = ev[name]
    ax.set_yticks(range(len(events)), [f"boot {i + 1}" for i in range(len(events))])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since power-on (each bar ends when that marker appeared)")
    ax.patch.set_gid("boot-axes")
    handles = [plt.Rectangle((0, 0), 1, 1, color=STAGE_COLOURS[n]) for n in order]
    legend = ax.legend(handles, order, ncol=len(order), fontsize="small", frameon=False,
                       loc="lower left", bbox_to_anchor=(0.0, 1.0), borderaxespad=0.3)
    legend.set_gid("boot-legend")
    return _svg(fig)


def cyclictest_plot(doc: dict[str, Any]) -> str | None:
    buckets: dict[int, float] = defaultdict(float)
    for s in doc.get("series", []):
        if m := re.match(r"cyclictest-hist-(\d+)us$", s["name"]):
            buckets[int(m.group(1))] += sum(s["values"]) / len(s["values"])
    if not buckets:
        return None
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3))
    xs = sorted(buckets)
    ax.bar(xs, [buckets[x] for x in xs], width=1.0)
    ax.set_yscale("log")
    ax.set_xlabel("latency (us)")
    ax.set_ylabel("samples (mean per iteration)")
    return _png(fig)


def lat_mem_rd_plot(doc: dict[str, Any]) -> str | None:
    points = []
    for s in doc.get("series", []):
        if s["name"].startswith("lat_mem_rd-") and s.get("values"):
            m = re.search(r"-sz(\d+)(k?)$", s["name"])
            if m:
                kb = float(m.group(1)) if m.group(2) else float(m.group(1)) / 1000
                points.append((kb, sum(s["values"]) / len(s["values"])))
    if len(points) < 2:
        return None
    import matplotlib.pyplot as plt
    points.sort()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker=".")
    ax.set_xscale("log")
    ax.set_xlabel("array size (KB)")
    ax.set_ylabel("load latency (ns)")
    return _png(fig)


@functools.cache
def template() -> jinja2.Template:
    """The report's template, compiled once per process (a few tens of ms; the session server
    compiles it before it forks sessions)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("benchfarm.report", "templates"),
                             autoescape=True)
    return env.get_template("report.html.j2")


def html(doc: dict[str, Any]) -> str:
    run = doc.get("run", {})
    shaped = shape(doc)
    steps = {step: [s for s in series if not s["name"].startswith("cyclictest-hist-")]
             for step, series in shaped.rest.items()}   # the histogram is plotted instead
    plots = [(title, kind, data) for title, kind, data in (
        ("Boot timeline", "svg", boot_plot(doc)),
        ("cyclictest latency histogram", "png", cyclictest_plot(doc)),
        ("lat_mem_rd: latency against size", "png", lat_mem_rd_plot(doc))) if data]
    facts = [(k, run.get(v)) for k, v in (("Board", "board"), ("Device type", "deviceType"),
                                          ("Plan", "plan"), ("Iterations", "iterations"),
                                          ("Boot cycles", "bootCycles"), ("Kernel", "uname"),
                                          ("Result", "result")) if run.get(v) not in (None, "")]
    return template().render(
        run=run, facts=facts, boot=shaped.boot, plots=plots, steps=steps, tables=shaped.tables,
        evidence=doc.get("evidence") or {},
        comparison=doc.get("comparison"),
        failures=[r for r in doc.get("records", []) if r.get("error")])
