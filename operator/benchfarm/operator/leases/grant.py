"""A BoardLease's grant: its board held for a person, on a launch thread (never kopf's loop:
labgrid's client has a loop of its own).

`grant` acquires the place under the lease's own labgrid identity (`lease_identity`), allows the
person's labgrid user on it (labgrid's `allow`), and writes `status.place`, `status.expiresAt`
and `status.commands` in one guarded write (the lease must still be Pending). Where the operator
holds the lab's labgrid issuer and the lease carries the person's public key (`spec.publicKey`),
that write also carries `status.access` (`access`): a certificate that lets its holder be the
lease's user to the coordinator, and only until the lease expires
(`lab.labgrid_pki.person_access`), and an OpenSSH certificate for the same key that lets it
forward to that place's console and power through the exporter hosts' SSH, which the operator's
ssh_config names (`lab.lease_ssh`); an extension issues new ones. `hold` takes the place again
after a coordinator restart; `release` lets it go under the lease's identity.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from benchfarm.api.notifications import EventKind
from benchfarm.api.outcomes import Condition, LeasePhase, LeaseReason
from benchfarm.api.places import lease_identity
from benchfarm.core.conditions import set_condition
from benchfarm.core.notifications.events import lease_event
from benchfarm.core.policy import trust
from benchfarm.core.scheduling import durations
from benchfarm.errors import BoardBusy, InfraError
from benchfarm.kubeapi.client import PreconditionFailed
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.labgrid_pki import issuer_from, person_access, ssh_key_id
from benchfarm.lab.lease_ssh import exporter_hosts
from benchfarm.operator.leases.book import PLURAL, LeaseBook, LeaseRuntime, iso
from benchfarm.operator.state import metrics
from benchfarm.operator.state.records import LeaseState

log = logging.getLogger("benchfarm")


def commands(place: str, user: str, coordinator: str | None) -> dict[str, Any]:
    """What the person runs (`status.commands`): labgrid's client, as the lease's user. Where
    the coordinator takes only certificates (`coordinator` None), its address is not among them:
    `benchfarm lease --shell` points LG_COORDINATOR at its own forwarder, which connects with
    the lease's certificate (`status.access`)."""
    host, _, name = user.partition("/")
    env = {**({"LG_COORDINATOR": coordinator} if coordinator else {}),
           "LG_PLACE": place, "LG_HOSTNAME": host, "LG_USERNAME": name}
    return {"env": env,
            "console": f"labgrid-client -p {place} console",
            "powerCycle": f"labgrid-client -p {place} power cycle",
            "powerOn": f"labgrid-client -p {place} power on",
            "powerOff": f"labgrid-client -p {place} power off",
            "shell": " ".join(f"{k}={v}" for k, v in env.items())}


