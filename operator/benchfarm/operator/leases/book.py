"""The BoardLeases the operator knows, as records (`state.LeaseState`) kept in step with the API
server: a lease's status is written there first and only then mirrored here (`LeaseBook.write`),
and every change puts the lease again in its place in the queue and among the active
(`reindex`). The facade (`operator.leases.keeper`) and each of its parts (the grant, the keeping of granted
leases, the queue positions) read and write leases through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from benchfarm.core.conditions import iso as iso
from benchfarm.core.scheduling import queue as q
from benchfarm.core.scheduling.fairness import FairnessPolicy
from benchfarm.operator.launch.interface import Launch
from benchfarm.operator.state.records import BoardRecord, LeaseState, Owned, Registry, RunIndex
from benchfarm.settings import Settings

PLURAL = "boardleases"


class LeaseBoards(Protocol):
    """What the leases room asks of the inventory (`operator.boards.inventory.Inventory`, a
    room beside it): its boards, when it last read the coordinator, and who holds one."""

    @property
    def boards(self) -> Mapping[str, BoardRecord]: ...

    last_refresh: float

    def claim(self, board: str, key: str) -> None: ...

    def free(self, board: str | None, key: str) -> None: ...

    def kinds_matching(self, selector: q.Selector) -> frozenset[str]: ...


class LeaseRuntime(Registry, Protocol):
    """What the leases room (the keeper, the book, the grant, the keeping of granted leases,
    the queue positions) needs of the operator's registry (`operator.runtime.Runtime` is one):
    the one Protocol between the room and the runtime, which it must not import."""

    @property
    def index(self) -> RunIndex: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def inventory(self) -> LeaseBoards: ...

    @property
    def inventory_known(self) -> bool: ...

    @property
    def fairness(self) -> FairnessPolicy: ...

    def launch_session(self, req: Launch) -> str: ...

    def board_free_at(self, board: str, now: float) -> float | None: ...


class LeaseBook:
    def __init__(self, rt: LeaseRuntime) -> None:
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
            lease.status = {**lease.status, **status}   # replaced, never changed in place (`typed`)
            self.reindex(lease)
