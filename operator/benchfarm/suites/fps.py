"""Frames per second from GPU benchmarks: glmark2 scenes and score, Kanzi and GFXBench lines.

glmark2 prints `[scene] options: FPS: N FrameTime: T ms` and `glmark2 Score: N`. Other tools
(Kanzi, GFXBench) print lines with a scene name and an FPS figure; the plan may give `scene` and
`resolution` parameters, which label the metrics.
"""

from __future__ import annotations

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, lines_of, number

SUITE = "fps"
_GLMARK_SCENE = Pattern(r"^\[(\w+)\]\s*(.*?):\s*FPS:\s*([\d.]+)\s+FrameTime:\s*([\d.]+)\s*ms", "FPS:")
_GLMARK_SCORE = Pattern(r"glmark2 Score:\s*(\d+)", "glmark2 Score:")
_GENERIC = Pattern(r"^(?P<scene>[A-Za-z][\w .:/-]*?)\s*[:=]?\s*(?P<fps>[\d.]+)\s*(?:fps|FPS)\b", "fps", "FPS")
_FPS_FIRST = Pattern(r"\b(?:fps|FPS)\s*[:=]\s*(?P<fps>[\d.]+)", "fps", "FPS")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    params = params or {}
    labels = {k: params[k] for k in ("resolution",) if k in params}
    suffix = f"-{params['resolution']}" if params.get("resolution") else ""
    out: list[Metric] = []
    seen: dict[str, int] = {}
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        if m := _GLMARK_SCENE.match(s):
            scene, opts = m.group(1), m.group(2).strip()
            extra = "-".join(o.split("=")[1] for o in opts.split(":")
                             if "=" in o and not o.startswith("duration"))
            name = f"glmark2-{scene}" + (f"-{extra}" if extra else "")
            n = seen[name] = seen.get(name, 0) + 1
            name = name if n == 1 else f"{name}-{n}"
            out.append(Metric(name, number(m.group(3), SUITE, i), "FPS", True,
                              {"scene": scene, **labels}))
        elif m := _GLMARK_SCORE.search(s):
            out.append(Metric("glmark2-score", number(m.group(1), SUITE, i), "", True, labels))
        elif m := _GENERIC.match(s):
            scene = params.get("scene") or m.group("scene").strip().lower().replace(" ", "-")
            out.append(Metric(f"fps-{scene}{suffix}", number(m.group("fps"), SUITE, i), "FPS", True,
                              {"scene": scene, **labels}))
        elif (m := _FPS_FIRST.search(s)) and params.get("scene"):
            out.append(Metric(f"fps-{params['scene']}{suffix}", number(m.group("fps"), SUITE, i),
                              "FPS", True, {"scene": params["scene"], **labels}))
    if not out:
        raise ParseError(SUITE, "no FPS figure found")
    return out