class LeaseGranter:
    def __init__(self, rt: LeaseRuntime, book: LeaseBook, forget: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`forget`: a granted lease's queue position is shown no more (`operator.leases.positions`)."""
        self.rt = rt
        self.book = book
        self.forget = forget
        self.clock = clock
        # the coordinator as a lease's person reaches it (default: the operator's own address)
        self.address = rt.settings.lease_coordinator or rt.coordinator.address
        self.client: Callable[[str, str], Coordinator] = rt.coordinator.as_identity
        # the lab's labgrid issuer: each granted lease's person gets a certificate of its own
        self.issuer = issuer_from(rt.settings)
        ca = rt.settings.labgrid_ca
        self.coordinator_ca = open(ca).read() if ca and self.issuer else ""

    @property
    def shown_address(self) -> str | None:
        """The coordinator's address as `status.commands` gives it: none where it takes only
        certificates (people reach it through `benchfarm lease --shell`'s forwarder)."""
        return None if self.issuer is not None else self.address

    def access(self, lease: LeaseState, expires: float, place: str | None = None
               ) -> dict[str, Any] | None:
        """`status.access` for the lease's person until `expires` on `place` (default: the
        lease's), or None (no issuer, no public key, or a key that is no key: said in an
        event)."""
        if self.issuer is None or not lease.spec.publicKey:
            return None
        try:
            hosts, known = exporter_hosts(self.rt.settings.ssh_config)
        except (OSError, subprocess.SubprocessError) as exc:   # the lab's own ssh_config
            log.warning("%s: the exporter hosts of %s: %s", lease.key, self.rt.settings.ssh_config,
                        exc)
            hosts, known = [], ""
        try:
            return person_access(self.issuer, self.coordinator_ca, self.address, lease.spec.user,
                                 lease.spec.publicKey, datetime.fromtimestamp(expires, UTC),
                                 place=place or str(lease.typed.place or ""),
                                 key_id=ssh_key_id(lease.namespace, lease.name, lease.uid),
                                 ssh_hosts=hosts, known_hosts=known)
        except ValueError as exc:
            self.rt.kube.event(lease.ref(), "Warning", "PublicKeyRefused",
                               f"spec.publicKey: {exc}; no certificate was issued")
            return None

    def hold(self, lease: LeaseState, place: str) -> None:
        """The place locked under the lease's own identity, and the person's user allowed on
        it (labgrid's acquire and allow): at the grant, and again after a coordinator restart."""
        host, user = lease_identity(lease.uid)
        client = self.client(host, user)
        try:
            client.acquire(place)
            client.allow(place, lease.spec.user)
        finally:
            client.close()

    def grant(self, lease: LeaseState, board: str) -> None:
        self.hold(lease, board)
        now = time.time()
        seconds = durations.parse(lease.spec.duration)
        signed = {"phase": LeasePhase.granted, "place": board, "grantedAt": iso(now),
                  "expiresAt": iso(now + seconds)}
        status = {**signed, "grantSignature": trust.sign_lease(
                      self.rt.signing_key, lease.uid, lease.spec.user, signed),
                  "queuePosition": None,
                  "estimatedStart": None, "commands": commands(board, lease.spec.user,
                                                               self.shown_address),
                  "access": self.access(lease, now + seconds, board),
                  "conditions": set_condition(
                      lease.typed.conditions, Condition.granted, "True", LeaseReason.granted,
                      f"{board} is {lease.spec.user}'s until {iso(now + seconds)}",
                      lease.generation)}
        try:
            written = self.rt.kube.guarded_status_write(lease.namespace, lease.name,
                                                        {"phase": LeasePhase.pending}, status,
                                                        PLURAL)
        except PreconditionFailed:
            written = None
        if not written:
            raise BoardBusy(f"{lease.key} changed while being granted (released or deleted)")
        self.rt.owner.call(self._granted, lease, status)
        metrics.LEASES_GRANTED.inc()
        metrics.QUEUE_WAIT.observe(max(0.0, now - lease.created))
        self.rt.kube.event(lease.ref(), "Normal", LeaseReason.granted,
                           f"{board} granted to {lease.spec.user} until {iso(now + seconds)}: "
                           f"{commands(board, lease.spec.user, self.shown_address)['shell']} "
                           f"labgrid-client -p {board} console")
        self.rt.notify(lease_event(
            EventKind.lease_granted, lease.ref()["metadata"], status, iso(now),
            f"{board} granted to {lease.spec.user} until {iso(now + seconds)}"))

    def _granted(self, lease: LeaseState, status: dict[str, Any]) -> None:
        lease.starting = False
        lease.status = {**lease.status, **status}
        lease.granted_at = self.clock()
        self.book.reindex(lease)
        self.forget(lease.key)

    def release(self, lease: LeaseState, board: str) -> None:
        host, user = lease_identity(lease.uid)
        try:
            self.rt.coordinator.release(board, holder=f"{host}/{user}")
        except InfraError as exc:   # an orphan the inventory releases later
            log.warning("%s: could not release %s: %s", lease.key, board, exc)
