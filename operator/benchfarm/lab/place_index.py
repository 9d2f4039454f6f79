"""A labgrid place as benchfarm reads it (`PlaceInfo`) and the index that keeps every place's
reading current from the coordinator's updates (`PlaceIndex`). It reads labgrid's place and
resource objects as the session holds them, without importing labgrid: `lab.labgrid_client` owns
the session whose updates it follows, `lab.coordinator` the connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchfarm.lab.labgrid_client import IndexedSession


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
