"""`benchfarm check --boards [BOARD ...]`: can a board reach the lab's control plane?

Why it exists: whatever a board reaches, its tenant reaches (a suite, an inline shell command,
their own kernel): a board that can open the PDU, a console port, the coordinator, the API
server, the store or the database can power off, type into or rewrite another tenant's work. A
lab must give its boards a network of their own (the README's "The board network"); nothing else
checks that it did. This audits it from where it matters, the boards themselves.

For each idle board (or each board named) it runs a short session on the board, the way a health
check does: it acquires the place under an identity of its own (`api.places.
netcheck_identity`; a place someone holds — a run, a lease, a person — is never touched), boots
the board's own image to its shell with the device type's boot (`lab.session.BoardSession`),
tries every control endpoint the lab's configuration names (`core.policy.boardnet`: the API server, the
coordinator, the store, the database, the dashboard and the operator's probes from this
process's environment; every place's power switch, console and pdudaemon as the coordinator
lists them; the exporters' SSH as the lab's ssh_config leads to them), powers the board off and
releases it. Each endpoint a board opened a connection to is a finding. Exit code 0 without
findings, 1 with any, 2 when the lab could not be reached or a board could not be audited.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from benchfarm.api.boards import BoardState
from benchfarm.core.policy.boardnet import (
    BoardAudit,
    Endpoint,
    Probe,
    exporter_hosts,
    findings,
    host_port,
    parse_probe_output,
    place_endpoints,
    plan_probes,
    probe_commands,
    table,
    unanswered,
)
from benchfarm.errors import BenchfarmError, BoardBusy, InfraError
from benchfarm.logs import configure
from benchfarm.settings import Settings

if TYPE_CHECKING:
    from benchfarm.api.devicetype import DeviceType
    from benchfarm.api.places import PlaceInfo
    from benchfarm.lab.coordinator import Coordinator

log = logging.getLogger("benchfarm.cli.check")

PROBE_SECONDS = 30.0           # one probe command on the board (all its probes run at once)
#: Board states an audit of every idle board leaves alone
BUSY_STATES = (BoardState.busy, BoardState.maintenance)


@dataclass
class Lab:
    """What the audit knows of the lab: the places (coordinator), the Boards' states (API;
    empty when not reachable), every control endpoint and labgrid's `LG_*` variables (for the
    boards' environments: `lab.environment.labgrid_variables`)."""

    places: dict[str, PlaceInfo]
    states: dict[str, str]
    endpoints: list[Endpoint]
    labgrid_variables: dict[str, str]


def _env_endpoints(s: Settings) -> list[Endpoint]:
    """The control endpoints this process's configuration names (the operator's environment:
    the chart gives `helm test` the same)."""
    out: list[Endpoint] = []

    def add(value: str | None, what: str, default_port: int | None = None) -> None:
        hp = host_port(value, default_port) if value else None
        if hp is not None:
            out.append(Endpoint(hp[0], hp[1], what))
    add(_api_server(s), "Kubernetes API server", 443)
    add(s.coordinator, "labgrid coordinator", 20408)
    add(s.s3_endpoint, "artifact store (S3)", 443 if s.s3_secure else 80)
    if s.database_url:
        url = urlsplit(s.database_url)
        if url.hostname:          # a unix socket's database is not on the network
            add(f"{url.hostname}:{url.port or 5432}", "results database (PostgreSQL)")
    add(s.web_url, "dashboard (benchfarm web)")
    add(s.liveness, "operator liveness probe")
    if s.metrics_port:
        add(f"{s.metrics_addr if s.metrics_addr != '0.0.0.0' else '127.0.0.1'}:"
            f"{s.metrics_port}", "operator metrics")
    for item in filter(None, (e.strip() for e in s.control_endpoints.split(","))):
        _extra(item, out)
    return out


def _extra(item: str, out: list[Endpoint]) -> None:
    """`HOST:PORT[=what]` of --endpoint / BENCHFARM_CONTROL_ENDPOINTS: what the lab knows of
    its own network besides benchfarm's configuration (a BMC, a switch's management port)."""
    where, _, what = item.partition("=")
    hp = host_port(where)
    if hp is None:
        raise SystemExit(f"benchfarm check --boards: endpoint {item!r} is not HOST:PORT[=what]")
    out.append(Endpoint(hp[0], hp[1], what or "a lab endpoint (named on the command line)"))


def _api_server(s: Settings) -> str | None:
    """The API server this process talks to (in-cluster, or its kubeconfig's)."""
    if s.kubernetes_service_host:
        return f"{s.kubernetes_service_host}:{s.kubernetes_service_port}"
    from kubernetes import client, config
    try:
        config.load_kube_config(config_file=s.kubeconfig or None)
        return str(client.Configuration.get_default_copy().host)
    except (config.ConfigException, OSError):  # no kubeconfig: a lab checked without Kubernetes
        return None


