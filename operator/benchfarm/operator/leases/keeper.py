"""BoardLeases: people through the same fair queue as runs, and out again on time.

A BoardLease waits in the scheduler's one queue (`core.scheduling.queue`, an entry of kind `lease`), under
its namespace's priority ceiling, round-robin turn and board limit; while it waits, its position
and estimated start are written to its status (`operator.leases.positions`). When a round gives it a
board, `grant` (on a launch thread, never kopf's loop: labgrid's client has a loop of its own)
holds the place under the lease's own labgrid identity for the person, and writes the grant and
the person's access in one guarded write (`operator.leases.grant`); on any failure the board is freed
and the lease waits again.

`tend`, after every round, keeps granted leases (`operator.leases.tending`): an extension, the warning
before the end, the end (the launcher starts its end session, since the operator never drives a
board), a lock the coordinator forgot. The session's `status.leaseEnd` frees the board at once
(the scheduler is woken). Everything a lease needs to go on is in its status, so a restarted
operator adopts granted and ending leases as it finds them.

Every status field the operator acts on (phase, place, grant and expiry, and the person's user)
is covered by `status.grantSignature` (`core.policy.trust.sign_lease`), written with each change of
them (grant, extension, end). A status someone else rewrote (a new expiry, Granted again,
another board) does not verify: a lease the operator knows it granted ends at once (its end
session powers the board off and releases it; `StatusNotTrusted`), and one it never granted is
Ended with no board claimed or touched.

`Leases` is what the operator calls: the registry kopf feeds (`observe`, `recover`), admission
and deletion are here; the leases' records and their one write are `operator.leases.book`'s. What the
room needs of the operator is `operator.leases.book.LeaseRuntime` (its one Protocol: what each
of those modules needs, together); no module of it imports the runtime or the inventory.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError

from benchfarm.api.labgridusers import user_problem
from benchfarm.api.leases import BoardLeaseSpec, BoardLeaseStatus
from benchfarm.api.outcomes import Condition, LeaseEnd, LeasePhase, LeaseReason
from benchfarm.core.conditions import now_iso, set_condition
from benchfarm.core.policy import trust
from benchfarm.core.scheduling import durations, queue as q
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.leases.book import PLURAL as PLURAL, LeaseBook, LeaseRuntime, iso as iso
from benchfarm.operator.leases.grant import LeaseGranter, commands as commands
from benchfarm.operator.leases.positions import (
    POSITIONS_EVERY as POSITIONS_EVERY,
    LeasePositions,
)
from benchfarm.operator.leases.tending import (
    END_GRACE as END_GRACE,
    LeaseTender,
    _end_reason as _end_reason,
)
from benchfarm.operator.state.records import LeaseState, ts

log = logging.getLogger("benchfarm")

GRANT_RETRY = 2.0         # seconds before a lease whose grant failed may be tried again


def trusted(key: bytes, uid: str, user: str, status: dict[str, Any]) -> bool:
    return trust.lease_trusted(key, uid, user, status)


class Leases:
    def __init__(self, rt: LeaseRuntime) -> None:
        self.rt = rt
        self.book = LeaseBook(rt)
        self.leases = self.book.leases      # by key: what the operator knows of each lease
        clock = time.monotonic
        self.queue = LeasePositions(rt, self.book, clock)
        self.granter = LeaseGranter(rt, self.book, self.queue.forget, clock)
        self.tender = LeaseTender(rt, self.book, self.granter, clock)

    # -- registry (fed by kopf, on the owner's thread) ------------------------------------------
    def observe(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = q.lease_key(meta["namespace"], meta["name"])
        if event_type == "DELETED":
            lease = self.leases.pop(key, None)
            self.rt.index.forget(key)
            if lease is not None:
                self.rt.inventory.free(lease.typed.place, key)
            return
        try:
            spec = BoardLeaseSpec(**(body.get("spec") or {}))
        except ValidationError:  # refused at admission by the schema; ignored here
            return
        status = dict(body.get("status") or {})    # as signed: the signature is over it
        seen = BoardLeaseStatus.of(status)
        forged = seen.phase in (LeasePhase.granted, LeasePhase.releasing) and \
            not trusted(self.rt.signing_key, meta["uid"], spec.user, status)
        lease = self.leases.get(key)
        ours = lease is not None and lease.uid == meta["uid"]
        # a lease we granted (what we hold of its status is what we signed): it keeps that
        # status and ends; one we never granted is Ended, never claimed nor powered off
        tampered = forged and ours and lease is not None and lease.phase in (
            LeasePhase.granted, LeasePhase.releasing)
        if forged and not tampered:
            status = {**status, "phase": LeasePhase.ended}
        if lease is not None and ours:
            lease.spec, lease.generation = spec, meta.get("generation", 1)
            lease.deleting = bool(meta.get("deletionTimestamp"))
            if not tampered and not (lease.starting and
                                     seen.phase == LeasePhase.pending):
                lease.status = status
        else:
            lease = self.leases[key] = LeaseState(
                meta["namespace"], meta["name"], meta["uid"], meta.get("generation", 1),
                ts(meta.get("creationTimestamp")), spec, status,
                deleting=bool(meta.get("deletionTimestamp")))
        self.reindex(lease)
        if forged:
            act = not lease.busy
            lease.busy = True
            if act:
                self.rt.launches.submit(
                    self.tender.tampered if tampered else self.tender.untrusted, lease)
            return
        place = seen.place
        if place and lease.phase in (LeasePhase.granted, LeasePhase.releasing):
            # adopted after a restart, too; never from another holder: a replayed old status
            # takes nothing
            rec = self.rt.inventory.boards.get(place)
            other = rec.run if rec is not None and rec.run not in (None, key) else None
            if other is None:
                self.rt.inventory.claim(place, key)
            if other is not None:
                log.warning("%s: its status names %s, which %s holds; not claimed for it", key,
                            place, other)
        end = seen.leaseEnd
        act = not lease.busy and (
            (end is not None and lease.phase == LeasePhase.releasing) or
            (lease.phase == LeasePhase.pending and lease.spec.release and not lease.starting))
        lease.busy = lease.busy or act
        if act and end is not None:
            self.rt.inventory.free(place, key)           # the next run may take it now
            self.rt.launches.submit(self.tender.ended, lease, end)
        elif act:                                        # released before it was granted
            self.rt.launches.submit(self.tender.ended, lease, LeaseEnd(
                poweredOff=False, message="released before it was granted", at=now_iso()))
        self.rt.wake()

    def reindex(self, lease: LeaseState) -> None:
        """On the owner's thread: the lease's place in the queue and among the active."""
        self.book.reindex(lease)

    def recover(self) -> None:
        for body in self.rt.kube.list_custom_all(PLURAL):
            self.observe("ADDED", body)

    def active(self) -> list[LeaseState]:
        return self.book.active()

    # -- admission ----------------------------------------------------------------------------
    def admit(self, body: dict[str, Any]) -> None:
        """A new lease: queued, or refused when the LabPolicy does not allow it (the admission
        policy refuses it at apply already; this is for a policy changed since, or none)."""
        meta = body["metadata"]
        if (body.get("status") or {}).get("phase"):
            return
        ns, name = meta["namespace"], meta["name"]
        spec = BoardLeaseSpec(**body["spec"])
        allowed = self.rt.policy.for_namespace(ns).leases
        seconds = durations.parse(spec.duration)
        ref = {"apiVersion": "benchfarm.io/v1alpha1", "kind": "BoardLease", "metadata": meta}
        sel = spec.selector
        fits = not self.rt.inventory_known or bool(self.rt.inventory.kinds_matching(
            q.Selector.of(sel.deviceType, sel.labels, sel.board)))
        # the API server binds the user to its creator and refuses the lab's (`api.crdgen`);
        # a cluster without that policy still never gets a lab identity allowed on a place
        lab_user = user_problem(spec.user, None)
        if lab_user or not allowed.allowed or seconds > allowed.maxLeaseSeconds or not fits:
            reason = LeaseReason.user_not_allowed if lab_user else \
                LeaseReason.not_allowed if not allowed.allowed else \
                LeaseReason.too_long if seconds > allowed.maxLeaseSeconds else \
                LeaseReason.no_matching_board
            message = {
                LeaseReason.user_not_allowed: lab_user or "",
                LeaseReason.not_allowed:
                    f"namespace {ns} may not lease boards (LabPolicy leases.allowed)",
                LeaseReason.too_long:
                    f"duration {spec.duration} ({seconds} s) is longer than namespace {ns} may "
                    f"lease a board: at most {allowed.maxLeaseSeconds} s (LabPolicy "
                    "leases.maxLeaseSeconds)",
                LeaseReason.no_matching_board:
                    "no board in the lab matches the selector "
                    f"{sel.model_dump(exclude_none=True)}"}[reason]
            self.book.write(ns, name, {"phase": LeasePhase.refused, "conditions": set_condition(
                None, Condition.granted, "False", reason, message, meta.get("generation"))})
            self.rt.kube.event(ref, "Warning", reason, message)
            return
        message = f"waiting for a board ({spec.duration}, for {spec.user})"
        self.book.write(ns, name, {"phase": LeasePhase.pending, "conditions": set_condition(
            None, Condition.granted, "False", LeaseReason.queued, message, meta.get("generation"))})
        self.rt.kube.event(ref, "Normal", LeaseReason.queued, message)
        self.rt.wake()

    # -- grant (a launch thread) --------------------------------------------------------------
    def grant(self, lease: LeaseState, board: str) -> None:
        """Acquire the place as the lease, allow the person, write the grant; on any failure
        the board is freed and the lease waits again."""
        try:
            self.granter.grant(lease, board)
        except API_FAILURES as exc:
            log.warning("%s: could not grant %s: %s", lease.key, board, exc)
            self.granter.release(lease, board)
            time.sleep(GRANT_RETRY)     # the board stays taken meanwhile: no retry storm
            released = self.rt.owner.call(self._not_granted, lease)
            self.rt.inventory.free(board, lease.key)
            if released:
                self.tender.ended(lease, LeaseEnd(poweredOff=False, at=now_iso(),
                                                  message="released before it was granted"))

    def _not_granted(self, lease: LeaseState) -> bool:
        """The lease waits again; True if its release was asked meanwhile (it ends now)."""
        lease.starting = False
        self.reindex(lease)
        released = lease.spec.release and not lease.busy
        lease.busy = lease.busy or released
        return released

    # -- keeping granted leases (the scheduler's thread, after each round) ---------------------
    def tend(self, now: float) -> None:
        """Granted and ending leases kept (`operator.leases.tending`), then the waiting ones'
        positions written (`operator.leases.positions`)."""
        self.tender.tend(now)
        self.queue.update(now)

    def next_wake(self, now: float) -> float | None:
        """Seconds until the next granted lease's warning or end is due (None: none is)."""
        return self.tender.next_wake(now)

    # -- deletion (kopf's finalizer) -----------------------------------------------------------
    def deleting(self, key: str) -> bool:
        """The lease is being deleted: end it; True once it holds no board any more. Called by
        kopf's delete handler, during which kopf holds back the lease's other events: its end
        session's `leaseEnd` is read here."""
        lease, done = self.rt.owner.call(self._deleting, key)
        if lease is None:
            return True
        if lease.phase == LeasePhase.releasing and not lease.busy:
            body = self.rt.kube.get_custom(PLURAL, lease.namespace, lease.name)
            if body is not None:
                self.rt.owner.call(self.observe, "MODIFIED", body)
        self.rt.wake()
        return done

    def _deleting(self, key: str) -> tuple[LeaseState | None, bool]:
        lease = self.leases.get(key)
        if lease is None:
            return None, True
        lease.deleting = True
        self.reindex(lease)
        return lease, not lease.active or lease.phase == LeasePhase.ended
