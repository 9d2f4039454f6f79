"""BoardLeases: people through the same fair queue as runs, and out again on time.

A BoardLease waits in the scheduler's one queue (`core.queue`, an entry of kind `lease`), under
its namespace's priority ceiling, round-robin turn and board limit. When a round gives it a board,
`grant` (on a launch thread, never kopf's loop: labgrid's client has a loop of its own) acquires
the place under the lease's own labgrid identity (`lease_identity`), allows the person's labgrid
user on it (labgrid's `allow`), and writes `status.place`, `status.expiresAt` and
`status.commands` in one guarded write (the lease must still be Pending). Where the operator holds
the lab's labgrid issuer and the lease carries the person's public key (`spec.publicKey`), that
write also carries `status.access`: a certificate that lets its holder be the lease's user to the
coordinator, and only until the lease expires (`lab.labgrid_pki.person_access`); an extension
issues a new one.

`tend`, after every round, keeps granted leases: an extension (a longer `spec.duration`, up to the
LabPolicy's `leases.maxLeaseSeconds`) moves `expiresAt`; `leaseWarningSeconds` before the end a
`LeaseExpiring` warning event; at the end (expiry, `spec.release`, deletion) the lease goes
Releasing and the launcher starts its end session (`session.leaseend`: power off through the
place's power driver, release), since the operator never drives a board. The session's
`status.leaseEnd` frees the board at once (the scheduler is woken). A lock the coordinator forgot
(a restart) is taken back and the person allowed again. Everything a lease needs to go on is in
its status, so a restarted operator adopts granted and ending leases as it finds them.

Every status field the operator acts on (phase, place, grant and expiry, and the person's user)
is covered by `status.grantSignature` (`core.trust.sign_lease`), written with each change of
them (grant, extension, end). A status someone else rewrote (a new expiry, Granted again,
another board) does not verify: a lease the operator knows it granted ends at once (its end
session powers the board off and releases it; `StatusNotTrusted`), and one it never granted is
Ended with no board claimed or touched.

What the keeper needs of the operator is `LeaseRuntime`; it imports neither the runtime nor the
inventory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from ..api.models import BoardLeaseSpec
from ..api.notifications import EventKind
from ..api.outcomes import LeaseEnd, LeasePhase, LeaseReason, Refusal
from ..core import durations, notify, queue as q, trust
from ..core.conditions import now_iso, set_condition
from ..errors import BoardBusy, InfraError
from ..kubeapi.client import API_FAILURES, PreconditionFailed
from ..lab.coordinator import Coordinator, lease_identity
from ..lab.labgrid_compat import ENV_CA
from ..lab.labgrid_pki import issuer_from_env, person_access
from ..settings import Settings
from . import metrics
from .ports import LAUNCH_FAILURES, Launch
from .state import BoardRecord, LeaseState, Registry, RunIndex, ts, written

if TYPE_CHECKING:
    pass

log = logging.getLogger("benchfarm")

PLURAL = "boardleases"
END_GRACE = 30.0          # seconds an end session has to power off and release
GRANT_RETRY = 2.0         # seconds before a lease whose grant failed may be tried again
POSITIONS_EVERY = 5.0     # seconds between two writes of the waiting leases' positions


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def trusted(key: bytes, uid: str, user: str, status: dict[str, Any]) -> bool:
    return trust.lease_trusted(key, uid, user, status)


def _end_reason(raw: Any) -> LeaseReason | Refusal:
    """`status.endReason` as the operator wrote it (anything else: released)."""
    if raw == Refusal.statusTampered:
        return Refusal.statusTampered
    try:
        return LeaseReason(raw or LeaseReason.released)
    except ValueError:
        return LeaseReason.released


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


class LeaseBoards(Protocol):
    """What the keeper asks of the inventory: its boards, and who holds one."""

    @property
    def boards(self) -> Mapping[str, BoardRecord]: ...

    last_refresh: float

    def claim(self, board: str, key: str) -> None: ...

    def free(self, board: str | None, key: str) -> None: ...

    def kinds_matching(self, selector: q.Selector) -> frozenset[str]: ...


class LeaseRuntime(Registry, Protocol):
    """What the lease keeper needs of the operator's registry (`kube.runtime.Runtime` is one)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def inventory(self) -> LeaseBoards: ...

    @property
    def index(self) -> RunIndex: ...

    @property
    def launches(self) -> Executor: ...

    @property
    def fairness(self) -> q.FairnessPolicy: ...

    @property
    def signing_key(self) -> bytes: ...

    @property
    def inventory_known(self) -> bool: ...

    def launch_session(self, req: Launch) -> str: ...

    def board_free_at(self, board: str, now: float) -> float | None: ...

    def wake(self) -> None: ...