def _ssh_endpoint(host: str, ssh_config: str) -> Endpoint:
    """An exporter host's SSH, as the lab's ssh_config (BENCHFARM_SSH_CONFIG) leads to it."""
    cmd = ["ssh", "-G", host]
    if ssh_config:
        cmd[1:1] = ["-F", ssh_config]
    name, port = host, 22
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        opts = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
        name, port = opts.get("hostname", host), int(opts.get("port", "22"))
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass          # no ssh here: the default port
    return Endpoint(name, port, f"SSH of exporter host {host}")


def _resolve(name: str) -> list[str]:
    try:
        return [str(a[4][0]) for a in socket.getaddrinfo(name, None, socket.AF_INET,
                                                         socket.SOCK_STREAM)]
    except OSError:
        return []


def read_lab(coordinator: Coordinator, settings: Settings) -> Lab:
    """The places, the Boards' states and every control endpoint (raises the coordinator's
    Outage when it cannot be reached)."""
    places = coordinator.places()
    states: dict[str, str] = {}
    from kubernetes.config import ConfigException

    from benchfarm.kubeapi.client import API_FAILURES, Kube
    from benchfarm.lab.environment import labgrid_variables
    unread: tuple[type[Exception], ...] = (*API_FAILURES, ConfigException, OSError)
    try:
        for body in Kube(settings, outage_budget=5).list_cluster("boards"):
            states[body["metadata"]["name"]] = (body.get("status") or {}).get("state") or ""
    except unread as exc:  # the audit itself needs only the coordinator
        print(f"note: Boards not read from the Kubernetes API ({type(exc).__name__}: "
              f"{' '.join(str(exc).split())[:160]}); only the places' locks are heeded",
              flush=True)
    endpoints = _env_endpoints(settings)
    for name, info in sorted(places.items()):
        endpoints += place_endpoints(name, info.resources)
    endpoints += [_ssh_endpoint(h, settings.ssh_config) for h in sorted(exporter_hosts(
        info.resources for info in places.values()))]
    return Lab(places, states, endpoints, labgrid_variables(settings))


def audit_board(c: Coordinator, name: str, lab: Lab, probes: list[Probe],
                device_types: dict[str, DeviceType]) -> BoardAudit:
    """One board: acquire, boot, probe, power off, release. Never a place someone holds."""
    from benchfarm.lab.board import SerialLog
    from benchfarm.lab.session import BoardSession
    t0 = time.monotonic()
    audit = BoardAudit(board=name, probes=len(probes))
    info = lab.places[name]
    dtype = device_types.get(info.tags.get("device_type", ""))
    if dtype is None:
        audit.error = f"lab: device type {info.tags.get('device_type')!r} unknown here " \
                      "(BENCHFARM_DEVICE_TYPES)"
        return audit
    try:
        c.acquire(name)
    except BoardBusy as exc:
        audit.skipped = f"held ({exc})"
        return audit
    except InfraError as exc:
        audit.error = f"{exc.party}: {exc}"[:300]
        return audit
    ident = c.identity

    def guard() -> None:       # before every power operation: still ours
        holder = c.holder(name)
        if holder != ident:
            raise BoardBusy(f"place {name} is now held by {holder}; not touching it")
    try:
        session = BoardSession(name, info.resources, dtype,
                               c.session(),
                               deadline=time.monotonic() + dtype.health_check_seconds,
                               serial_log=SerialLog(limit=256 * 1024), guard=guard,
                               labgrid_variables=lab.labgrid_variables)
        try:
            t_boot = time.monotonic()
            session.boot()
            t_probe = time.monotonic()
            audit.boot_seconds = t_probe - t_boot
            output = ""
            for command in probe_commands(probes):
                output += session.board.run(command, timeout=PROBE_SECONDS).output + "\n"
            audit.probe_seconds = time.monotonic() - t_probe
        finally:
            session.power_off_and_close()
        results = parse_probe_output(output)
        audit.findings = findings(name, probes, results)
        missing = unanswered(probes, results)
        if missing:
            audit.error = (f"board: no outcome for {len(missing)} probe(s) "
                           f"({', '.join(p.shown for p in missing[:5])}; does its image have "
                           "busybox nc and timeout?): not proven closed")
    except BenchfarmError as exc:
        party = exc.party if isinstance(exc, InfraError) else "audit"
        audit.error = f"{party}: {getattr(exc, 'reason', type(exc).__name__)}: {exc}"[:300]
    except Exception as exc:  # labgrid's own errors: the board or its exporter
        log.debug("audit of %s failed", name, exc_info=True)
        audit.error = f"board: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
    finally:
        try:
            c.release(name)
        except Exception as exc:  # said, and the place named: someone must release it
            log.debug("releasing %s failed", name, exc_info=True)
            audit.error = (audit.error or "") + f" (lab: could not release {name}: {exc})"
        audit.seconds = time.monotonic() - t0
    return audit


