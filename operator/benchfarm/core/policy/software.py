"""What software a namespace may name: the one check the operator (at admission) and the session
(before it downloads anything, and before its cache answers) both make.

A run's software is fetched by the lab, with the lab's own credentials and from inside the lab's
network, so a URL is a request made on the tenant's behalf. It may name only:
- objects in the lab's bucket under the namespace's own `<namespace>/` or a source the LabPolicy
  grants it (`softwareSources`, e.g. the lab's published `builds/`), and
- http(s) hosts on the namespace's allow-list (`softwareHosts`), never at a loopback,
  link-local, unspecified or multicast address or in the lab's internal ranges
  (BENCHFARM_INTERNAL_CIDRS: the cluster's pod and service networks, the lab's services), and
  at a private or otherwise non-global address (RFC 1918, carrier-grade NAT 100.64/10, ULA
  fc00::/7, reserved and documentation ranges, and IPv6 forms that carry an IPv4 address:
  IPv4-mapped and -compatible, NAT64 64:ff9b::/96, 6to4 2002::/16) only when `softwareHosts`
  lists that address itself: a listed *name* that resolves to one is refused, since what a
  name resolves to is not the lab's decision.
And only if the namespace may boot its own software at all (`allowSoftware`): files and a kernel
command line (`bootArgs`) alike, since either changes what runs as root on a shared board.

Pure: a host name is checked here as written; the session resolves it and checks every address
with `SoftwareReach.address_problem` (store.software).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from benchfarm.api.labpolicy import NamespacePolicy
from benchfarm.api.outcomes import Refusal
from benchfarm.api.runs import Artifact, SoftwareSet

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_PORTS = {"http": 80, "https": 443}


def networks(text: str, setting: str) -> tuple[Network, ...]:
    """A setting's comma-separated CIDRs (or addresses); ValueError names the setting and the
    bad one."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if item:
            try:
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise ValueError(f"{setting}: {item!r} is not a CIDR or an address") from exc
    return tuple(out)


def internal_networks(text: str) -> tuple[Network, ...]:
    """BENCHFARM_INTERNAL_CIDRS: the lab's internal ranges, never a tenant's to reach."""
    return networks(text, "BENCHFARM_INTERNAL_CIDRS")


# IPv6 forms that carry an IPv4 address at their end (RFC 6052 NAT64's well-known prefix, the
# deprecated IPv4-compatible form); IPv4-mapped (::ffff:0:0/96) and 6to4 (2002::/16) have
# `ipaddress` properties of their own. Teredo (2001::/32) and local-use NAT64 (64:ff9b:1::/48,
# whose IPv4 address sits where its prefix length says) are not global: refused as such.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
CARRIER_GRADE_NAT = ipaddress.IPv4Network("100.64.0.0/10")
UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):  # not :: or ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _never(address: Address, internal: Iterable[Network]) -> str | None:
    """What no LabPolicy entry allows: the host itself, its link, multicast, the lab's ranges."""
    for what, bad in (("a loopback", address.is_loopback),
                      ("a link-local", address.is_link_local),
                      ("an unspecified", address.is_unspecified),
                      ("a multicast", address.is_multicast)):
        if bad:
            return f"{what} address"
    for net in internal:
        if address.version == net.version and address in net:
            return f"in the lab's internal range {net}"
    return None


def _not_global(address: Address) -> str | None:
    """Why an address is not on the internet (`ipaddress`'s own tables), or None."""
    if address.version == 4 and address in CARRIER_GRADE_NAT:
        return "a carrier-grade NAT address (100.64.0.0/10)"
    if address.version == 6 and address in UNIQUE_LOCAL:
        return "a unique local address (fc00::/7)"
    if address.is_private:
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "a reserved, non-global address"
    return None


def address_problem(address: Address, internal: Iterable[Network] = (), *,
                    listed: bool = False) -> str | None:
    """Why software may not be fetched from this address, or None. `listed`: the LabPolicy
    names this very address in `softwareHosts`, which allows a private or otherwise non-global
    one (never a loopback, link-local, unspecified, multicast or lab-internal one). An IPv6
    address that carries an IPv4 address is judged by both, and is global only if what it
    carries is (NAT64 and 6to4 of a public address are)."""
    inner = embedded_ipv4(address)
    why = _never(address, internal)
    if why is None and inner is not None:
        why = _never(inner, internal)
        if why is None and not listed:
            why = _not_global(inner)
        if why:
            return f"{address} carries {inner}, {why}"
    elif why is None and not listed:
        why = _not_global(address)
    return f"{address} is {why}" if why else None


@dataclass(frozen=True)
class Problem:
    reason: Refusal
    message: str


