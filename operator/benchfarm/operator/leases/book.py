"""The BoardLeases the operator knows, as records (`state.LeaseState`) kept in step with the API
server: a lease's status is written there first and only then mirrored here (`LeaseBook.write`),
and every change puts the lease again in its place in the queue and among the active
(`reindex`). The facade (`operator.leases.keeper`) and each of its parts (the grant, the keeping of granted
leases, the queue positions) read and write leases through it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from benchfarm.core.scheduling import queue as q
from benchfarm.operator.state.records import LeaseState, Owned, Registry, RunIndex

PLURAL = "boardleases"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BookRuntime(Registry, Protocol):
    """What the book needs of the operator's registry (`operator.runtime.Runtime` is one)."""

    @property
    def index(self) -> RunIndex: ...


class LeaseBook:
    def __init__(self, rt: BookRuntime) -> None:
        self.rt = rt
        self.leases: Owned[str, LeaseState] = Owned("lease")

    def reindex(self, lease: LeaseState) -> None:
        """On the owner's thread: the lease's place in the queue and among the active."""
        if self.leases.get(lease.key) is not lease:
            return
        self.rt.index.update_lease(lease, self.entry(lease) if lease.waiting else None)

    def entry(self, lease: LeaseState) -> q.QueueEntry:
        ceiling = self.rt.policy.for_namespace(lease.namespace).maxPriority
        fingerprint = (lease.generation, ceiling)
        if lease.queue_entry is None or lease.queue_entry[0] != fingerprint:
            sel = lease.spec.selector
            lease.queue_entry = (fingerprint, q.QueueEntry(
                lease.key, lease.namespace, min(lease.spec.priority, ceiling), lease.created,
                q.Selector.of(sel.deviceType, sel.labels, sel.board), kind=q.EntryKind.lease))
        return lease.queue_entry[1]

    def active(self) -> list[LeaseState]:
        """The leases holding a board, from any thread."""
        return self.rt.owner.call(lambda: list(self.rt.index.leases.values()))

    def write(self, ns: str, name: str, status: dict[str, Any]) -> bool:
        """The lease's status written (on the caller's thread), then taken (on the owner's)."""
        ok = self.rt.kube.patch_custom(PLURAL, ns, name, {"status": status}, status=True)
        if ok:
            self.rt.owner.call(self._wrote, q.lease_key(ns, name), status)
        return ok

    def _wrote(self, key: str, status: dict[str, Any]) -> None:
        lease = self.leases.get(key)
        if lease is not None:
            lease.status.update(status)
            self.reindex(lease)
