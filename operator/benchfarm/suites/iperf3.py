"""iperf3 -J: sent and received throughput (Mbit/s), retransmits for TCP."""

from __future__ import annotations

import json

from ..errors import ParseError
from .base import Metric

SUITE = "iperf3"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    start = text.find("{")
    if start < 0:
        raise ParseError(SUITE, "no JSON object in the output; run iperf3 with -J")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise ParseError(SUITE, f"invalid JSON: {exc.msg}", line=exc.lineno) from exc
    if "error" in data:
        raise ParseError(SUITE, f"iperf3 reported: {data['error']}")
    end = data.get("end", {})
    out = []
    if "sum_sent" in end:
        out.append(Metric("iperf3-sent", round(end["sum_sent"]["bits_per_second"] / 1e6, 2), "Mbit/s"))
        if "retransmits" in end["sum_sent"]:
            out.append(Metric("iperf3-retransmits", end["sum_sent"]["retransmits"], "", False))
    if "sum_received" in end:
        out.append(Metric("iperf3-received",
                          round(end["sum_received"]["bits_per_second"] / 1e6, 2), "Mbit/s"))
    if "sum" in end and not out:  # UDP
        out.append(Metric("iperf3-udp", round(end["sum"]["bits_per_second"] / 1e6, 2), "Mbit/s"))
        out.append(Metric("iperf3-udp-jitter", end["sum"].get("jitter_ms", 0.0), "ms", False))
    if not out:
        raise ParseError(SUITE, "JSON has no end.sum_sent / sum_received")
    return out