def main(boards: list[str], extra: list[str], limit: int, settings: Settings) -> int:
    from benchfarm.api.places import netcheck_identity
    from benchfarm.lab.coordinator import Coordinator
    from benchfarm.lab.devicetypes import load_device_types
    configure(logging.WARNING, command="check --boards")
    address = settings.coordinator
    host, user = netcheck_identity(socket.gethostname(), os.getpid())
    coordinator = Coordinator.from_settings(settings, host=host, user=user, timeout=10)
    try:
        try:
            lab = read_lab(coordinator, settings)
        except InfraError as exc:
            print(f"benchfarm check --boards: lab unreachable: {exc}", file=sys.stderr)
            return 2
        for item in extra:
            _extra(item, lab.endpoints)
        if not lab.places:
            print(f"no boards: the coordinator {address} lists no places; nothing to audit")
            return 0
        unknown = [b for b in boards if b not in lab.places]
        if unknown:
            print(f"benchfarm check --boards: no place {', '.join(unknown)} at the coordinator "
                  f"{address} (places: {', '.join(sorted(lab.places)) or 'none'})",
                  file=sys.stderr)
            return 2
        device_types = load_device_types(settings.device_types)
        probes = plan_probes(lab.endpoints, _resolve)
        chosen = boards or sorted(lab.places)
        print(f"board network audit: {len(chosen)} board(s), {len(lab.endpoints)} control "
              f"endpoints, {len(probes)} connections tried from each board", flush=True)
        audits: list[BoardAudit] = []
        for name in chosen:
            state = lab.states.get(name, "")
            done = sum(1 for a in audits if not a.skipped)
            if not lab.places[name].free or (not boards and state in BUSY_STATES):
                holder = lab.places[name].acquired or lab.places[name].reserved_by or state
                audit = BoardAudit(board=name, skipped=f"not idle ({holder})")
            elif limit and done >= limit:
                audit = BoardAudit(board=name, skipped=f"--limit {limit} reached")
            else:
                audit = audit_board(coordinator, name, lab, probes, device_types)
            audits.append(audit)
            print(_line(audit), flush=True)
    finally:
        coordinator.close()
    return _verdict(audits, named=bool(boards))


def _line(a: BoardAudit) -> str:
    if a.skipped:
        return f"  {a.board}: skipped, {a.skipped}"
    if a.error and not a.findings:
        return f"  {a.board}: NOT AUDITED ({a.error}) [{a.seconds:.1f} s]"
    verdict = f"{len(a.findings)} endpoint(s) reached" if a.findings else "nothing reached"
    return f"  {a.board}: {verdict} of {a.probes} tried [{a.seconds:.1f} s: boot " \
        f"{a.boot_seconds:.1f} s, probes {a.probe_seconds:.1f} s]" + \
        (f"; {a.error}" if a.error else "")


def _verdict(audits: list[BoardAudit], named: bool) -> int:
    found = [f for a in audits for f in a.findings]
    audited = [a for a in audits if not a.skipped and not a.error]
    failed = [a for a in audits if a.error or (named and a.skipped and "--limit" not in a.skipped)]
    if found:
        print(f"\nFINDINGS: {len(found)} lab control endpoint(s) answered a board\n")
        print(table([f.row() for f in found], ("board", "endpoint", "reached at", "what")))
        return 1
    if failed:
        print(f"\nno findings, but {len(failed)} board(s) not audited: "
              f"{', '.join(a.board for a in failed)}")
        return 2
    if not audited:
        print("\nno idle board to audit: nothing was checked")
        return 2
    print(f"\nok: no lab control endpoint answered any of {len(audited)} board(s)")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--boards", nargs="*", metavar="BOARD", default=None,
                        help="audit the board network instead: from each idle board (or each "
                             "board named), try every lab control endpoint; exit 1 if a board "
                             "reached any")
    parser.add_argument("--limit", type=int, default=0, metavar="N",
                        help="with --boards: audit at most N boards (0: all)")
    parser.add_argument("--endpoint", action="append", default=[], metavar="HOST:PORT[=WHAT]",
                        help="with --boards: another control endpoint to try (also "
                             "BENCHFARM_CONTROL_ENDPOINTS, comma-separated)")
