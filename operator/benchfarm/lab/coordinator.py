"""benchfarm as a labgrid client: places, tags, acquire and release through the coordinator.

labgrid's ClientSession is asyncio code bound to its own event loop. kopf has its own loop too, so
the session lives in a dedicated worker thread and every call is handed to that thread; callers
get plain blocking methods (call them from a worker thread or through `asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import attr
import grpc
from labgrid.remote.client import ClientSession
from labgrid.remote.common import Place, ResourceEntry, ResourceMatch
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2, labgrid_coordinator_pb2_grpc
from labgrid.util import labgrid_version
from labgrid.util.proxy import proxymanager

from benchfarm.api.places import HandedMatch, HandedPlace, HandedResource
from benchfarm.errors import BoardBusy, InfraError, Outage, Party
from benchfarm.lab.labgrid_compat import (
    CHANNEL_OPTIONS,
    TlsSettings,
    channel,
    claim_identity,
    use_ssh_config,
)
from benchfarm.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

# Who benchfarm is to the coordinator: places show as acquired by "<host>/<user>". Each board
# session acquires under its own identity (see `run_identity`), so two sessions never share one.
DEFAULT_USER = "benchfarm"
DEFAULT_HOST = "operator"
SESSION_HOST = "benchfarm"


def run_identity(uid: str) -> tuple[str, str]:
    """(host, user) of the session of the run with this uid, as labgrid shows it: host/user."""
    return SESSION_HOST, f"run-{uid}"


def run_holder(uid: str) -> str:
    """The holder of a place the session of the run with this uid acquired, as labgrid names it."""
    return "/".join(run_identity(uid))


def lease_identity(uid: str) -> tuple[str, str]:
    """(host, user) a BoardLease holds its place under: the lease's own, not the person's (the
    person's labgrid user is allowed on the place); its end session powers off under it too."""
    return SESSION_HOST, f"lease-{uid}"


def lease_uid_of(holder: str | None) -> str | None:
    """The uid of the BoardLease behind a labgrid holder identity, if it is one."""
    prefix = f"{SESSION_HOST}/lease-"
    return holder[len(prefix):] if holder and holder.startswith(prefix) else None


def health_identity(board: str, check: int) -> tuple[str, str]:
    """(host, user) of the session of a board's health check number `check`: each check its
    own, so a check's session that lives on after it was given up holds nothing of the next."""
    return SESSION_HOST, f"health-{check}-{board}"


def health_check_of(holder: str | None) -> tuple[str, int] | None:
    """(board, check) behind a labgrid holder identity of a health check's session, if it is one."""
    prefix = f"{SESSION_HOST}/health-"
    if not holder or not holder.startswith(prefix):
        return None
    check, _, board = holder[len(prefix):].partition("-")
    return (board, int(check)) if check.isdigit() and board else None


def netcheck_identity(host: str, pid: int) -> tuple[str, str]:
    """(host, user) of `benchfarm check --boards` on a board it audits: its own, one per
    process, so the operator knows it for benchfarm's (no DirectLock) and nobody else's."""
    return SESSION_HOST, f"netcheck-{host}-{pid}"


def is_netcheck(holder: str | None) -> bool:
    """Is this labgrid holder a board-network audit (`netcheck_identity`)?"""
    return bool(holder) and str(holder).startswith(f"{SESSION_HOST}/netcheck-")


@dataclass(frozen=True)
class PlaceInfo:
    """What benchfarm needs to know of a labgrid place."""

    name: str
    tags: dict[str, str] = field(default_factory=dict)
    acquired: str | None = None
    reserved_by: str | None = None
    matches: tuple[str, ...] = ()
    comment: str = ""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)  # cls -> params

    @property
    def free(self) -> bool:
        return self.acquired is None and self.reserved_by is None


