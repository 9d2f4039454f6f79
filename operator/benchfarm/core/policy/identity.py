"""Who a labgrid client is: the certificate the lab issued it, never the name it claims.

labgrid's coordinator takes the name a client sends in its stream's startup message
("host/user", from LG_HOSTNAME/LG_USERNAME) and decides by it who holds a place. Where the
coordinator requires client certificates (`benchfarm.lab.labgrid_compat.CheckingCoordinator`),
a certificate's URI subject alternative names say what its holder may be:

    labgrid:<role>:<name>

- `operator`: benchfarm's operator (and the lab's own administration); `name` is a client name
  it may claim, or `host/*` for every user of that host (the operator's `benchfarm/*`: the
  identities of its runs, leases and health checks, which it acquires and releases for them).
  It may do everything labgrid offers. `*` (any name at all) is the lab administrator's.
- `session`: one board session; it claims exactly `name` (`benchfarm/run-<uid>`), and may acquire
  and release (its own hold only) and allow, but not add, change or delete places.
- `person`: a lease's user (`desk/carol`); it claims exactly `name` and reads: the place it is
  allowed on it drives through the exporters, never through the coordinator's place calls.
- `exporter`: an exporter of that name (its ExporterStream), never a client.
- `place`: not an identity but a bound: a certificate with `place` grants may acquire only those
  places (a session's certificate names its board: it cannot take another, free or not).

Pure: the coordinator hands the URIs it read from the peer's certificate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SCHEME = "labgrid"
ROLES = ("operator", "session", "person", "exporter")
BOUNDS = ("place",)

# labgrid's RPCs that change places or who holds them; the rest read (GetPlaces,
# GetReservations, PollReservation) or are the streams, checked on their own
PLACE_ADMIN = frozenset({"AddPlace", "DeletePlace", "AddPlaceAlias", "DeletePlaceAlias",
                         "SetPlaceTags", "SetPlaceComment", "AddPlaceMatch", "DeletePlaceMatch",
                         "CreateReservation", "CancelReservation"})
HOLDING = frozenset({"AcquirePlace", "ReleasePlace", "AllowPlace"})
READING = frozenset({"GetPlaces", "GetReservations", "PollReservation"})


@dataclass(frozen=True)
class Grant:
    """One `labgrid:<role>:<name>` of a certificate."""

    role: str
    name: str

    @property
    def uri(self) -> str:
        return f"{SCHEME}:{self.role}:{self.name}"

    def covers(self, claimed: str) -> bool:
        """Does this grant let its holder be client `claimed` ("host/user")?"""
        if self.role in ("exporter", *BOUNDS):
            return False
        if self.role == "operator" and self.name == "*":
            host, _, user = claimed.partition("/")
            return bool(host and user) and "/" not in user
        if self.role == "operator" and self.name.endswith("/*"):
            host = self.name[:-2]
            user = claimed[len(host) + 1:] if claimed.startswith(host + "/") else ""
            return bool(user) and "/" not in user
        return claimed == self.name


def grant_uri(role: str, name: str) -> str:
    """The URI that grants `role` and `name` (what the issuer writes into a certificate)."""
    return Grant(*_valid(role, name)).uri


def _valid(role: str, name: str) -> tuple[str, str]:
    if role not in ROLES and role not in BOUNDS:
        raise ValueError(f"unknown labgrid role {role!r}")
    if role in ("exporter", *BOUNDS):
        ok = bool(name) and "/" not in name and "*" not in name
    elif role == "operator" and name == "*":
        ok = True
    else:
        host, _, user = name.partition("/")
        ok = bool(host and user) and "/" not in user and (user != "*" or role == "operator")
        ok = ok and "*" not in host and ("*" not in user or user == "*")
    if not ok or any(c.isspace() or c in ":" for c in name):
        raise ValueError(f"not a labgrid {role} name: {name!r}")
    return role, name


def grants(uris: Iterable[str]) -> list[Grant]:
    """The grants among a certificate's URIs (others, and malformed ones, grant nothing)."""
    out = []
    for uri in uris:
        scheme, _, rest = uri.partition(":")
        role, _, name = rest.partition(":")
        if scheme != SCHEME:
            continue
        try:
            out.append(Grant(*_valid(role, name)))
        except ValueError:
            continue
    return out


def may_claim(held: Iterable[Grant], claimed: str) -> bool:
    """May a client with these grants start a client stream as `claimed`?"""
    return any(g.covers(claimed) for g in held)


def may_export(held: Iterable[Grant], name: str) -> bool:
    """May it be exporter `name`?"""
    return any(g.role == "exporter" and g.name == name for g in held)


def role(held: Iterable[Grant], claimed: str) -> str | None:
    """The role under which `claimed` is held: the most powerful grant that covers it."""
    roles = {g.role for g in held if g.covers(claimed)}
    return next((r for r in ROLES if r in roles), None)


def may_call(held: Iterable[Grant], claimed: str | None, method: str) -> bool:
    """May a client, started as `claimed` (None: no client stream yet), call `method`?
    ReleasePlace of another's hold and AllowPlace on another's place are the coordinator's to
    refuse (it knows who holds what): see `may_release`."""
    if claimed is None:
        return False
    r = role(list(held), claimed)
    if r == "operator":
        return True
    if r == "session":
        return method in HOLDING or method in READING
    if r == "person":
        return method in READING
    return False


def may_release(held: Iterable[Grant], claimed: str, holder: str | None) -> bool:
    """May `claimed` release a place `holder` holds? Only the operator releases another's."""
    return role(list(held), claimed) == "operator" or holder in (None, claimed)


def may_acquire(held: Iterable[Grant], claimed: str, place: str) -> bool:
    """May `claimed` acquire `place`? Within its role's calls (`may_call`), a certificate that
    names places (`place` grants) acquires only those."""
    held = list(held)
    if role(held, claimed) == "operator":
        return True
    bounds = {g.name for g in held if g.role == "place"}
    return not bounds or place in bounds