class Leases:
    def __init__(self, rt: LeaseRuntime) -> None:
        self.rt = rt
        self.leases: dict[str, LeaseState] = {}
        self.positions: dict[str, tuple[int | None, str | None]] = {}
        self.positions_at = 0.0
        self.clock = time.monotonic
        # the coordinator as a lease's person reaches it (default: the operator's own address)
        self.address = rt.settings.lease_coordinator or rt.coordinator.address
        self.client: Callable[[str, str], Coordinator] = rt.coordinator.as_identity
        # the lab's labgrid issuer: each granted lease's person gets a certificate of its own
        self.issuer = issuer_from_env(rt.settings.environ)
        ca = rt.settings.environ.get(ENV_CA, "")
        self.coordinator_ca = open(ca).read() if ca and self.issuer else ""

    @property
    def shown_address(self) -> str | None:
        """The coordinator's address as `status.commands` gives it: none where it takes only
        certificates (people reach it through `benchfarm lease --shell`'s forwarder)."""
        return None if self.issuer is not None else self.address

    def access(self, lease: LeaseState, expires: float) -> dict[str, str] | None:
        """`status.access` for the lease's person until `expires`, or None (no issuer, no public
        key, or a key that is no key: said in an event)."""
        if self.issuer is None or not lease.spec.publicKey:
            return None
        try:
            return person_access(self.issuer, self.coordinator_ca, self.address, lease.spec.user,
                                 lease.spec.publicKey, datetime.fromtimestamp(expires, UTC))
        except ValueError as exc:
            self.rt.kube.event(lease.ref(), "Warning", "PublicKeyRefused",
                               f"spec.publicKey: {exc}; no certificate was issued")
            return None

    # -- registry (fed by kopf) ---------------------------------------------------------------
    def observe(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = q.lease_key(meta["namespace"], meta["name"])
        if event_type == "DELETED":
            with self.rt.lock:
                lease = self.leases.pop(key, None)
                self.rt.index.forget(key)
            if lease is not None:
                self.rt.inventory.free(lease.status.get("place"), key)
            return
        try:
            spec = BoardLeaseSpec(**(body.get("spec") or {}))
        except ValidationError:  # refused at admission by the schema; ignored here
            return
        status = dict(body.get("status") or {})
        forged = status.get("phase") in (LeasePhase.granted, LeasePhase.releasing) and \
            not trusted(self.rt.signing_key, meta["uid"], spec.user, status)
        with self.rt.lock:
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
                                         status.get("phase") == LeasePhase.pending):
                    lease.status = status
            else:
                lease = self.leases[key] = LeaseState(
                    meta["namespace"], meta["name"], meta["uid"], meta.get("generation", 1),
                    ts(meta.get("creationTimestamp")), spec, status,
                    deleting=bool(meta.get("deletionTimestamp")))
            self.reindex(lease)
        if forged:
            with self.rt.lock:
                act = not lease.busy
                lease.busy = True
            if act:
                self.rt.launches.submit(self._tampered if tampered else self._untrusted, lease)
            return
        place = status.get("place")
        if place and lease.phase in (LeasePhase.granted, LeasePhase.releasing):
            with self.rt.lock:   # adopted after a restart, too; never from another holder: a
                rec = self.rt.inventory.boards.get(place)   # replayed old status takes nothing
                other = rec.run if rec is not None and rec.run not in (None, key) else None
                if other is None:
                    self.rt.inventory.claim(place, key)
            if other is not None:
                log.warning("%s: its status names %s, which %s holds; not claimed for it", key,
                            place, other)
        end = written(LeaseEnd, status, "leaseEnd")
        with self.rt.lock:
            act = not lease.busy and (
                (end is not None and lease.phase == LeasePhase.releasing) or
                (lease.phase == LeasePhase.pending and lease.spec.release and not lease.starting))
            lease.busy = lease.busy or act
        if act and end is not None:
            self.rt.inventory.free(place, key)           # the next run may take it now
            self.rt.launches.submit(self._ended, lease, end)
        elif act:                                        # released before it was granted
            self.rt.launches.submit(self._ended, lease, LeaseEnd(
                poweredOff=False, message="released before it was granted", at=now_iso()))
        self.rt.wake()

    def reindex(self, lease: LeaseState) -> None:
        """Under the lock: the lease's place in the queue and among the active."""
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

    def recover(self) -> None:
        for body in self.rt.kube.list_custom_all(PLURAL):
            self.observe("ADDED", body)

    def active(self) -> list[LeaseState]:
        with self.rt.lock:
            return list(self.rt.index.leases.values())

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
        if not allowed.allowed or seconds > allowed.maxLeaseSeconds or not fits:
            reason = LeaseReason.not_allowed if not allowed.allowed else \
                LeaseReason.too_long if seconds > allowed.maxLeaseSeconds else \
                LeaseReason.no_matching_board
            message = {
                LeaseReason.not_allowed:
                    f"namespace {ns} may not lease boards (LabPolicy leases.allowed)",
                LeaseReason.too_long:
                    f"duration {spec.duration} ({seconds} s) is longer than namespace {ns} may "
                    f"lease a board: at most {allowed.maxLeaseSeconds} s (LabPolicy "
                    "leases.maxLeaseSeconds)",
                LeaseReason.no_matching_board:
                    "no board in the lab matches the selector "
                    f"{sel.model_dump(exclude_none=True)}"}[reason]
            self._write(ns, name, {"phase": LeasePhase.refused, "conditions": set_condition(
                None, "Granted", "False", reason, message, meta.get("generation"))})
            self.rt.kube.event(ref, "Warning", reason, message)
            return
        message = f"waiting for a board ({spec.duration}, for {spec.user})"
        self._write(ns, name, {"phase": LeasePhase.pending, "conditions": set_condition(
            None, "Granted", "False", LeaseReason.queued, message, meta.get("generation"))})
        self.rt.kube.event(ref, "Normal", LeaseReason.queued, message)
        self.rt.wake()

    def _write(self, ns: str, name: str, status: dict[str, Any]) -> bool:
        ok = self.rt.kube.patch_custom(PLURAL, ns, name, {"status": status}, status=True)
        key = q.lease_key(ns, name)
        with self.rt.lock:
            lease = self.leases.get(key)
            if ok and lease is not None:
                lease.status.update(status)
                self.reindex(lease)
        return ok

    # -- grant (a launch thread) --------------------------------------------------------------
    def grant(self, lease: LeaseState, board: str) -> None:
        """Acquire the place as the lease, allow the person, write the grant; on any failure
        the board is freed and the lease waits again."""
        try:
            self._grant(lease, board)
        except API_FAILURES as exc:
            log.warning("%s: could not grant %s: %s", lease.key, board, exc)
            self._release(lease, board)
            time.sleep(GRANT_RETRY)     # the board stays taken meanwhile: no retry storm
            with self.rt.lock:
                lease.starting = False
                self.reindex(lease)
                released = lease.spec.release and not lease.busy   # asked meanwhile
                lease.busy = lease.busy or released
            self.rt.inventory.free(board, lease.key)
            if released:
                self._ended(lease, LeaseEnd(poweredOff=False, at=now_iso(),
                                            message="released before it was granted"))

    def _hold(self, lease: LeaseState, place: str) -> None:
        """The place locked under the lease's own identity, and the person's user allowed on
        it (labgrid's acquire and allow): at the grant, and again after a coordinator restart."""
        host, user = lease_identity(lease.uid)
        client = self.client(host, user)
        try:
            client.acquire(place)
            client.allow(place, lease.spec.user)
        finally:
            client.close()

    def _grant(self, lease: LeaseState, board: str) -> None:
        self._hold(lease, board)
        now = time.time()
        seconds = durations.parse(lease.spec.duration)
        signed = {"phase": LeasePhase.granted, "place": board, "grantedAt": iso(now),
                  "expiresAt": iso(now + seconds)}
        status = {**signed, "grantSignature": trust.sign_lease(
                      self.rt.signing_key, lease.uid, lease.spec.user, signed),
                  "queuePosition": None,
                  "estimatedStart": None, "commands": commands(board, lease.spec.user,
                                                               self.shown_address),
                  "access": self.access(lease, now + seconds),
                  "conditions": set_condition(
                      lease.status.get("conditions"), "Granted", "True", LeaseReason.granted,
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
        with self.rt.lock:
            lease.starting = False
            lease.status.update(status)
            lease.granted_at = self.clock()
            self.reindex(lease)
        self.positions.pop(lease.key, None)
        metrics.LEASES_GRANTED.inc()
        metrics.QUEUE_WAIT.observe(max(0.0, now - lease.created))
        self.rt.kube.event(lease.ref(), "Normal", LeaseReason.granted,
                           f"{board} granted to {lease.spec.user} until {iso(now + seconds)}: "
                           f"{commands(board, lease.spec.user, self.shown_address)['shell']} "
                           f"labgrid-client -p {board} console")
        self.rt.notify(notify.lease_event(
            EventKind.lease_granted, lease.ref()["metadata"], status, iso(now),
            f"{board} granted to {lease.spec.user} until {iso(now + seconds)}"))

    def _release(self, lease: LeaseState, board: str) -> None:
        host, user = lease_identity(lease.uid)
        try:
            self.rt.coordinator.release(board, holder=f"{host}/{user}")
        except InfraError as exc:   # an orphan the inventory releases later
            log.warning("%s: could not release %s: %s", lease.key, board, exc)

    # -- keeping granted leases (the scheduler's thread, after each round) ---------------------
    def tend(self, now: float) -> None:
        for lease in self.active():
            if lease.busy or lease.starting:
                continue
            try:
                if lease.phase == LeasePhase.granted:
                    self._tend_granted(lease, now)
                elif lease.phase == LeasePhase.releasing:
                    self._tend_ending(lease)
            except Exception:       # one lease's bug must not stop the others
                metrics.bug(log, "%s: keeping the lease failed; again next round", lease.key)
        metrics.LEASES_ACTIVE.set(sum(1 for lease in self.active()
                                      if lease.phase == LeasePhase.granted))
        self._positions(now)

    def _tend_granted(self, lease: LeaseState, now: float) -> None:
        st = lease.status
        expires = ts(st.get("expiresAt"))
        wanted = ts(st.get("grantedAt")) + durations.parse(lease.spec.duration)
        if wanted != expires and st.get("refusedGeneration") != lease.generation:
            expires = self._extend(lease, wanted, expires)
        reason = LeaseReason.deleted if lease.deleting else \
            LeaseReason.released if lease.spec.release else \
            LeaseReason.expired if now >= expires else None
        if reason is not None:
            self._end(lease, reason)
            return
        warn = self.rt.policy.leaseWarningSeconds
        if now >= expires - warn and st.get("warnedFor") != st.get("expiresAt"):
            left = max(0, round(expires - now))
            self._write(lease.namespace, lease.name, {"warnedFor": st.get("expiresAt")})
            message = (f"{st.get('place')} is powered off and released in {left} s "
                       f"(at {st.get('expiresAt')}); raise spec.duration to extend")
            self.rt.kube.event(lease.ref(), "Warning", LeaseReason.expiring, message)
            self.rt.notify(notify.lease_event(EventKind.lease_ending, lease.ref()["metadata"],
                                              st, iso(now), message))
        rec = self.rt.inventory.boards.get(st.get("place") or "")
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
                       f"still ends at {lease.status.get('expiresAt')}")
            self._write(lease.namespace, lease.name, {"refusedGeneration": lease.generation})
            self.rt.kube.event(lease.ref(), "Warning", LeaseReason.too_long, message)
            return expires
        new = iso(wanted)
        access = self.access(lease, wanted)
        self._write(lease.namespace, lease.name, {
            **self._signed(lease, expiresAt=new), **({"access": access} if access else {}),
            "conditions": set_condition(
                lease.status.get("conditions"), "Granted", "True", LeaseReason.extended,
                f"{lease.status.get('place')} is {lease.spec.user}'s until {new}",
                lease.generation)})
        self.rt.kube.event(lease.ref(), "Normal", LeaseReason.extended,
                           f"{lease.spec.duration}: now ends at {new}")
        return wanted

    def _end(self, lease: LeaseState, reason: LeaseReason) -> None:
        """The lease is over: its end session powers the board off (launched first: the next
        run waits for it, not for our writes), and the lease goes Releasing."""
        place = lease.status.get("place") or ""
        message = {LeaseReason.expired: "the lease expired",
                   LeaseReason.released: "released by its holder (spec.release)",
                   LeaseReason.deleted: "the lease was deleted"}.get(reason, str(reason))
        self._launch_end(lease)
        self._write(lease.namespace, lease.name, {
            **self._signed(lease, phase=LeasePhase.releasing), "endReason": reason,
            "conditions": set_condition(
                lease.status.get("conditions"), "Granted", "False", reason,
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
        lease.ending_since = self.clock()
        req = Launch.lease_end(lease.namespace, lease.name, lease.uid,
                               lease.status.get("place") or "")
        try:
            handle = self.rt.launch_session(req)
        except LAUNCH_FAILURES as exc:   # given up after END_GRACE: the place is released anyway
            handle = f"not started ({exc})"
        log.info("%s: %s", req.what(), handle)

    def _tend_ending(self, lease: LeaseState) -> None:
        if written(LeaseEnd, lease.status, "leaseEnd") is not None:
            return                     # `observe` acts on it
        if lease.ending_since is None:  # adopted after a restart: end it again
            self._launch_end(lease)
            return
        if self.clock() - lease.ending_since < END_GRACE:
            return
        place = lease.status.get("place") or ""
        self._release(lease, place)
        end = LeaseEnd(poweredOff=False, at=now_iso(),
                       message=f"its end session did not report in {END_GRACE:.0f} s; {place} "
                               "released, and may still be powered on")
        self._write(lease.namespace, lease.name, {"leaseEnd": end.model_dump(mode="json")})
        self.rt.inventory.free(place, lease.key)
        lease.busy = True
        self._ended(lease, end)

    def _ended(self, lease: LeaseState, end: LeaseEnd) -> None:
        """Its board is off (or could not be switched off) and released, or it was released
        before it got one: the lease is Ended."""
        try:
            ended: LeaseReason | Refusal
            if lease.phase == LeasePhase.pending:
                ended, reason, kind = LeaseReason.released, LeaseReason.released, "Normal"
            elif lease.phase == LeasePhase.releasing:
                ended = _end_reason(lease.status.get("endReason"))
                reason = LeaseReason.powered_off if end.poweredOff else \
                    LeaseReason.power_off_failed
                kind = "Normal" if end.poweredOff else "Warning"
            else:
                return
            self._write(lease.namespace, lease.name, {
                "phase": LeasePhase.ended, "endedAt": now_iso(), "queuePosition": None,
                "estimatedStart": None, "conditions": set_condition(
                    lease.status.get("conditions"), "Granted", "False", ended, end.message,
                    lease.generation)})
            metrics.LEASES_ENDED.labels(ended.value).inc()
            self.rt.kube.event(lease.ref(), kind, reason, end.message)
            self.rt.notify(notify.lease_event(EventKind.lease_ended, lease.ref()["metadata"],
                                              lease.status, now_iso(),
                                              f"ended ({ended}): {end.message}"))
        finally:
            lease.busy = False

    def _untrusted(self, lease: LeaseState) -> None:
        """A grant the operator did not sign (its status written by someone else): Ended, no
        board claimed or touched."""
        message = ("status.place and the grant were not written by benchfarm (no valid "
                   "grantSignature): no board was given or touched")
        try:
            self._write(lease.namespace, lease.name, {
                "phase": LeasePhase.ended, "endedAt": now_iso(), "conditions": set_condition(
                    lease.status.get("conditions"), "Granted", "False",
                    Refusal.statusTampered, message, lease.generation)})
            self.rt.kube.event(lease.ref(), "Warning", Refusal.statusTampered, message)
        finally:
            lease.busy = False

    def _tampered(self, lease: LeaseState) -> None:
        """Someone else rewrote the status of a lease the operator granted (a later expiry,
        another phase or board): the lease ends now, as if it had expired, with the status the
        operator signed; its end session powers its board off and releases it."""
        place = lease.status.get("place") or ""
        message = ("the lease's status was rewritten outside benchfarm (its phase, place, "
                   "grant or expiry no longer match the operator's signature): the lease ends "
                   f"now; powering {place} off")
        try:
            ending = lease.phase == LeasePhase.releasing
            # written before the end session starts: it checks the signature of what it reads
            self._write(lease.namespace, lease.name, {
                **self._signed(lease, phase=LeasePhase.releasing),
                "endReason": Refusal.statusTampered, "conditions": set_condition(
                    lease.status.get("conditions"), "Granted", "False", Refusal.statusTampered,
                    message, lease.generation)})
            if not ending:
                self._launch_end(lease)
            self.rt.kube.event(lease.ref(), "Warning", Refusal.statusTampered, message)
        except API_FAILURES as exc:
            log.warning("%s: ending the lease whose status was rewritten failed (%s); again at "
                        "its next change", lease.key, exc)
        finally:
            lease.busy = False

    def _retake(self, lease: LeaseState) -> None:
        """After a coordinator restart: the lease's lock and the person's allowance again."""
        place = lease.status.get("place") or ""
        try:
            self._hold(lease, place)
            lease.granted_at = self.clock()
            log.info("%s: took %s back after the coordinator forgot its lock", lease.key, place)
            self.rt.kube.event(lease.ref(), "Normal", LeaseReason.lock_retaken,
                               f"the labgrid coordinator forgot the lock of {place} (a restart); "
                               f"taken back and {lease.spec.user} allowed again")
        except API_FAILURES as exc:
            log.warning("%s: could not take %s back: %s", lease.key, place, exc)
        finally:
            lease.busy = False

    # -- the queue as a person sees it ----------------------------------------------------------
    def _positions(self, now: float) -> None:
        """Every POSITIONS_EVERY s: each waiting lease's position in the one queue and when a
        board it fits should be free (the boards' ends: a lease's expiry, a run's timeout)."""
        if self.clock() - self.positions_at < POSITIONS_EVERY:
            return
        self.positions_at = self.clock()
        with self.rt.lock:
            waiting = {k for k, lease in self.leases.items() if lease.waiting}
            if not waiting:
                return
            found: dict[str, int] = {}
            for i, entry in enumerate(self._walk()):
                if entry.key in waiting:
                    found[entry.key] = i + 1
                    if len(found) == len(waiting):
                        break
            selectors = {k: self.entry(self.leases[k]).selector for k in found}
            boards = list(self.rt.inventory.boards.values())
        for key, position in found.items():
            ends = sorted(t for b in boards if b.device_type and
                          q.matches(selectors[key], q.BoardView(b.name, b.device_type, b.labels))
                          and (t := self.rt.board_free_at(b.name, now)) is not None)
            start = iso(max(now, ends[min(position, len(ends)) - 1])) if ends else None
            if self.positions.get(key) == (position, start):
                continue
            lease = self.leases.get(key)
            if lease is None or not lease.waiting:
                continue
            self.positions[key] = (position, start)
            self._write(lease.namespace, lease.name,
                        {"queuePosition": position, "estimatedStart": start})

    def _walk(self) -> Iterator[q.QueueEntry]:
        return self.rt.fairness.walk(self.rt.index.queue)

    def next_wake(self, now: float) -> float | None:
        """Seconds until the next granted lease's warning or end is due (None: none is)."""
        due = []
        for lease in self.active():
            if lease.phase == LeasePhase.granted and lease.status.get("expiresAt"):
                expires = ts(lease.status["expiresAt"])
                due.append(expires)
                if lease.status.get("warnedFor") != lease.status["expiresAt"]:
                    due.append(expires - self.rt.policy.leaseWarningSeconds)
        return max(0.0, min(due) - now) if due else None

    # -- deletion (kopf's finalizer) -----------------------------------------------------------
    def deleting(self, key: str) -> bool:
        """The lease is being deleted: end it; True once it holds no board any more. Called by
        kopf's delete handler, during which kopf holds back the lease's other events: its end
        session's `leaseEnd` is read here."""
        with self.rt.lock:
            lease = self.leases.get(key)
            if lease is None:
                return True
            lease.deleting = True
            self.reindex(lease)
            done = not lease.active or lease.phase == LeasePhase.ended
        if lease.phase == LeasePhase.releasing and not lease.busy:
            body = self.rt.kube.get_custom(PLURAL, lease.namespace, lease.name)
            if body is not None:
                self.observe("MODIFIED", body)
        self.rt.wake()
        return done
