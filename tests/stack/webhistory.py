"""The browser test's history source, until the results database (benchfarm.history) is merged:
the real runs' metrics.json from the store (benchfarm.web.history.StoreHistorySource), each run's
build named by its label `webtest.benchfarm.io/build` (the test's runs boot the board's own
image), and a change point declared at the first run of build `b2` in a series, so the chart's
change-point marker is exercised. It detects nothing: that is benchfarm.history's work.
"""

from __future__ import annotations

from typing import Any

from benchfarm.web.history import StoreHistorySource

BUILD_LABEL = "webtest.benchfarm.io/build"


class DeclaredChangeSource(StoreHistorySource):
    def software_of(self, run: dict[str, Any]) -> str:
        return ((run.get("metadata") or {}).get("labels") or {}).get(BUILD_LABEL, "")

    def history(self, namespace: str, metric: str, device_type: str, plan: str,
                with_points: bool = True) -> dict[str, Any]:
        doc = super().history(namespace, metric, device_type, plan)
        series = doc["series"]
        first = next((i for i, p in enumerate(series) if p["software"] == "b2"), None)
        if first:
            before = [p["mean"] for p in series[:first] if p["software"] != "b2"]
            after = [p["mean"] for p in series[first:] if p["software"] == "b2"]
            magnitude = (sum(after) / len(after) / (sum(before) / len(before)) - 1) * 100 \
                if before and sum(before) else 0.0
            doc["changePoints"] = [{"run": series[first]["run"], "software": "b2",
                                    "magnitude": magnitude, "pvalue": 0.01,
                                    "direction": "regression" if magnitude > 0  # latencies
                                    else "improvement"}]
        return doc


def source(kube, store) -> DeclaredChangeSource:
    return DeclaredChangeSource(kube, store)