def _candidates(place: Any, resources: dict[str, dict[str, dict[str, Any]]]
                ) -> Iterator[tuple[str, str, str, Any]]:
    """The resources a place's matches can name. A match that names its exporter and group
    (`exporter/group/*`, what places almost always use) looks only there, so reading every
    place is linear in the lab's size instead of places × resources."""
    seen: set[tuple[str, str]] = set()
    for match in place.matches:
        if _wildcard(match):
            yield from ((e, g, n, r) for e, groups in resources.items()
                        for g, grp in groups.items() for n, r in grp.items())
            return
        if (match.exporter, match.group) in seen:
            continue
        seen.add((match.exporter, match.group))
        for res_name, res in resources.get(match.exporter, {}).get(match.group, {}).items():
            yield match.exporter, match.group, res_name, res


def _wildcard(match: Any) -> bool:
    return any(c in f"{match.exporter}{match.group}" for c in "*?[")


def _place_info(place: Any, resources: dict[str, dict[str, dict[str, Any]]]) -> PlaceInfo:
    matched: dict[str, dict[str, Any]] = {}
    for exporter, group_name, res_name, res in _candidates(place, resources):
        if "cls" not in res.data:   # deleted by its exporter (labgrid keeps the entry, emptied)
            continue
        if place.getmatch((exporter, group_name, res.cls, res_name)):
            matched[res.cls] = dict(res.args)
    return PlaceInfo(name=place.name, tags=dict(place.tags), acquired=place.acquired,
                     reserved_by=place.reservation or None,
                     matches=tuple(str(m) for m in place.matches), comment=place.comment,
                     resources=matched)


# Coordinator's `tls` default: the certificate the environment names (labgrid_compat.TlsSettings)
FROM_ENV: Any = object()


@attr.s(eq=False)
class _IndexedSession(ClientSession):
    """labgrid's ClientSession, noting what the coordinator's updates touch (places by name,
    resources by exporter group) so that `Coordinator.places()` re-reads only those places."""

    tls: TlsSettings | None = attr.ib(default=None, kw_only=True)
    server_name: str | None = attr.ib(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # a connection of its own: the coordinator tells clients apart by their TCP peer, and
        # grpc would share one connection between two clients of a process (the operator's and
        # a BoardLease's identity), which the coordinator refuses; with TLS when the lab issued
        # this client a certificate
        shared = getattr(self, "channel")   # noqa: B009  (labgrid's, untyped)
        self.channel = channel(
            self.address, [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)], self.tls,
            server_name=self.server_name)
        self.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(self.channel)
        self.loop.create_task(shared.close())
        self.touched_places: set[str] = set()
        self.touched_groups: set[tuple[str, str]] = set()
        # places other sessions hold, watched for their release (`Coordinator.on_release`):
        # place -> (its holder, what to call); the Coordinator's own dict, kept across connections
        self.relays: dict[str, tuple[str, Callable[[], None]]] = {}
        self.holders: dict[str, str | None] = {}   # who holds each place, as updates said

    def _relayed(self, name: str, acquired: str | None) -> None:
        """An update of a place: if it is watched and its holder no longer holds it, say so."""
        self.holders[name] = acquired
        watch = self.relays.get(name)
        if watch is not None and acquired != watch[0]:
            del self.relays[name]
            watch[1]()

    async def on_resource_changed(self, exporter: str, group_name: str, resource_name: str,
                                  resource: dict[str, Any]) -> None:
        await super().on_resource_changed(exporter, group_name, resource_name, resource)
        self.touched_groups.add((exporter, group_name))

    async def on_place_changed(self, place_pb2: Any) -> None:
        await super().on_place_changed(place_pb2)
        self.touched_places.add(place_pb2.name)
        self._relayed(place_pb2.name, place_pb2.acquired or None)

    async def on_place_deleted(self, name: str) -> None:
        await super().on_place_deleted(name)
        self.touched_places.add(name)
        self._relayed(name, None)