@dataclass(frozen=True)
class SoftwareReach:
    """What one namespace's software may name, under the LabPolicy in force."""

    policy: NamespacePolicy
    namespace: str
    bucket: str
    internal: tuple[Network, ...] = field(default=())

    def reachable(self) -> str:
        """What the namespace may reach, for messages."""
        prefixes = [f"s3://{self.bucket}/{p}" for p in [f"{self.namespace}/",
                                                        *self.policy.softwareSources]]
        hosts = ", ".join(self.policy.softwareHosts) or "none"
        return f"this namespace may read {', '.join(prefixes)} and http(s) hosts: {hosts}"

    def software_problem(self, software: SoftwareSet | None) -> Problem | None:
        """The first thing wrong with a software set's URLs, or None."""
        if software is None:
            return None
        parts = software.parts()
        files = [(p, a) for p in parts if isinstance(a := getattr(software, p), Artifact)]
        if parts and not self.policy.allowSoftware:   # bootArgs alone too: root all the same
            return Problem(Refusal.softwareNotAllowed,
                           f"namespace {self.namespace} may not boot its own software or kernel "
                           f"command line ({', '.join(parts)}) on the lab's shared boards "
                           "(LabPolicy allowSoftware is false for it); ask the lab's "
                           "administrators")
        for part, artifact in files:
            for url in (artifact.url, artifact.sha256Url):
                problem = self.url_problem(part, url) if url else None
                if problem:
                    return problem
        return None

    def lists(self, host: str, port: int) -> bool:
        """Does `softwareHosts` name this host (a name as written, an address in any spelling),
        on any port or this one?"""
        return host_listed(self.policy.softwareHosts, host, port)

    def address_problem(self, address: Address, port: int) -> str | None:
        """Why software may not be fetched from this address (a URL's literal one, or one its
        host name resolved to), or None."""
        return address_problem(address, self.internal, listed=self.lists(str(address), port))

    def url_problem(self, part: str, url: str) -> Problem | None:
        why = self._why(url)
        if why is None:
            return None
        return Problem(Refusal.artifactForbidden,
                       f"software {part}: {url} may not be fetched: {why}; {self.reachable()}")

    def _why(self, url: str) -> str | None:
        if any(c in url for c in "%\\") or any(ord(c) < 33 or ord(c) == 127 for c in url):
            return "percent-encoding, backslashes and control characters are not accepted"
        scheme, _, rest = url.partition("://")
        if scheme == "s3":
            bucket, _, key = rest.partition("/")
            if bucket != self.bucket:
                return f"bucket {bucket!r} is not the lab's artifact bucket"
            if any(c in key for c in "?#"):
                return "an object key with '?' or '#' is not accepted"
            if any(s in ("", ".", "..") for s in key.split("/")):
                return "empty, '.' and '..' path segments are not accepted"
            allowed = [f"{self.namespace}/", *self.policy.softwareSources]
            if not any(key.startswith(p) for p in allowed):
                return "the object is outside what the namespace may read"
            return None
        if scheme not in DEFAULT_PORTS:
            return "only s3:// and http(s):// URLs are accepted"
        where = http_host(url)
        if isinstance(where, str):
            return where
        host, port, literal = where
        if literal is not None:
            problem = self.address_problem(literal, port)
            if problem:
                return problem
        if not self.lists(host, port):
            shown = f"[{host}]" if ":" in host else host
            return f"host {shown}:{port} is not on the namespace's allow-list"
        return None


def http_host(url: str) -> tuple[str, int, Address | None] | str:
    """The host, port and literal address (None for a name) of an http(s) URL, or what is wrong
    with its authority: one reading of a URL for software downloads and webhooks alike."""
    parts = urlsplit(url)
    try:
        host, port = (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS[parts.scheme.lower()]
    except ValueError:
        return "the port is not a number"
    if "@" in parts.netloc:
        return "user names and passwords in URLs are not accepted"
    if not host:
        return "the URL names no host"
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    return host, port, literal


def host_listed(entries: Iterable[str], host: str, port: int) -> bool:
    """Does an allow-list of hosts (LabPolicy softwareHosts, webhookHosts: `name`, `name:port`,
    an address, `[v6]:port`) name this host (a name as written, an address in any spelling), on
    any port or this one?"""
    want = _canonical(host)
    for entry in entries:
        if entry.startswith("["):              # [v6] or [v6]:port
            name, _, rest = entry[1:].partition("]")
            entry_port = rest.removeprefix(":")
        elif entry.count(":") == 1:            # name:port
            name, _, entry_port = entry.partition(":")
        else:
            name, entry_port = entry, ""
        if _canonical(name) == want and entry_port in ("", str(port)):
            return True
    return False


def _canonical(host: str) -> str:
    """A host as `lists` compares it: an address in its one spelling, a name lower-case."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host.lower()
