"""`benchfarm check`: is this installation wired up? The chart's `helm test` runs it in a pod.

One line per party a board session depends on, each checked the way a session uses it and from
where the command runs (a pod of the release, under the operator's ServiceAccount, with its
environment): the Kubernetes API serves benchfarm's resources; an operator leads (its Lease is
held and renewed); the labgrid coordinator answers and lists places, and the serial ports the
exporters advertise for them accept a connection from here (an exporter that advertises an
address this pod cannot reach fails every session on that board); the artifact bucket exists.
Exit code 0 when every line is `ok`, 1 otherwise. Nothing is written anywhere. `benchfarm check
--boards` audits the board network from the boards instead (`benchfarm.cli.boardcheck`).
"""

from __future__ import annotations

import argparse
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC
from typing import Any

from benchfarm.api.base import GROUP, VERSION
from benchfarm.settings import Settings

log = logging.getLogger(__name__)

STALE_S = 60     # a Lease not renewed for this long has no live leader behind it


def add_parsers(sub: Any) -> None:
    from benchfarm.cli.boardcheck import add_arguments
    chk = sub.add_parser("check", help="check this installation: API, leader, labgrid (places and "
                                       "their serial ports), store; with --boards, audit the "
                                       "board network from the boards; what `helm test` runs")
    add_arguments(chk)
    chk.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    if args.boards is not None:
        from benchfarm.cli.boardcheck import main as audit_boards
        return audit_boards(args.boards, args.endpoint, args.limit, args.settings)
    return main(args.settings)


def _api(settings: Settings) -> str:
    from benchfarm.kubeapi.client import Kube
    kube = Kube(settings, outage_budget=10)
    for plural in ("benchmarkruns", "boards", "testplans"):
        kube.custom.list_cluster_custom_object(GROUP, VERSION, plural, limit=1)
    return f"{GROUP}/{VERSION} benchmarkruns, boards, testplans served"


def _leader(settings: Settings) -> str:
    from kubernetes import client

    from benchfarm.kubeapi.client import Kube
    from benchfarm.kubeapi.leases import OPERATOR_LEASE
    namespace = settings.namespace
    lease = client.CoordinationV1Api(Kube(settings, outage_budget=10).api).read_namespaced_lease(
        OPERATOR_LEASE, namespace)
    spec = lease.spec
    holder, renewed = (spec.holder_identity, spec.renew_time) if spec else (None, None)
    if not holder or renewed is None:
        raise RuntimeError(f"Lease {namespace}/{OPERATOR_LEASE} is held by nobody")
    age = time.time() - renewed.replace(tzinfo=renewed.tzinfo or UTC).timestamp()
    if age > STALE_S:
        raise RuntimeError(f"Lease {namespace}/{OPERATOR_LEASE}: {holder} last renewed it "
                           f"{age:.0f} s ago")
    return f"{holder} leads (Lease renewed {max(age, 0):.0f} s ago)"


def _labgrid(settings: Settings) -> str:
    from benchfarm.lab.coordinator import Coordinator
    address = settings.coordinator
    # a name under benchfarm's own host: the one the operator's certificate may claim, where
    # the coordinator takes only certificates (the chart's check pod has the operator's)
    coordinator = Coordinator.from_settings(settings, user=f"check-{socket.gethostname()}",
                                            host="benchfarm")
    try:
        places = coordinator.places()
    finally:
        coordinator.close()
    if not places:
        raise RuntimeError(f"coordinator {address} lists no places")
    # a port is None while its exporter does not serve it (ser2net of a tty starts on acquire)
    ports = {name: (p.resources["NetworkSerialPort"]["host"], p.resources["NetworkSerialPort"]["port"])
             for name, p in places.items()
             if (p.resources.get("NetworkSerialPort") or {}).get("port") is not None}
    unreachable = []
    for name, (host, port) in sorted(ports.items()):
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
        except OSError as exc:
            unreachable.append(f"{name} ({host}:{port}: {exc.strerror or exc})")
    if unreachable:
        raise RuntimeError(f"coordinator {address}: {len(places)} places, serial ports not "
                           f"reachable from here: {', '.join(unreachable)}")
    return (f"coordinator {address}: {len(places)} places, {len(ports)} serial ports reachable "
            "from here")


def _store(settings: Settings) -> str:
    from minio import Minio

    from benchfarm.store.artifacts import StoreConfig
    cfg = StoreConfig.from_settings(settings)
    found = Minio(cfg.endpoint, access_key=cfg.access_key, secret_key=cfg.secret_key,
                  secure=cfg.secure).bucket_exists(cfg.bucket)
    if not found:
        raise RuntimeError(f"{cfg.endpoint}: no bucket {cfg.bucket}")
    return f"{cfg.endpoint}: bucket {cfg.bucket} exists"


CHECKS: list[tuple[str, Callable[[Settings], str]]] = [
    ("api", _api), ("leader", _leader), ("labgrid", _labgrid), ("store", _store)]


def main(settings: Settings) -> int:
    failed = 0
    for name, check in CHECKS:
        try:
            line = f"ok    {name}: {check(settings)}"
        except Exception as exc:  # every party's own error, said in one line
            log.debug("check %s failed", name, exc_info=True)
            failed += 1
            line = f"FAIL  {name}: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        print(line, flush=True)
    return 1 if failed else 0