@attr.s(eq=False)
class _OnePlaceSession(_IndexedSession):
    """A board session's labgrid client: it knows one place and the resources that place matches.

    labgrid's own client subscribes to every place and every resource when it starts (its
    Subscribe message has only `all_places` and `all_resources`): at 1,000 boards that is 1,000
    places and 2,000 resources read, sent and parsed for each session launched, on the session's
    CPU and the coordinator's. This one subscribes to nothing: it starts from the place the
    operator handed over (`HandedPlace`), and the coordinator's updates (sent to every client,
    subscribed or not) keep that place and its resources current; updates of other places and
    resources are dropped. Who holds the place is never taken from the handed copy: `fresh` says
    whether the coordinator has spoken of the place on this connection (an update, or a read).
    """

    handed: HandedPlace = attr.ib(kw_only=True)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.fresh = False
        self.groups: set[tuple[str, str]] = set()

    async def start(self) -> None:  # noqa: D102  (labgrid's start, without the subscriptions)
        h = self.handed
        self.places = {h.name: Place(
            name=h.name, comment=h.comment, tags=dict(h.tags),
            matches=[ResourceMatch(m.exporter, m.group, m.cls, m.name, m.rename) for m in h.matches],
            created=0.0, changed=0.0)}
        self.resources: dict[str, dict[str, dict[str, ResourceEntry]]] = {}
        for r in h.resources:
            self.resources.setdefault(r.exporter, {}).setdefault(r.group, {})[r.name] = \
                ResourceEntry(dict(r.data))
            self.groups.add((r.exporter, r.group))
        self.pump_task = self.loop.create_task(self.message_pump())
        msg = pb2.ClientInMessage()
        msg.startup.version = labgrid_version()
        msg.startup.name = f"{self.gethostname()}/{self.getuser()}"
        self.out_queue.put_nowait(msg)
        await self.sync_with_coordinator()
        if self.stopping.is_set():
            raise OSError("could not connect to the coordinator")

    def _ours(self, exporter: str, group: str, resource: dict[str, Any]) -> bool:
        if (exporter, group) in self.groups:
            return True
        place = self.places[self.handed.name]
        return "cls" in resource and place.hasmatch((exporter, group, resource["cls"], "*"))

    async def on_resource_changed(self, exporter: str, group_name: str, resource_name: str,
                                  resource: dict[str, Any]) -> None:
        if self._ours(exporter, group_name, resource):
            self.groups.add((exporter, group_name))
            await super().on_resource_changed(exporter, group_name, resource_name, resource)

    async def on_place_changed(self, place_pb2: Any) -> None:
        if place_pb2.name == self.handed.name:
            await super().on_place_changed(place_pb2)
            self.fresh = True
        else:
            self._relayed(place_pb2.name, place_pb2.acquired or None)

    async def on_place_deleted(self, name: str) -> None:
        if name == self.handed.name:
            await super().on_place_deleted(name)
            self.fresh = True
        else:
            self._relayed(name, None)

    async def read_place(self) -> None:
        """The place as the coordinator has it now (labgrid's GetPlaces: the one read it offers
        reads every place; needed only when no update of the place came on this connection,
        e.g. a resumed session that may still hold its place)."""
        reply = await self.stub.GetPlaces(pb2.GetPlacesRequest())
        await self.sync_with_coordinator()     # updates sent before the read are in
        name = self.handed.name
        read = next((p for p in reply.places if p.name == name), None)
        known = self.places.get(name)
        if read is None:
            if not self.fresh:
                self.places.pop(name, None)
                self.touched_places.add(name)
        elif known is None or not self.fresh or read.changed >= known.changed:
            await _IndexedSession.on_place_changed(self, read)
        self.fresh = True


