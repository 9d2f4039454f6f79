"""The HTML report's fused timeline: the boots, every suite step's attempts, and the board's power
(W), CPU frequency (MHz, the slowest policy) and temperature (°C, the hottest zone) under them,
on one host clock: seconds since the run's first power-on, the clock the boot timeline's bars
and the conditions' snapshots (api.conditions, host wall seconds) share.

Inline SVG drawn here, as the boot timeline is (report.html): a lane of spans and three panels
of polylines, one subpath per attempt. Bounded: at most MAX_POINTS points per panel (evenly
thinned beyond) and MAX_SPANS spans, whatever a run recorded; a value that is not finite is left
out and one past the axis (report.svg.LIMIT) drawn at its edge. Ids for the browser test:
`timeline-steps`, `timeline-power`, `timeline-frequency`, `timeline-temperature`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape
from typing import Any

from pydantic import ValidationError

from benchfarm.api.conditions import StepConditions
from benchfarm.report.escape import line
from benchfarm.report.svg import LIMIT, fmt, nice_ticks

MAX_POINTS = 1500
MAX_SPANS = 400
MAX_LABEL = 80       # characters of a step's name in a span's title
LEFT, RIGHT, TOP, WIDTH = 64, 16, 12, 720
LANE, PANEL, GAP, BOTTOM = 26, 80, 22, 40
PANELS = (("power", "power (W)", "#d62728"), ("frequency", "frequency (MHz)", "#1f77b4"),
          ("temperature", "temperature (°C)", "#ff7f0e"))

Point = tuple[float, float]


def _ok(v: Any) -> bool:
    """A finite number inside the axis's reach (nan and the infinities compare false)."""
    return isinstance(v, int | float) and -LIMIT < v < LIMIT


