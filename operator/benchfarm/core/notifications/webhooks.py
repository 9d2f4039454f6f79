"""Where a notification's webhook may point. Pure.

A webhook's URL passes the same checks as a tenant's software URL (`core.policy.software`): its
host on the namespace's allow-list (LabPolicy webhookHosts), never a loopback, link-local,
multicast or internal address, a private one only when listed itself. The lab may open loopback
ports for receivers of its own (BENCHFARM_WEBHOOK_LOOPBACK_PORTS: the embedded lab's tests); no
tenant can.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from benchfarm.core.policy.software import (
    DEFAULT_PORTS,
    Address,
    Network,
    address_problem,
    host_listed,
    http_host,
)


def ports(text: str) -> frozenset[int]:
    """`8080,27060-27069`: ports and inclusive ranges; ValueError names a bad item."""
    out: set[int] = set()
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        low, _, high = item.partition("-")
        try:
            a, b = int(low), int(high or low)
        except ValueError as exc:
            raise ValueError(f"BENCHFARM_WEBHOOK_LOOPBACK_PORTS: {item!r} is not a port or "
                             "a range of ports") from exc
        if not 0 < a <= b < 65536:
            raise ValueError(f"BENCHFARM_WEBHOOK_LOOPBACK_PORTS: {item!r} is out of range")
        out.update(range(a, b + 1))
    return frozenset(out)


@dataclass(frozen=True)
class WebhookReach:
    """Where one namespace's webhooks may post, under the LabPolicy in force."""

    hosts: tuple[str, ...]                 # the namespace's LabPolicy webhookHosts
    internal: tuple[Network, ...] = ()
    loopback_ports: frozenset[int] = field(default_factory=frozenset)

    def address_problem(self, address: Address, port: int) -> str | None:
        """Why a webhook may not connect to this address (a URL's literal one, or one its host
        resolved to), or None."""
        if address.is_loopback and port in self.loopback_ports:
            return None       # a receiver of the lab's own, on the operator's host
        return address_problem(address, self.internal,
                               listed=host_listed(self.hosts, str(address), port))

    def url_problem(self, url: str) -> str | None:
        """Why a webhook may not post to this URL as written (the notifier checks again what
        its host resolves to, at each attempt), or None."""
        if "\\" in url or any(ord(c) < 33 or ord(c) == 127 for c in url):
            return "backslashes, spaces and control characters are not accepted"
        if urlsplit(url).scheme.lower() not in DEFAULT_PORTS:
            return "only http(s):// URLs are accepted"
        where = http_host(url)
        if isinstance(where, str):
            return where
        host, port, literal = where
        if literal is not None and (problem := self.address_problem(literal, port)):
            return problem
        if not host_listed(self.hosts, host, port):
            shown = f"[{host}]" if ":" in host else host
            return (f"host {shown}:{port} is not on the namespace's webhookHosts (LabPolicy); "
                    f"it may post to: {', '.join(self.hosts) or 'none'}")
        return None