class _PlaceIndex:
    """Every place as benchfarm reads it, kept current from the session's updates: a place is
    matched against the resources again only when it or a group it matches changed (at 1,000
    places, re-matching all of them on every read cost 11 ms idle, 35 ms under load)."""

    def __init__(self, session: _IndexedSession) -> None:
        self.session = session
        self.infos: dict[str, PlaceInfo] = {}
        self.by_group: dict[tuple[str, str], set[str]] = {}   # exporter group -> places
        self.groups_of: dict[str, set[tuple[str, str]]] = {}
        self.wildcard: set[str] = set()                      # places matching any group
        self.changed: set[str] = set()     # places re-read since `Coordinator.changes` last asked
        session.touched_places.update(session.places)

    def _forget(self, name: str) -> None:
        self.infos.pop(name, None)
        self.wildcard.discard(name)
        for group in self.groups_of.pop(name, ()):
            self.by_group[group].discard(name)

    def current(self) -> dict[str, PlaceInfo]:
        """Runs on the session's loop, like the updates: nothing touches a place meanwhile."""
        s = self.session
        names, groups = set(s.touched_places), set(s.touched_groups)
        for group in groups:
            names |= self.by_group.get(group, set())
        if groups:
            names |= self.wildcard
        try:
            for name in names:
                place = s.places.get(name)
                info = None if place is None else _place_info(place, s.resources)
                self._forget(name)
                if info is None:
                    continue
                self.infos[name] = info
                if any(_wildcard(m) for m in place.matches):
                    self.wildcard.add(name)
                mine = self.groups_of[name] = {(m.exporter, m.group) for m in place.matches
                                               if not _wildcard(m)}
                for group in mine:
                    self.by_group.setdefault(group, set()).add(name)
        except Exception:
            s.touched_places |= names    # every one of them again at the next read
            raise
        s.touched_places.clear()
        s.touched_groups.clear()
        self.changed |= names
        return dict(self.infos)


