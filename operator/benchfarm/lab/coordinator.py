"""benchfarm as a labgrid client: places, tags, acquire and release through the coordinator.

labgrid's ClientSession is asyncio code bound to its own event loop. kopf has its own loop too, so
the session lives in a dedicated worker thread and every call is handed to that thread; callers
get plain blocking methods (call them from a worker thread or through `asyncio.to_thread`).

What it acquires under and reads places as is pure (`api.places`: the holder identities,
`PlaceInfo`); its subclasses of labgrid's ClientSession and the place index they feed live in
`lab.labgrid_client`, beside `lab.labgrid_compat`: the one seam into labgrid's internals.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import grpc
from labgrid.remote.client import ClientSession
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2
from labgrid.util.proxy import proxymanager

from benchfarm.api.outcomes import LabFault, RunFailure
from benchfarm.api.places import (
    DEFAULT_HOST,
    DEFAULT_USER,
    HandedMatch,
    HandedPlace,
    HandedResource,
    PlaceInfo,
)
from benchfarm.errors import BoardBusy, InfraError, Outage, Party
from benchfarm.lab.labgrid_client import IndexedSession, OnePlaceSession, PlaceIndex, candidates
from benchfarm.lab.labgrid_compat import TlsSettings, claim_identity, use_ssh_config
from benchfarm.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")


class Coordinator:
    """A long-lived connection to labgrid's coordinator, driven from one worker thread."""

    def __init__(self, address: str, *, user: str = DEFAULT_USER, host: str = DEFAULT_HOST,
                 timeout: float = 20.0, place: HandedPlace | None = None,
                 shared: Coordinator | None = None, tls: TlsSettings | None = None,
                 ssh_config: str = "") -> None:
        """`place`: a board session's own place, handed over by the operator; the client then
        knows that place only (`OnePlaceSession`) instead of syncing the whole lab. `shared`:
        run on that client's loop and thread (`as_identity`). `tls`: the certificate this
        client connects with (None: no TLS; `from_settings`: BENCHFARM_LABGRID_CA/_CERT/_KEY).
        `ssh_config`: the lab's ssh_config for the ssh labgrid starts (`LG_PROXY`, staging)."""
        self.address = address
        self.tls = tls
        self.ssh_config = ssh_config
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
        self._index: PlaceIndex | None = None
        self._lock = threading.Lock()
        self._connecting: asyncio.Lock | None = None    # one connection attempt at a time
        self._relays: dict[str, tuple[str, Callable[[], None]]] = {}   # `on_release`, on the loop

    @classmethod
    def from_settings(cls, settings: Settings, *, address: str | None = None,
                      **kw: Any) -> Coordinator:
        """A client as the settings say: their coordinator (or `address`), their certificate
        (`TlsSettings.from_settings`) and ssh_config; `kw` as for the constructor."""
        return cls(address or settings.coordinator, tls=TlsSettings.from_settings(settings),
                   ssh_config=settings.ssh_config, **kw)

    @property
    def identity(self) -> str:
        return f"{self.host}/{self.user}"

    def as_identity(self, host: str, user: str) -> Coordinator:
        """A client of another labgrid identity (a BoardLease's) on this client's loop and
        thread: grpc's asyncio client wants one event loop per process. Close it after use."""
        return Coordinator(self.address, host=host, user=user, timeout=self.timeout, shared=self,
                           tls=self.tls, ssh_config=self.ssh_config)

    # -- plumbing -----------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:   # e.g. the coordinator restarted under us
            self._session = None
            raise Outage(f"labgrid coordinator at {self.address}: {exc.code().name}: "
                         f"{exc.details()}", party=Party.coordinator,
                         reason=LabFault.coordinator_unreachable) from exc
        except TimeoutError as exc:
            self._session = None
            future.cancel()
            raise Outage(f"labgrid coordinator at {self.address} did not answer in time",
                         party=Party.coordinator, reason=LabFault.coordinator_unreachable) from exc

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
        use_ssh_config(self.ssh_config)
        address = proxymanager.get_grpc_address(self.address, default_port=20408)
        # through LG_PROXY's forward, the coordinator's certificate still names its own host
        server_name = self.address.rpartition(":")[0] or self.address \
            if address != self.address else None
        # mypy's attrs plugin knows only these classes' own fields, not labgrid's (untyped)
        session = (IndexedSession(address, self._loop, tls=self.tls,  # type: ignore[misc, arg-type]
                                   server_name=server_name)
                   if self.place is None else
                   OnePlaceSession(address, self._loop,  # type: ignore[misc, arg-type]
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
                         party=Party.coordinator, reason=LabFault.coordinator_unreachable) from exc
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
                             party=Party.coordinator,
                             reason=LabFault.coordinator_unreachable) from exc
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
                self._index = PlaceIndex(session)   # a new connection: read every place
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
                self._index = PlaceIndex(session)   # a new connection: read every place
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
        from (`OnePlaceSession`); None if it knows no such place."""
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
                           for e, g, n, res in candidates(place, session.resources)
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
                assert isinstance(session, OnePlaceSession)
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
                                     reason=RunFailure.place_missing)
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
                                     reason=RunFailure.place_missing) from exc
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
                                 "(is ser2net installed on the exporter?)",
                                 reason=LabFault.place_incomplete)
            time.sleep(0.2)

    def allow(self, name: str, user: str) -> None:
        """Let labgrid user `host/user` use the place this client holds (`labgrid-client
        allow`): the person of a BoardLease drives the board the lease acquired."""
        self._call(self._rpc("AllowPlace", pb2.AllowPlaceRequest(placename=name, user=user)))

    def holder(self, name: str) -> str | None:
        _, place = self._place_now(name)
        if place is None:
            raise InfraError(f"labgrid place {name} does not exist",
                             reason=RunFailure.place_missing)
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
