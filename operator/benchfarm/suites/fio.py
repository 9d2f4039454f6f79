"""fio --output-format=json: per job and direction, IOPS, bandwidth (KiB/s) and mean latency."""

from __future__ import annotations

from ..errors import ParseError
from .base import Metric, json_object

SUITE = "fio"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    data = json_object(text, SUITE, "run fio with --output-format=json")
    out: list[Metric] = []
    for job in data.get("jobs", []):
        name = job.get("jobname", "job")
        for direction in ("read", "write"):
            d = job.get(direction) or {}
            if not d.get("io_bytes"):
                continue
            labels = {"job": name, "direction": direction}
            out.append(Metric(f"fio-{name}-{direction}-iops", round(d["iops"], 2), "IOPS", True, labels))
            out.append(Metric(f"fio-{name}-{direction}-bw", d["bw"], "KiB/s", True, labels))
            if "clat_ns" in d:
                out.append(Metric(f"fio-{name}-{direction}-clat-mean",
                                  round(d["clat_ns"]["mean"] / 1000, 2), "us", False, labels))
    if not out:
        raise ParseError(SUITE, "JSON has no job with read or write I/O")
    return out
