#!/usr/bin/env python3
"""Writes every generated file: crds/ from the models, and the Helm chart's copies of the CRDs,
device types and test plans (Helm cannot read files outside the chart). `make crds` runs it; a
test fails when any of them drifts from its source.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "benchfarm"


def expected() -> dict[Path, str]:
    sys.path.insert(0, str(REPO / "operator"))
    from benchfarm.api.crdgen import render
    out: dict[Path, str] = {}
    for name, text in render().items():
        out[REPO / "crds" / name] = text
        out[CHART / "crds" / name] = text
    for src in sorted((REPO / "exporters" / "device-types").glob("*.yaml")):
        out[CHART / "files" / "device-types" / src.name] = src.read_text()
    for src in sorted((REPO / "testplans").glob("*.yaml")):
        out[CHART / "files" / "testplans" / src.name] = src.read_text()
    return out


def stale() -> list[Path]:
    exp = expected()
    managed = [CHART / "crds", CHART / "files" / "device-types", CHART / "files" / "testplans",
               REPO / "crds"]
    extra = [p for d in managed for p in d.glob("*.yaml") if p not in exp]
    return [p for p, text in exp.items() if not p.exists() or p.read_text() != text] + extra


def main() -> int:
    exp = expected()
    for path in stale():
        if path in exp:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(exp[path])
            print(f"wrote {path.relative_to(REPO)}")
        else:
            path.unlink()
            print(f"removed {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