def _thin(paths: list[list[Point]]) -> list[list[Point]]:
    """The paths with every k-th point of all of them kept (in order), at most MAX_POINTS."""
    flat = [(i, pt) for i, path in enumerate(paths) for pt in path]
    out: dict[int, list[Point]] = {}
    for i, pt in flat[::max(1, -(-len(flat) // MAX_POINTS))]:
        out.setdefault(i, []).append(pt)
    return list(out.values())


def _conditions(records: list[Any]) -> list[tuple[str, bool, StepConditions]]:
    out = []
    for r in records:
        raw = r.get("conditions") if isinstance(r, Mapping) else None
        if isinstance(raw, Mapping):
            try:
                c = StepConditions.model_validate(raw)
            except ValidationError:
                continue
            label = f"{str(r.get('step', ''))[:MAX_LABEL]} #{str(r.get('iteration', ''))[:12]}"
            out.append((label, c.valid, c))
    return out


def _series(attempts: list[tuple[str, bool, StepConditions]]) -> dict[str, list[list[Point]]]:
    """Each panel's paths, one per attempt: thinned to every k-th sample before they are
    looked at, then to MAX_POINTS in all."""
    samples = sum(len(c.power.samples) for _, _, c in attempts if c.power is not None)
    snapshots = sum(len(c.during) + 2 for _, _, c in attempts)
    k_power = max(1, samples // MAX_POINTS)
    k_snap = max(1, snapshots // MAX_POINTS)
    power, freq, temp = [], [], []
    for _, _, c in attempts:
        if c.power is not None:
            power.append([(t, mw / 1000) for t, mw in c.power.samples[::k_power]
                          if _ok(t) and _ok(mw)])
        snaps = [s for s in (c.before, *c.during, c.after)[::k_snap]
                 if s is not None and _ok(s.t)]
        freq.append([(s.t, min(f) / 1000) for s in snaps if (f := [
            p.curKHz for p in s.cpufreq.values() if p.curKHz is not None and _ok(p.curKHz)])])
        temp.append([(s.t, max(z)) for s in snaps if (z := [
            v.tempC for v in s.thermal.values() if v.tempC is not None and _ok(v.tempC)])])
    return {"power": _thin(power), "frequency": _thin(freq), "temperature": _thin(temp)}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _span_of(c: StepConditions) -> Point | None:
    ts = [s.t for s in (c.before, c.after) if s is not None and _ok(s.t)]
    if c.power is not None:
        ts += [t for t, _ in c.power.samples[:1] + c.power.samples[-1:] if _ok(t)]
    return (min(ts), max(ts)) if ts else None


def timeline(doc: Mapping[str, Any]) -> str | None:
    """The fused timeline as inline SVG, or None when no attempt recorded conditions."""
    attempts = _conditions([r for key in ("retaken", "records")
                            if isinstance(v := doc.get(key), list) for r in v])
    series = _series(attempts)
    if not any(series.values()):
        return None
    spans = [(label, valid, s) for label, valid, c in attempts if (s := _span_of(c))][:MAX_SPANS]
    boots = [(float(p), float(p) + max([float(v) for v in ev.values() if _ok(v)] or [0.0]))
             for p, ev in zip(_list(doc.get("powerOnTimes")), _list(doc.get("bootEvents")),
                              strict=False) if _ok(p) and isinstance(ev, Mapping)][:MAX_SPANS]
    starts = [a for a, _ in boots] or [a for _, _, (a, _) in spans] or \
        [p[0] for paths in series.values() for path in paths for p in path]
    origin = min(starts)
    ends = [b for _, b in boots] + [b for _, _, (_, b) in spans] + \
        [p[0] for paths in series.values() for path in paths for p in path]
    xticks = nice_ticks(0.0, max(ends) - origin)
    x_lo, x_hi = xticks[0], xticks[-1]
    pw = WIDTH - LEFT - RIGHT
    height = TOP + LANE + len(PANELS) * (GAP + PANEL) + BOTTOM

    def x(t: float) -> float:
        v = min(max(t - origin, x_lo), x_hi)
        return LEFT + (v - x_lo) / (x_hi - x_lo) * pw

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="conditions timeline" '
           f'font-family="sans-serif" font-size="11">', '<g id="timeline-steps">']
    for i, (a, b) in enumerate(boots, 1):
        out.append(_rect(x(a), TOP, x(b) - x(a), LANE, "#9e9e9e", f"boot {i}"))
    for label, valid, (a, b) in spans:
        out.append(_rect(x(a), TOP, x(b) - x(a), LANE, "#4c78a8" if valid else "#b00020",
                         f"{label}" + ("" if valid else " (invalid)")))
    out.append(f'<text x="{LEFT - 6}" y="{TOP + LANE / 2 + 4}" text-anchor="end">steps</text>'
               '</g>')
    for n, (key, title, colour) in enumerate(PANELS):
        y0 = TOP + LANE + GAP + n * (GAP + PANEL)
        out += _panel(key, title, colour, series[key], y0, x)
    y_axis = TOP + LANE + len(PANELS) * (GAP + PANEL)
    for t in xticks:
        out.append(f'<line x1="{x(t + origin):.2f}" y1="{y_axis}" x2="{x(t + origin):.2f}" '
                   f'y2="{y_axis + 4}" stroke="#000000"/><text x="{x(t + origin):.2f}" '
                   f'y="{y_axis + 16}" text-anchor="middle">{fmt(t)}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{height - 6}" text-anchor="middle">seconds since '
               f'the first power-on (host clock); grey: boots, blue: valid attempts, red: '
               f'invalid</text></svg>')
    return "".join(out)


def _rect(x0: float, y0: float, w: float, h: float, colour: str, title: str) -> str:
    return (f'<path d="M {x0:.2f} {y0} h {max(w, 1.0):.2f} v {h} h {-max(w, 1.0):.2f} Z" '
            f'style="fill: {colour}; fill-opacity: 0.6">'
            f'<title>{escape(line(title))}</title></path>')


def _panel(key: str, title: str, colour: str, paths: list[list[Point]], y0: float,
           x: Callable[[float], float]) -> list[str]:
    pw = WIDTH - LEFT - RIGHT
    out = [f'<g id="timeline-{key}"><path d="M {LEFT} {y0} h {pw} v {PANEL} h {-pw} Z" '
           f'style="fill: #ffffff; stroke: #000000"/>'
           f'<text x="{LEFT + 4}" y="{y0 - 4}">{escape(title)}</text>']
    values = [v for p in paths for _, v in p]
    if values:
        ticks = nice_ticks(min(values), max(values), 3)
        lo, hi = ticks[0], ticks[-1]

        def y(v: float) -> float:
            return y0 + PANEL - (min(max(v, lo), hi) - lo) / (hi - lo) * PANEL

        for t in ticks:
            out.append(f'<text x="{LEFT - 6}" y="{y(t) + 4:.2f}" text-anchor="end">{fmt(t)}'
                       f'</text>')
        d = " ".join("M " + " L ".join(f"{x(t):.2f} {y(v):.2f}" for t, v in p) for p in paths)
        out.append(f'<path d="{d}" style="fill: none; stroke: {colour}; stroke-width: 1.5"/>')
    return [*out, "</g>"]
