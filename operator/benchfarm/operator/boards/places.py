"""The coordinator's places read for the owner, and new places' Boards created, on a launch
thread (`PlaceReader`), so the owner's thread waits for neither.

A read of the coordinator (`Coordinator.changes`: a sync with labgrid's coordinator) takes a few
ms, and up to the client's timeout while the coordinator is away; a lab that adds boards creates
one Board each (an API round trip). On the owner's thread either would hold up every round and
every watch event behind it. So the inventory's refresh starts a read here and applies the one
that came back (`take`); the places' Boards are created here and their uids handed back
(`created`). Only the operator's first refresh, in its recovery, reads and creates at once
(`read_now`): nothing is scheduled before it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from benchfarm.api.places import PlaceInfo
from benchfarm.errors import InfraError
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.state import metrics
from benchfarm.operator.state.records import Registry

log = logging.getLogger("benchfarm")

Places = tuple[dict[str, PlaceInfo], set[str], float]   # every place, those changed, read at


class PlaceReader:
    def __init__(self, rt: Registry, clock: Callable[[], float] = time.monotonic) -> None:
        self.rt = rt
        self.clock = clock
        self.reading = False           # a read is on a launch thread
        self.read: Places | None = None            # the last read back, not yet applied
        self.creating: set[str] = set()            # places whose Board is being created
        self.created: dict[str, str] = {}          # place -> its new Board's uid, to apply

    def read_now(self) -> Places | None:
        """On the owner's thread, waiting: the recovery's first read (None: the coordinator is
        away)."""
        try:
            return self._changes()
        except InfraError as exc:
            log.warning("labgrid coordinator unavailable: %s", exc)
            return None

    def read_soon(self) -> None:
        """On the owner's thread: a read started on a launch thread, unless one is under way;
        the owner is woken when it is back."""
        if self.reading:
            return
        self.reading = True
        self.rt.launches.submit(self._read)

    def take(self) -> Places | None:
        """On the owner's thread: the read that came back since the last `take`, if one did."""
        read, self.read = self.read, None
        return read

    def _changes(self) -> Places:
        at = self.clock()
        t0 = time.perf_counter()
        places, changed = self.rt.coordinator.changes()
        metrics.PLACES.set(time.perf_counter() - t0)
        return places, changed, at

    def _read(self) -> None:
        read: Places | None = None
        try:
            read = self._changes()
        except InfraError as exc:
            log.warning("labgrid coordinator unavailable: %s", exc)
        finally:
            self.rt.owner.post(self._read_back, read)

    def _read_back(self, read: Places | None) -> None:
        self.reading = False
        if read is not None:
            self.read = read
            self.rt.wake()

    # -- new places' Boards ----------------------------------------------------------------
    def create_now(self, name: str, device_type: str) -> str | None:
        """On the owner's thread, waiting (the recovery's first refresh): the new Board's uid
        (None: the API was away; the next refresh that walks the place tries again)."""
        try:
            return self._create(name, device_type)
        except API_FAILURES as exc:
            log.warning("could not create Board %s: %s", name, exc)
            return None

    def create_soon(self, name: str, device_type: str) -> None:
        """On the owner's thread: the place's Board created on a launch thread; its uid is in
        `created` for the refresh after (which walks it)."""
        if name in self.creating:
            return
        self.creating.add(name)
        self.rt.launches.submit(self._create_apart, name, device_type)

    def _create(self, name: str, device_type: str) -> str:
        body = self.rt.kube.create_board(name, {"benchfarm.io/device-type": device_type})
        return str((body.get("metadata") or {}).get("uid", ""))

    def _create_apart(self, name: str, device_type: str) -> None:
        uid = self.create_now(name, device_type)
        self.rt.owner.post(self._board_created, name, uid)

    def _board_created(self, name: str, uid: str | None) -> None:
        self.creating.discard(name)
        if uid is not None:
            self.created[name] = uid
            self.rt.wake()
