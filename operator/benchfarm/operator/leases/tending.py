"""Granted BoardLeases kept, and ended on time (`LeaseTender.tend`, on the owner's thread after
every round, decides what is due; its writes and the end itself are made on a launch thread).

An extension (a longer `spec.duration`, up to the LabPolicy's `leases.maxLeaseSeconds`) moves
`expiresAt`; `leaseWarningSeconds` before the end a `LeaseExpiring` warning event; at the end
(expiry, `spec.release`, deletion) the lease goes Releasing and the launcher starts its end
session (`session.leaseend`: power off through the place's power driver, release), since the
operator never drives a board. The session's `status.leaseEnd` frees the board at once (the
scheduler is woken; `operator.leases.keeper` reads it), and `ended` writes the lease Ended. A lock the
coordinator forgot (a restart) is taken back and the person allowed again. Every change of the
signed status fields is written with its `status.grantSignature` (`core.policy.trust.sign_lease`); a
lease whose status someone else rewrote ends at once (`tampered`), one the operator never
granted is Ended with no board claimed or touched (`untrusted`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from benchfarm.api.notifications import EventKind
from benchfarm.api.outcomes import Condition, LeaseEnd, LeasePhase, LeaseReason, Refusal
from benchfarm.core.conditions import now_iso, set_condition
from benchfarm.core.notifications.events import lease_event
from benchfarm.core.policy import trust
from benchfarm.core.scheduling import durations
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.operator.launch.interface import LAUNCH_FAILURES, Launch
from benchfarm.operator.leases.book import LeaseBook, LeaseRuntime, iso
from benchfarm.operator.state import metrics
from benchfarm.operator.state.records import LeaseState, ts

log = logging.getLogger("benchfarm")

END_GRACE = 30.0          # seconds an end session has to power off and release


def _end_reason(raw: Any) -> LeaseReason | Refusal:
    """`status.endReason` as the operator wrote it (anything else: released)."""
    if raw == Refusal.statusTampered:
        return Refusal.statusTampered
    try:
        return LeaseReason(raw or LeaseReason.released)
    except ValueError:
        return LeaseReason.released


# -- what a lease has due: read on the owner's thread, and again by the writes on a launch thread
def extension(lease: LeaseState) -> float | None:
    """The expiry spec.duration asks for, when it is not the one granted (and was not refused
    at this generation)."""
    st = lease.typed
    wanted = ts(st.grantedAt) + durations.parse(lease.spec.duration)
    if wanted != ts(st.expiresAt) and st.refusedGeneration != lease.generation:
        return wanted
    return None


def end_reason(lease: LeaseState, now: float, expires: float) -> LeaseReason | None:
    return LeaseReason.deleted if lease.deleting else \
        LeaseReason.released if lease.spec.release else \
        LeaseReason.expired if now >= expires else None


def warning_due(lease: LeaseState, now: float, expires: float, warning_s: float) -> bool:
    st = lease.typed
    return now >= expires - warning_s and st.warnedFor != st.expiresAt


def granted_due(lease: LeaseState, now: float, warning_s: float) -> bool:
    expires = ts(lease.typed.expiresAt)
    return extension(lease) is not None or end_reason(lease, now, expires) is not None or \
        warning_due(lease, now, expires, warning_s)


def ending_due(lease: LeaseState, mono: float) -> bool:
    """Its end session is to be launched (again, after a restart), or is over its grace; not
    once it reported (`observe` acts on that)."""
    return lease.typed.leaseEnd is None and \
        (lease.ending_since is None or mono - lease.ending_since >= END_GRACE)


class LeaseHolds(Protocol):
    """What the keeping asks of the grant (`operator.leases.grant.LeaseGranter` is one): the person's
    access again, the place held again, the place let go."""

    def access(self, lease: LeaseState, expires: float) -> dict[str, str] | None: ...

    def hold(self, lease: LeaseState, place: str) -> None: ...

    def release(self, lease: LeaseState, board: str) -> None: ...


class LeaseTender:
    def __init__(self, rt: LeaseRuntime, book: LeaseBook, holds: LeaseHolds,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rt = rt
        self.book = book
        self.holds = holds
        self.clock = clock

    def tend(self, now: float) -> None:
        """On the owner's thread, after every round: each lease with something due (an
        extension, its end, its warning, a lock taken back) is marked busy and the writes go to
        a launch thread (`_apart`); the owner makes no API round trip for a lease."""
        for lease in self.book.active():
            if lease.busy or lease.starting:
                continue
            try:
                if lease.phase == LeasePhase.granted:
                    if granted_due(lease, now, self.rt.policy.leaseWarningSeconds):
                        self._apart(lease, self._tend_granted, lease, now)
                    else:                # nothing else due: its lock, if the coordinator forgot
                        self._retake_if_forgotten(lease)
                elif lease.phase == LeasePhase.releasing and ending_due(lease, self.clock()):
                    self._apart(lease, self._tend_ending, lease)
            except Exception:       # one lease's bug must not stop the others
                metrics.bug(log, "%s: keeping the lease failed; again next round", lease.key)
        metrics.LEASES_ACTIVE.set(sum(1 for lease in self.book.active()
                                      if lease.phase == LeasePhase.granted))

    def _apart(self, lease: LeaseState, act: Callable[..., None], *args: Any) -> None:
        """`act` on a launch thread, the lease busy until it is done (an outage: again at the
        next round)."""
        lease.busy = True

        def run() -> None:
            try:
                act(*args)
            except API_FAILURES as exc:
                log.warning("%s: keeping the lease failed (%s); again next round", lease.key, exc)
            finally:
                self.rt.owner.call(setattr, lease, "busy", False)
        self.rt.launches.submit(run)

    def _tend_granted(self, lease: LeaseState, now: float) -> None:
        st = lease.typed
        expires = ts(st.expiresAt)
        wanted = extension(lease)
        if wanted is not None:
            expires = self._extend(lease, wanted, expires)
        reason = end_reason(lease, now, expires)
        if reason is not None:
            self._end(lease, reason)
            return
        if warning_due(lease, now, expires, self.rt.policy.leaseWarningSeconds):
            left = max(0, round(expires - now))
            self.book.write(lease.namespace, lease.name, {"warnedFor": st.expiresAt})
            message = (f"{st.place} is powered off and released in {left} s "
                       f"(at {st.expiresAt}); raise spec.duration to extend")
            self.rt.kube.event(lease.ref(), "Warning", LeaseReason.expiring, message)
            self.rt.notify(lease_event(EventKind.lease_ending, lease.ref()["metadata"],
                                              lease.status, iso(now), message))

    def _retake_if_forgotten(self, lease: LeaseState) -> None:
        rec = self.rt.inventory.boards.get(lease.typed.place or "")
        if rec is not None and rec.holder is None and \
                self.rt.inventory.last_refresh > lease.granted_at:
            lease.busy = True            # the coordinator forgot the lock: take it back
            self.rt.launches.submit(self._retake, lease)

    def _extend(self, lease: LeaseState, wanted: float, expires: float) -> float:
        """spec.duration changed: the new expiry, within the namespace's maximum."""
        longest = self.rt.policy.for_namespace(lease.namespace).leases.maxLeaseSeconds
        seconds = durations.parse(lease.spec.duration)
        if seconds > longest:
            message = (f"duration {lease.spec.duration} ({seconds} s) is over this namespace's "
                       f"maximum ({longest} s, LabPolicy leases.maxLeaseSeconds); the lease "
                       f"still ends at {lease.typed.expiresAt}")
            self.book.write(lease.namespace, lease.name, {"refusedGeneration": lease.generation})
            self.rt.kube.event(lease.ref(), "Warning", LeaseReason.too_long, message)
            return expires
        new = iso(wanted)
        access = self.holds.access(lease, wanted)
        self.book.write(lease.namespace, lease.name, {
            **self._signed(lease, expiresAt=new), **({"access": access} if access else {}),
            "conditions": set_condition(
                lease.typed.conditions, Condition.granted, "True", LeaseReason.extended,
                f"{lease.typed.place} is {lease.spec.user}'s until {new}",
                lease.generation)})
        self.rt.kube.event(lease.ref(), "Normal", LeaseReason.extended,
                           f"{lease.spec.duration}: now ends at {new}")
        return wanted

    def _end(self, lease: LeaseState, reason: LeaseReason) -> None:
        """The lease is over: its end session powers the board off (launched first: the next
        run waits for it, not for our writes), and the lease goes Releasing."""
        place = lease.typed.place or ""
        message = {LeaseReason.expired: "the lease expired",
                   LeaseReason.released: "released by its holder (spec.release)",
                   LeaseReason.deleted: "the lease was deleted"}.get(reason, str(reason))
        self._launch_end(lease)
        self.book.write(lease.namespace, lease.name, {
            **self._signed(lease, phase=LeasePhase.releasing), "endReason": reason,
            "conditions": set_condition(
                lease.typed.conditions, Condition.granted, "False", reason,
                f"{message}; powering {place} off", lease.generation)})
        if reason == LeaseReason.expired:
            metrics.LEASES_EXPIRED.inc()
        self.rt.kube.event(lease.ref(), "Normal", reason, f"{message}; powering {place} off")

    def _signed(self, lease: LeaseState, **changes: Any) -> dict[str, Any]:
        """`changes` to a lease's signed status fields: every signed field written with them
        and the signature over all (what the API server holds then verifies, whatever an event
        not yet seen here had changed)."""
        fields = {f: {**lease.status, **changes}.get(f) for f in trust.LEASE_SIGNED}
        return {**fields, "grantSignature": trust.sign_lease(
            self.rt.signing_key, lease.uid, lease.spec.user, fields)}

    def _launch_end(self, lease: LeaseState) -> None:
        self.rt.owner.call(setattr, lease, "ending_since", self.clock())
        req = Launch.lease_end(lease.namespace, lease.name, lease.uid,
                               lease.typed.place or "")
        try:
            handle = self.rt.launch_session(req)
        except LAUNCH_FAILURES as exc:   # given up after END_GRACE: the place is released anyway
            handle = f"not started ({exc})"
        log.info("%s: %s", req.what(), handle)

    def _tend_ending(self, lease: LeaseState) -> None:
        if lease.ending_since is None:  # adopted after a restart: end it again
            self._launch_end(lease)
            return
        place = lease.typed.place or ""
        self.holds.release(lease, place)
        end = LeaseEnd(poweredOff=False, at=now_iso(),
                       message=f"its end session did not report in {END_GRACE:.0f} s; {place} "
                               "released, and may still be powered on")
        self.book.write(lease.namespace, lease.name, {"leaseEnd": end.model_dump(mode="json")})
        self.rt.inventory.free(place, lease.key)
        self.ended(lease, end)

    def ended(self, lease: LeaseState, end: LeaseEnd) -> None:
        """Its board is off (or could not be switched off) and released, or it was released
        before it got one: the lease is Ended."""
        try:
            ended: LeaseReason | Refusal
            if lease.phase == LeasePhase.pending:
                ended, reason, kind = LeaseReason.released, LeaseReason.released, "Normal"
            elif lease.phase == LeasePhase.releasing:
                ended = _end_reason(lease.typed.endReason)
                reason = LeaseReason.powered_off if end.poweredOff else \
                    LeaseReason.power_off_failed
                kind = "Normal" if end.poweredOff else "Warning"
            else:
                return
            self.book.write(lease.namespace, lease.name, {
                "phase": LeasePhase.ended, "endedAt": now_iso(), "queuePosition": None,
                "estimatedStart": None, "conditions": set_condition(
                    lease.typed.conditions, Condition.granted, "False", ended, end.message,
                    lease.generation)})
            metrics.LEASES_ENDED.labels(ended.value).inc()
            self.rt.kube.event(lease.ref(), kind, reason, end.message)
            self.rt.notify(lease_event(EventKind.lease_ended, lease.ref()["metadata"],
                                              lease.status, now_iso(),
                                              f"ended ({ended}): {end.message}"))
        finally:
            self.rt.owner.call(setattr, lease, "busy", False)

    def untrusted(self, lease: LeaseState) -> None:
        """A grant the operator did not sign (its status written by someone else): Ended, no
        board claimed or touched."""
        message = ("status.place and the grant were not written by benchfarm (no valid "
                   "grantSignature): no board was given or touched")
        try:
            self.book.write(lease.namespace, lease.name, {
                "phase": LeasePhase.ended, "endedAt": now_iso(), "conditions": set_condition(
                    lease.typed.conditions, Condition.granted, "False",
                    Refusal.statusTampered, message, lease.generation)})
            self.rt.kube.event(lease.ref(), "Warning", Refusal.statusTampered, message)
        finally:
            self.rt.owner.call(setattr, lease, "busy", False)

    def tampered(self, lease: LeaseState) -> None:
        """Someone else rewrote the status of a lease the operator granted (a later expiry,
        another phase or board): the lease ends now, as if it had expired, with the status the
        operator signed; its end session powers its board off and releases it."""
        place = lease.typed.place or ""
        message = ("the lease's status was rewritten outside benchfarm (its phase, place, "
                   "grant or expiry no longer match the operator's signature): the lease ends "
                   f"now; powering {place} off")
        try:
            ending = lease.phase == LeasePhase.releasing
            # written before the end session starts: it checks the signature of what it reads
            self.book.write(lease.namespace, lease.name, {
                **self._signed(lease, phase=LeasePhase.releasing),
                "endReason": Refusal.statusTampered, "conditions": set_condition(
                    lease.typed.conditions, Condition.granted, "False", Refusal.statusTampered,
                    message, lease.generation)})
            if not ending:
                self._launch_end(lease)
            self.rt.kube.event(lease.ref(), "Warning", Refusal.statusTampered, message)
        except API_FAILURES as exc:
            log.warning("%s: ending the lease whose status was rewritten failed (%s); again at "
                        "its next change", lease.key, exc)
        finally:
            self.rt.owner.call(setattr, lease, "busy", False)

    def _retake(self, lease: LeaseState) -> None:
        """After a coordinator restart: the lease's lock and the person's allowance again."""
        place = lease.typed.place or ""
        try:
            self.holds.hold(lease, place)
            self.rt.owner.call(setattr, lease, "granted_at", self.clock())
            log.info("%s: took %s back after the coordinator forgot its lock", lease.key, place)
            self.rt.kube.event(lease.ref(), "Normal", LeaseReason.lock_retaken,
                               f"the labgrid coordinator forgot the lock of {place} (a restart); "
                               f"taken back and {lease.spec.user} allowed again")
        except API_FAILURES as exc:
            log.warning("%s: could not take %s back: %s", lease.key, place, exc)
        finally:
            self.rt.owner.call(setattr, lease, "busy", False)

    def next_wake(self, now: float) -> float | None:
        """Seconds until the next granted lease's warning or end is due (None: none is)."""
        due = []
        for lease in self.book.active():
            if lease.phase == LeasePhase.granted and lease.typed.expiresAt:
                expires = ts(lease.typed.expiresAt)
                due.append(expires)
                if lease.typed.warnedFor != lease.typed.expiresAt:
                    due.append(expires - self.rt.policy.leaseWarningSeconds)
        return max(0.0, min(due) - now) if due else None
