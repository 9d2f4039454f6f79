"""iperf3: sent and received throughput (Mbit/s), retransmits for TCP; for UDP the receiver's
jitter (ms) and lost/total datagrams; from -J, the CPU load of both ends (%) as netperf names
it: `iperf3-local-cpu-util` (this host, the guides' "CPU Load % (LOCAL_CPU_UTIL)") and
`iperf3-remote-cpu-util`.

Reads the -J JSON and the text output (its final 'sender' / 'receiver' lines; with -P N the [SUM]
lines, which come last). The UDP figures are the receiver's: JSON end.sum, the text receiver line.
"""

from __future__ import annotations

from typing import Any

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, integer, json_object, lines_of, number

SUITE = "iperf3"
_SUMMARY = Pattern(
    r"^\[\s*(?:\d+|SUM)\]\s+[\d.]+-[\d.]+\s+sec\s+[\d.]+\s+[KMGT]?Bytes\s+([\d.]+)\s+([KMGT]?)bits/sec"
    r"(?:\s+(\d+))?"                                      # TCP sender: Retr
    r"(?:\s+([\d.]+)\s+ms\s+(\d+)/(\d+)\s+\([^)]*\))?"    # UDP: jitter, lost/total datagrams
    r"\s+(sender|receiver)$", "bits/sec")
_TO_MBIT = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3, "T": 1e6}
_ERROR = Pattern(r"^iperf3: error - (.+)$", "iperf3: error - ")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    """Text output if it has the final sender/receiver lines, else the -J JSON."""
    summary: dict[str, tuple[int, Any]] = {}
    for i, line in enumerate(lines_of(text), 1):
        if m := _SUMMARY.match(line.strip()):
            summary[m.group(7)] = (i, m)
        elif m := _ERROR.match(line.strip()):
            raise ParseError(SUITE, f"iperf3 reported: {m.group(1)}", line=i)
    return _from_text(summary) if summary else _from_json(text)


def _from_text(summary: dict[str, tuple[int, Any]]) -> list[Metric]:
    out: list[Metric] = []
    for role, name in (("sender", "iperf3-sent"), ("receiver", "iperf3-received")):
        if role not in summary:
            continue
        i, m = summary[role]
        out.append(Metric(name, round(number(m.group(1), SUITE, i) * _TO_MBIT[m.group(2)], 2),
                          "Mbit/s"))
        if role == "sender" and m.group(3) is not None:
            out.append(Metric("iperf3-retransmits", integer(m.group(3), SUITE, i), "", False))
    if "receiver" in summary and (m := summary["receiver"][1]).group(4) is not None:
        i = summary["receiver"][0]
        out += _udp(number(m.group(4), SUITE, i), integer(m.group(5), SUITE, i),
                    integer(m.group(6), SUITE, i))
    return out


def _from_json(text: str) -> list[Metric]:
    data = json_object(text, SUITE, "run iperf3 with -J, or give its text output with the final "
                                    "'sender' / 'receiver' lines")
    if "error" in data:
        raise ParseError(SUITE, f"iperf3 reported: {data['error']}")
    end: dict[str, Any] = data.get("end", {})
    out = []
    try:
        if "sum_sent" in end:
            out.append(Metric("iperf3-sent", round(end["sum_sent"]["bits_per_second"] / 1e6, 2),
                              "Mbit/s"))
            if "retransmits" in end["sum_sent"]:
                out.append(Metric("iperf3-retransmits", end["sum_sent"]["retransmits"], "", False))
        if "sum_received" in end:
            out.append(Metric("iperf3-received",
                              round(end["sum_received"]["bits_per_second"] / 1e6, 2), "Mbit/s"))
        udp = end.get("sum", {})
        if udp and not out:  # older iperf3 wrote UDP totals only in end.sum
            out.append(Metric("iperf3-udp", round(udp["bits_per_second"] / 1e6, 2), "Mbit/s"))
        if "jitter_ms" in udp:
            out += _udp(float(udp["jitter_ms"]), int(udp["lost_packets"]), int(udp["packets"]))
        cpu = end.get("cpu_utilization_percent", {})
        for side, key in (("local", "host_total"), ("remote", "remote_total")):
            if key in cpu:
                out.append(Metric(f"iperf3-{side}-cpu-util", round(cpu[key], 2), "%", False))
    except KeyError as exc:
        raise ParseError(SUITE, f"JSON end section lacks {exc}") from exc
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ParseError(SUITE, f"JSON end section of another shape ({exc})") from exc
    if not out:
        raise ParseError(SUITE, "JSON has no end.sum_sent / sum_received")
    return out


def _udp(jitter_ms: float, lost: int, total: int) -> list[Metric]:
    return [Metric("iperf3-udp-jitter", jitter_ms, "ms", False),
            Metric("iperf3-udp-lost", round(100 * lost / total, 2) if total else 0.0, "%", False),
            Metric("iperf3-udp-lost-datagrams", lost, "", False),
            Metric("iperf3-udp-datagrams", total, "")]
