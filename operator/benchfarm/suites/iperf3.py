"""iperf3 -J: sent and received throughput (Mbit/s), retransmits for TCP."""

from __future__ import annotations

from ..errors import ParseError
from .base import Metric, json_object

SUITE = "iperf3"


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    data = json_object(text, SUITE, "run iperf3 with -J")
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
