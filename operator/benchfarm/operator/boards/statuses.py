"""Board statuses written to the API by a thread of their own (`BoardStatuses`).

The latest state per board is written, so the scheduler never waits on those writes (at a
thousand boards turning over, a refresh wrote a few a second, each 50-200 ms under load, before
the round could give a freed board to the next run). The inventory (`operator.boards.inventory`) and the
health checks (`operator.boards.health`) ask for a board's status to be written with `sync`; it reads the
board's record on the owner's thread (`state.Registry`, all it needs of the operator): this
module imports neither the runtime nor the inventory.
"""

from __future__ import annotations

import logging
from typing import Any

from benchfarm.api.boards import HELD_PREFIX
from benchfarm.core.conditions import iso
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.state.pools import Workers
from benchfarm.operator.state.records import Boards, Owned, Registry

log = logging.getLogger("benchfarm")


class BoardStatuses:
    def __init__(self, rt: Registry, boards: Boards) -> None:
        self.rt = rt
        self.boards = boards                # the inventory's records
        self.publisher = Workers(max_workers=1, thread_name_prefix="board-status")
        # board -> the status to write next (the owner's)
        self.unpublished: Owned[str, dict[str, Any]] = Owned("board")

    def close(self) -> None:
        """The last statuses are written before the operator exits."""
        self.publisher.shutdown(wait=True)

    def sync(self, name: str) -> None:
        """The board's status, to be written (from any thread: read on the owner's)."""
        self.rt.owner.call(self._sync, name)

    def _sync(self, name: str) -> None:
        rec = self.boards.get(name)
        if rec is None:
            return
        status = {"deviceType": rec.device_type, "labels": rec.labels, "state": rec.state,
                  "run": rec.run or (f"{HELD_PREFIX}{rec.held_by_other}" if rec.held_by_other
                                     else None),
                  "consecutiveInfraFailures": rec.failures, "reason": rec.reason,
                  "quarantinedAt": iso(rec.quarantined_since) if rec.quarantined_since
                  else None,
                  **({"conditions": rec.conditions} if rec.conditions else {})}
        if status == rec.last_status:
            return
        rec.last_status = status
        queued = name in self.unpublished
        self.unpublished[name] = status
        if not queued:
            self.publisher.submit(self._publish, name)

    def _publish(self, name: str) -> None:
        """On the publisher's thread: the board's latest status, written."""
        status = self.rt.owner.call(self.unpublished.pop, name, None)
        if status is None:
            return
        try:
            self.rt.kube.patch_board_status(name, status)
        except API_FAILURES as exc:  # the API's outage: written again at the next refresh
            log.warning("could not write the status of board %s: %s", name, exc)
            self.rt.owner.call(self._unpublished, name, status)

    def _unpublished(self, name: str, status: dict[str, Any]) -> None:
        rec = self.boards.get(name)
        if rec is not None and rec.last_status == status:
            rec.last_status = None