class Coordinator:
    """A long-lived connection to labgrid's coordinator, driven from one worker thread."""

    def __init__(self, address: str, *, user: str = DEFAULT_USER, host: str = DEFAULT_HOST,
                 timeout: float = 20.0, place: HandedPlace | None = None,
                 shared: Coordinator | None = None, tls: TlsSettings | None = FROM_ENV) -> None:
        """`place`: a board session's own place, handed over by the operator; the client then
        knows that place only (`_OnePlaceSession`) instead of syncing the whole lab. `shared`:
        run on that client's loop and thread (`as_identity`). `tls`: the certificate this
        client connects with (default: BENCHFARM_LABGRID_CA/_CERT/_KEY; None: no TLS)."""
        self.address = address
        self.tls: TlsSettings | None = (
            shared.tls if shared is not None else TlsSettings.from_env()) if tls is FROM_ENV else tls
        self.place = place
        self.user = user
        self.host = host
        self.timeout = timeout
        self._owns_loop = shared is None
        self._loop: asyncio.AbstractEventLoop
        self._thread: threading.Thread
        if shared is not None:
            self._loop, self._thread = shared._loop, shared._thread
        else:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever,
                                            name="labgrid-client", daemon=True)
            self._thread.start()
        self._session: ClientSession | None = None
        self._index: _PlaceIndex | None = None
        self._lock = threading.Lock()
        self._connecting: asyncio.Lock | None = None    # one connection attempt at a time
        self._relays: dict[str, tuple[str, Callable[[], None]]] = {}   # `on_release`, on the loop

    @property
    def identity(self) -> str:
        return f"{self.host}/{self.user}"

    def as_identity(self, host: str, user: str) -> Coordinator:
        """A client of another labgrid identity (a BoardLease's) on this client's loop and
        thread: grpc's asyncio client wants one event loop per process. Close it after use."""
        return Coordinator(self.address, host=host, user=user, timeout=self.timeout, shared=self,
                           tls=self.tls)

    # -- plumbing -----------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:   # e.g. the coordinator restarted under us
            self._session = None
            raise Outage(f"labgrid coordinator at {self.address}: {exc.code().name}: "
                         f"{exc.details()}", party=Party.coordinator,
                         reason="CoordinatorUnreachable") from exc
        except TimeoutError as exc:
            self._session = None
            future.cancel()
            raise Outage(f"labgrid coordinator at {self.address} did not answer in time",
                         party=Party.coordinator, reason="CoordinatorUnreachable") from exc

    def connect_soon(self) -> None:
        """Start connecting now, while the caller does other work: labgrid's first sync reads
        every place and resource (a second at 1,000 places on a busy host). The first query
        waits for it; a failed attempt is retried by that query."""
        asyncio.run_coroutine_threadsafe(self._ensure(), self._loop)

    async def _ensure(self) -> ClientSession:
        if self._session is not None and not self._session.stopping.is_set():
            return self._session
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._session is not None and not self._session.stopping.is_set():
                return self._session
            return await self._connect()

    async def _connect(self) -> ClientSession:
        # LG_PROXY's ssh too (forwards to the coordinator and the exporters)
        use_ssh_config(Settings.from_env().ssh_config)
        address = proxymanager.get_grpc_address(self.address, default_port=20408)
        # through LG_PROXY's forward, the coordinator's certificate still names its own host
        server_name = self.address.rpartition(":")[0] or self.address \
            if address != self.address else None
        # mypy's attrs plugin knows only these classes' own fields, not labgrid's (untyped)
        session = (_IndexedSession(address, self._loop, tls=self.tls,  # type: ignore[misc, arg-type]
                                   server_name=server_name)
                   if self.place is None else
                   _OnePlaceSession(address, self._loop,  # type: ignore[misc, arg-type]
                                    handed=self.place, tls=self.tls, server_name=server_name))
        # this client's identity, whatever another client of the process set in the environment
        # since (the operator keeps its own and, for moments, a lease's)
        claim_identity(session, self.host, self.user)
        session.relays = self._relays
        try:
            await asyncio.wait_for(session.start(), self.timeout)
        except Exception as exc:
            try:
                await session.stop()
                await session.close()
            except Exception:  # the channel may already be gone
                log.debug("closing a session that did not start failed", exc_info=True)
            raise Outage(f"cannot reach the labgrid coordinator at {self.address}: {exc}",
                         party=Party.coordinator, reason="CoordinatorUnreachable") from exc
        self._session = session
        return session

    async def _rpc(self, method: str, request: Any) -> None:
        session = await self._ensure()
        try:
            await getattr(session.stub, method)(request)
            await session.sync_with_coordinator()
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                self._session = None
                raise Outage(f"labgrid coordinator unavailable: {exc.details()}",
                             party=Party.coordinator, reason="CoordinatorUnreachable") from exc
            raise InfraError(f"labgrid {method} failed: {exc.details()}") from exc

    def session(self) -> ClientSession:
        """The live labgrid ClientSession, for labgrid's RemotePlace to expand an acquired place
        over (its loop runs in this coordinator's thread). It checks who acquired a place as
        this client's identity (`labgrid_compat.claim_identity`), whatever the environment says."""
        return self._call(self._ensure())

    def close(self) -> None:
        if not self._thread.is_alive():      # closed already
            return

        async def _close() -> None:
            if self._session is not None:
                await self._session.stop()
                await self._session.close()
                self._session = None
        try:
            self._call(_close(), timeout=5)
        except Exception:  # closing a dead session is best effort
            log.debug("closing the coordinator session failed", exc_info=True)
        if self._owns_loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    # -- queries ------------------------------------------------------------------------------
    def places(self) -> dict[str, PlaceInfo]:
        async def _places() -> dict[str, PlaceInfo]:
            session = await self._ensure()
            await session.sync_with_coordinator()
            if self._index is None or self._index.session is not session:
                self._index = _PlaceIndex(session)   # a new connection: read every place
            return self._index.current()
        return self._call(_places())

    def changes(self) -> tuple[dict[str, PlaceInfo], set[str]]:
        """Every place, and the names of those that changed or went since the last call (all of
        them after a new connection): what the inventory's refresh walks, instead of 1,000
        places every few seconds. One caller only: a call takes the names it returns."""
        async def _changes() -> tuple[dict[str, PlaceInfo], set[str]]:
            session = await self._ensure()
            await session.sync_with_coordinator()
            if self._index is None or self._index.session is not session:
                self._index = _PlaceIndex(session)   # a new connection: read every place
            infos = self._index.current()
            changed, self._index.changed = self._index.changed, set()
            return infos, changed
        return self._call(_changes())

    def resources(self) -> dict[str, list[str]]:
        """exporter name -> resource paths it offers (for readiness checks)."""
        async def _resources() -> dict[str, list[str]]:
            session = await self._ensure()
            await session.sync_with_coordinator()
            return {exp: [f"{exp}/{g}/{r.cls}/{n}" for g, grp in groups.items()
                          for n, r in grp.items() if r.data.get("avail")]
                    for exp, groups in session.resources.items()}
        return self._call(_resources())

    def handover(self, name: str) -> HandedPlace | None:
        """A place as this client knows it now (no round trip), for a board session to start
        from (`_OnePlaceSession`); None if it knows no such place."""
        async def _handover() -> HandedPlace | None:
            session = await self._ensure()
            place = session.places.get(name)
            if place is None:
                return None
            return HandedPlace(
                name=name, tags=dict(place.tags), comment=place.comment,
                matches=[HandedMatch(exporter=m.exporter, group=m.group, cls=m.cls, name=m.name,
                                     rename=m.rename or None) for m in place.matches],
                resources=[HandedResource(exporter=e, group=g, name=n, data=res.data)
                           for e, g, n, res in _candidates(place, session.resources)
                           if "cls" in res.data and place.getmatch((e, g, res.cls, n))])
        return self._call(_handover())

    def on_release(self, name: str, holder: str, callback: Callable[[], None]) -> None:
        """Call `callback` once, on this client's loop (keep it short: set an event), when an
        update of place `name` on this connection shows it no longer held by `holder`: released,
        taken back, or deleted (`api.grants.Relay`); at once if an update since the connection
        came up said so already. A release before the connection came up, or while it was down,
        is not seen: the caller needs another way as well."""
        def watch() -> None:
            seen = getattr(self._session, "holders", {}).get(name, holder)
            if seen != holder:      # an update on this connection already said so
                callback()
            else:
                self._relays[name] = (holder, callback)
        self._loop.call_soon_threadsafe(watch)

    # -- place management (inventory) ---------------------------------------------------------
    def ensure_place(self, name: str, *, match: str, tags: dict[str, str], comment: str = "",
                     known: dict[str, PlaceInfo] | None = None) -> None:
        """Create or update a place so it matches `match` and carries exactly `tags` (`known`:
        the places as just read, so creating many reads them once, not once per place)."""
        current = (self.places() if known is None else known).get(name)
        if current is None:
            self._call(self._rpc("AddPlace", pb2.AddPlaceRequest(name=name)))
            current = PlaceInfo(name=name)
        if match not in current.matches:
            self._call(self._rpc("AddPlaceMatch",
                                 pb2.AddPlaceMatchRequest(placename=name, pattern=match)))
        if current.tags != tags:
            self._call(self._rpc("SetPlaceTags", pb2.SetPlaceTagsRequest(placename=name, tags=tags)))
        if comment and current.comment != comment:
            self._call(self._rpc("SetPlaceComment",
                                 pb2.SetPlaceCommentRequest(placename=name, comment=comment)))

    def delete_places(self, names: list[str]) -> None:
        """Delete places, all requests in flight at once and one wait for the coordinator's
        updates (one at a time, 1,000 places took minutes)."""
        async def _delete() -> None:
            session = await self._ensure()
            await asyncio.gather(*(session.stub.DeletePlace(pb2.DeletePlaceRequest(name=n))
                                   for n in names))
            await session.sync_with_coordinator()
        self._call(_delete(), timeout=max(self.timeout, len(names) / 20))

    # -- acquisition --------------------------------------------------------------------------
    def _place_now(self, name: str, *, read: bool = True) -> tuple[bool, PlaceInfo | None]:
        """(known, the place): the place as the coordinator has it. A board session's client
        knows its own place from the coordinator only once an update of it came on this
        connection; until then it reads it (`read`), or says it does not know."""
        if self.place is not None and name == self.place.name:
            async def _fresh() -> bool:
                session = await self._ensure()
                assert isinstance(session, _OnePlaceSession)
                if not session.fresh and read:
                    await session.read_place()
                return session.fresh
            if not self._call(_fresh()):
                return False, None
        return True, self.places().get(name)

    def acquire(self, name: str) -> None:
        """Acquire a place under this client's identity; anyone else's lock or reservation is
        BoardBusy. Each run has its own identity, so "already ours" means this very run. A board
        session's client asks the coordinator straight away (it refuses a place someone holds);
        only a refusal makes it read who holds the place: a resumed session may hold it still."""
        with self._lock:
            known, place = self._place_now(name, read=False)
            if known:
                if place is None:
                    raise InfraError(f"labgrid place {name} does not exist",
                                     reason="PlaceMissing")
                if place.acquired == self.identity:
                    return
                if place.acquired:
                    raise BoardBusy(f"place {name} is acquired by {place.acquired}")
                if place.reserved_by:
                    raise BoardBusy(f"place {name} is reserved ({place.reserved_by})")
            try:
                self._call(self._rpc("AcquirePlace", pb2.AcquirePlaceRequest(placename=name)))
            except InfraError as exc:
                refused = "already acquired" in str(exc) or "reserved" in str(exc)
                if known or not (refused or "does not exist" in str(exc)):
                    if refused:
                        raise BoardBusy(str(exc)) from exc
                    raise
                _, place = self._place_now(name)     # refused: whose is it?
                if place is None:
                    raise InfraError(f"labgrid place {name} does not exist",
                                     reason="PlaceMissing") from exc
                if place.acquired != self.identity:
                    raise BoardBusy(str(exc)) from exc
        self._wait_served(name)   # outside the lock: on failure it releases the place

    def _wait_served(self, name: str, timeout: float = 15.0) -> None:
        """Exporters start some servers only for the holder (ser2net for a local serial device):
        until they publish a port, the place cannot be used. Not ready in time is the lab's
        fault (the exporter's), never the board's."""
        deadline = time.monotonic() + timeout
        while True:
            place = self.places().get(name)
            pending = [cls for cls, args in (place.resources if place else {}).items()
                       if "port" in args and args["port"] is None]
            if not pending:
                return
            if time.monotonic() > deadline:
                self.release(name)
                raise InfraError(f"place {name}: its exporter serves no port for "
                                 f"{', '.join(pending)} {timeout:.0f} s after acquiring it "
                                 "(is ser2net installed on the exporter?)", reason="PlaceIncomplete")
            time.sleep(0.2)

    def allow(self, name: str, user: str) -> None:
        """Let labgrid user `host/user` use the place this client holds (`labgrid-client
        allow`): the person of a BoardLease drives the board the lease acquired."""
        self._call(self._rpc("AllowPlace", pb2.AllowPlaceRequest(placename=name, user=user)))

    def holder(self, name: str) -> str | None:
        _, place = self._place_now(name)
        if place is None:
            raise InfraError(f"labgrid place {name} does not exist", reason="PlaceMissing")
        return place.acquired

    def release(self, name: str, *, holder: str | None = None) -> bool:
        """Release a place if `holder` (default: this client) holds it; returns whether it did.

        The operator passes a dead runner's identity to free the place that runner left behind;
        the coordinator's `fromuser` makes the check and the release one atomic step."""
        holder = holder or self.identity
        with self._lock:
            _, place = self._place_now(name)
            if place is None or place.acquired != holder:
                return False
            self._call(self._rpc("ReleasePlace",
                                 pb2.ReleasePlaceRequest(placename=name, fromuser=holder)))
            return True
