"""What `benchfarm check --boards` tries from a board, and what its answers mean (pure).

Why it exists: a board runs whatever its tenant's suites (or its tenant's own kernel) run, so
anything of the lab's control plane it can open a connection to, a tenant can drive: power off or
type into another tenant's board, talk to the coordinator, the API server, the store. A lab must
give its boards a network of their own; this module turns what the lab's configuration names
(the API server, the coordinator, the store, the database, the dashboard, every place's power
switch and console as the coordinator lists them, the exporters' SSH) into probes a board's
shell runs (busybox `nc` with a connect timeout, all at once), and reads back which answered.

An endpoint on a loopback address is how a process on the lab's host sees it; a board behind NAT
(QEMU's user network, a DUT router) reaches the host at its default gateway, so such an endpoint
is tried there as well as at its own address. The I/O (the session on the board, the
configuration read) is `benchfarm.cli.boardcheck`'s.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

GATEWAY = "gateway"          # a probe's target: the board's default gateway, found on the board
PROBE_MARK = "bfnet"         # each probe's output line: "bfnet <id> <rc> <address> <message>"
CONNECT_SECONDS = 2          # one connection attempt's timeout, on the board (busybox nc -w)
COMMAND_LIMIT = 600          # characters of one probe command (busybox's line editor takes 1024)
_SCHEME_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "postgres": 5432, "grpc": 20408}


@dataclass(frozen=True)
class Endpoint:
    """A lab control endpoint as the configuration names it: host (name or address), port,
    and what it is ("API server", "console of vb-x86-1 (NetworkSerialPort)")."""

    host: str
    port: int
    what: str


@dataclass(frozen=True)
class Probe:
    """One connection a board tries: `address` (or GATEWAY) and port, for these endpoints."""

    address: str
    port: int
    endpoints: tuple[Endpoint, ...]

    @property
    def shown(self) -> str:
        return f"{'<gateway>' if self.address == GATEWAY else self.address}:{self.port}"


@dataclass
class ProbeResult:
    """What the board saw: `reached` when the connection opened; `address` as tried (the
    gateway's address filled in), `message` the refusal or timeout otherwise."""

    reached: bool
    address: str
    message: str = ""


@dataclass(frozen=True)
class Finding:
    board: str
    endpoint: Endpoint
    tried: str          # address:port the board opened

    def row(self) -> tuple[str, str, str, str]:
        return (self.board, f"{self.endpoint.host}:{self.endpoint.port}", self.tried,
                self.endpoint.what)


@dataclass
class BoardAudit:
    """One board's audit: its findings, or why it was not audited."""

    board: str
    findings: list[Finding] = field(default_factory=list)
    probes: int = 0
    skipped: str | None = None       # not audited on purpose (busy, in maintenance)
    error: str | None = None         # could not be audited (the board, the lab: said which)
    seconds: float = 0.0             # the whole session: acquire to release
    boot_seconds: float = 0.0        # of which the boot to the shell
    probe_seconds: float = 0.0       # and the probes


def host_port(text: str, default_port: int | None = None) -> tuple[str, int] | None:
    """`host:port`, `[v6]:port`, a URL (labgrid's NetworkPowerPort host is a URL template for
    some models) or a bare host with `default_port`; None when no port can be told."""
    text = text.strip()
    if not text:
        return None
    if "://" in text:
        url = urlsplit(re.sub(r"\{[^}]*\}", "0", text))
        if not url.hostname:
            return None
        try:
            port = url.port
        except ValueError:
            return None
        port = port or _SCHEME_PORTS.get(url.scheme.split("+")[0]) or default_port
        return (url.hostname, port) if port else None
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::(\d+))?", text) or \
        re.fullmatch(r"([^:\s/]+)(?::(\d+))?", text)
    if m is None:
        return None
    port = int(m.group(2)) if m.group(2) else default_port
    return (m.group(1), port) if port else None


# labgrid resources (as the coordinator lists them: class -> parameters) that are lab control
# endpoints, and the port of a bare host per class (a power switch's HTTP interface)
_RESOURCE_WHAT = {
    "NetworkSerialPort": "console", "NetworkPowerPort": "power switch",
    "PDUDaemonPort": "pdudaemon", "NetworkService": "network service",
    "RemoteTFTPProvider": "TFTP provider", "RemoteHTTPProvider": "HTTP provider",
    "RemoteNFSProvider": "NFS provider", "NetworkUSBPowerPort": "USB power switch",
    "ModbusTCPCoil": "Modbus power coil", "NetworkSigrokUSBDevice": "sigrok device",
    "NetworkSigrokUSBSerialDevice": "sigrok device", "NetworkYKUSHPowerPort": "USB power switch",
    "SNMPEthernetPort": "switch port (SNMP)", "NetworkLXAIOBusNode": "IOBus server",
    "NetworkInterface": "network interface", "NetworkAlteraUSBBlaster": "JTAG server",
}
_DEFAULT_PORTS = {"NetworkPowerPort": 80, "PDUDaemonPort": 16421, "ModbusTCPCoil": 502,
                  "SNMPEthernetPort": 161}


