"""benchfarm's subclasses of labgrid's `ClientSession`, beside `lab.labgrid_compat` (the other
place benchfarm reaches into labgrid's internals): `IndexedSession` notes what the coordinator's
updates touch and who holds each place, `OnePlaceSession` (a board session's client) knows one
place and replaces labgrid's `ClientSession.start` by a copy without its subscriptions; and
`PlaceIndex`, every place read off the session's labgrid objects (`PlaceInfo`) and kept current
from the updates the session noted. Written
for labgrid 26.0.1 (`labgrid_compat.LABGRID_VERSION`); tests/unit/test_labgrid_identity.py fails
when the labgrid code they copy or rely on changes (patch 8 there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attr
from labgrid.remote.client import ClientSession
from labgrid.remote.common import Place, ResourceEntry, ResourceMatch
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2, labgrid_coordinator_pb2_grpc
from labgrid.util import labgrid_version

from benchfarm.api.places import HandedPlace, PlaceInfo
from benchfarm.lab.labgrid_compat import CHANNEL_OPTIONS, TlsSettings, channel


@attr.s(eq=False)
class IndexedSession(ClientSession):
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
class OnePlaceSession(IndexedSession):
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
            await IndexedSession.on_place_changed(self, read)
        self.fresh = True


def candidates(place: Any, resources: dict[str, dict[str, dict[str, Any]]]
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
    for exporter, group_name, res_name, res in candidates(place, resources):
        if "cls" not in res.data:   # deleted by its exporter (labgrid keeps the entry, emptied)
            continue
        if place.getmatch((exporter, group_name, res.cls, res_name)):
            matched[res.cls] = dict(res.args)
    return PlaceInfo(name=place.name, tags=dict(place.tags), acquired=place.acquired,
                     reserved_by=place.reservation or None,
                     matches=tuple(str(m) for m in place.matches), comment=place.comment,
                     resources=matched)


class PlaceIndex:
    """Every place as benchfarm reads it, kept current from the session's updates: a place is
    matched against the resources again only when it or a group it matches changed (at 1,000
    places, re-matching all of them on every read cost 11 ms idle, 35 ms under load)."""

    def __init__(self, session: IndexedSession) -> None:
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