def place_endpoints(place: str, resources: Mapping[str, Mapping[str, Any]]) -> list[Endpoint]:
    """The control endpoints of one place: every resource that names a host and a port (its
    console, its power switch, pdudaemon, ...). A resource that names only a host (an
    exporter's USB device, a TFTP provider) is reached through the exporter: its SSH, which
    `exporter_hosts` collects."""
    out = []
    for cls, params in sorted(resources.items()):
        host = params.get("host")
        if not isinstance(host, str) or not host:
            continue
        port = params.get("port")
        if port in (None, ""):    # the port is in the host (a URL, host:port) or the class's
            hp = host_port(host, _DEFAULT_PORTS.get(cls))
        else:
            named = host_port(host, 1)
            hp = (named[0] if named else host, int(port))
        if hp is None or not hp[1]:
            continue
        what = _RESOURCE_WHAT.get(cls, cls)
        out.append(Endpoint(hp[0], int(hp[1]), f"{what} of {place} ({cls})"))
    return out


def exporter_hosts(resources: Iterable[Mapping[str, Mapping[str, Any]]]) -> set[str]:
    """The exporter hosts behind the places' resources (their `host`, without port or URL):
    labgrid reaches them over SSH (staging, LG_PROXY)."""
    hosts = set()
    for res in resources:
        for params in res.values():
            host = params.get("host")
            hp = host_port(host, 1) if isinstance(host, str) else None
            if hp is not None:
                hosts.add(hp[0])
    return hosts


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def plan_probes(endpoints: Iterable[Endpoint],
                resolve: Callable[[str], list[str]]) -> list[Probe]:
    """The connections to try from a board, one per distinct address and port (the endpoints
    behind it listed together). `resolve` gives a name's addresses as the lab's side sees
    them (an address resolves to itself; a name nobody resolves is tried by name on the
    board). IPv4 only: the boards' probe is busybox nc over IPv4."""
    by_target: dict[tuple[str, int], list[Endpoint]] = {}
    for ep in endpoints:
        try:
            ipaddress.ip_address(ep.host)
            addresses = [ep.host]
        except ValueError:
            addresses = resolve(ep.host) or [ep.host]
        for addr in dict.fromkeys(addresses):
            if ":" in addr:        # IPv6
                continue
            targets = [GATEWAY, addr] if is_loopback(addr) else [addr]
            for target in targets:
                eps = by_target.setdefault((target, ep.port), [])
                if ep not in eps:
                    eps.append(ep)
    return [Probe(a, p, tuple(eps)) for (a, p), eps in by_target.items()]


def _probe_line(index: int, probe: Probe) -> str:
    host = '"$g"' if probe.address == GATEWAY else probe.address
    return f"p {index} {host} {probe.port}"


# One shell function on the board: a connection attempt with a timeout (busybox nc's -w is the
# connect timeout; `-e true` closes the connection as soon as it opened, so an endpoint that
# answered reports at once), its outcome on one line written at once (every probe runs in the
# background: lines written piecemeal would interleave on the console).
GATEWAY_LOOKUP = ("g=$(ip route 2>/dev/null | sed -n 's/^default via \\([^ ]*\\).*/\\1/p' | "
                  "head -n 1); ")
_PRELUDE = (
    GATEWAY_LOOKUP +
    f"p() {{ m=$(timeout {CONNECT_SECONDS + 2} nc -w {CONNECT_SECONDS} \"$2\" \"$3\" -e true "
    f"2>&1 </dev/null); echo \"{PROBE_MARK} $1 $? ${{2:-none}} $m\"; }}; ")


def probe_commands(probes: list[Probe], limit: int = COMMAND_LIMIT) -> list[str]:
    """Shell commands (busybox sh) that try every probe, all at once, each command shorter than
    `limit` characters (the board's line editor cuts longer lines)."""
    commands: list[str] = []
    body: list[str] = []

    def flush() -> None:
        if body:
            commands.append(_PRELUDE + " ".join(f"{b} &" for b in body) + " wait")
            body.clear()
    for i, probe in enumerate(probes):
        line = _probe_line(i, probe)
        if body and len(_PRELUDE) + sum(len(b) + 3 for b in body) + len(line) + 8 > limit:
            flush()
        body.append(line)
    flush()
    return commands


# exit codes that prove nothing: the board lacks `nc` or `timeout` (126, 127), or the attempt
# was killed rather than refused or timed out by nc itself (124, 137, 143)
INCONCLUSIVE = (124, 126, 127, 137, 143)


def parse_probe_output(text: str) -> dict[int, ProbeResult]:
    """Each probe's outcome from the board's output: exit code 0 is a connection that opened.
    A probe with no line (the board printed nothing for it), or whose attempt proves nothing
    (`INCONCLUSIVE`: no nc on the board), is absent: not proven unreachable."""
    out: dict[int, ProbeResult] = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 4)
        if len(parts) < 4 or parts[0] != PROBE_MARK or not parts[1].isdigit():
            continue
        rc = int(parts[2]) if parts[2].lstrip("-").isdigit() else -1
        if rc in INCONCLUSIVE:
            continue
        message = parts[4].strip() if len(parts) > 4 else ""
        out[int(parts[1])] = ProbeResult(reached=rc == 0, address=parts[3], message=message)
    return out


def findings(board: str, probes: list[Probe], results: Mapping[int, ProbeResult]
             ) -> list[Finding]:
    """Every endpoint behind a probe that reached it is a finding."""
    out = []
    for i, probe in enumerate(probes):
        r = results.get(i)
        if r is None or not r.reached:
            continue
        tried = f"{r.address}:{probe.port}" if probe.address == GATEWAY else probe.shown
        out += [Finding(board, ep, tried) for ep in probe.endpoints]
    return out


def unanswered(probes: list[Probe], results: Mapping[int, ProbeResult]) -> list[Probe]:
    """Probes the board printed no outcome for."""
    return [p for i, p in enumerate(probes) if i not in results]


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A plain text table, columns as wide as their widest cell."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [header, *rows]]
    return "\n".join(lines)
