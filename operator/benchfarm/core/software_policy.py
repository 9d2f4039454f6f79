"""What software a namespace may name: the one check the operator (at admission) and the session
(before it downloads anything) both make.

A run's software is fetched by the lab, with the lab's own credentials and from inside the lab's
network, so a URL is a request made on the tenant's behalf. It may name only:
- objects in the lab's bucket under the namespace's own `<namespace>/` or a source the LabPolicy
  grants it (`softwareSources`, e.g. the lab's published `builds/`), and
- http(s) hosts on the namespace's allow-list (`softwareHosts`), never at a loopback,
  link-local, unspecified or multicast address or in the lab's internal ranges
  (BENCHFARM_INTERNAL_CIDRS: the cluster's pod and service networks, the lab's services).
And only if the namespace may boot its own software at all (`allowSoftware`).

Pure: a host name is checked here as written; the session resolves it and checks every address
with `address_problem` (store.software).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..api.models import Artifact, NamespacePolicy, SoftwareSet
from ..api.outcomes import Refusal

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_PORTS = {"http": 80, "https": 443}


def internal_networks(text: str) -> tuple[Network, ...]:
    """BENCHFARM_INTERNAL_CIDRS: comma-separated CIDRs (or addresses); ValueError names a bad
    one."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if item:
            try:
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise ValueError(f"BENCHFARM_INTERNAL_CIDRS: {item!r} is not a CIDR") from exc
    return tuple(out)


def address_problem(address: Address, internal: Iterable[Network] = ()) -> str | None:
    """Why software may not be fetched from this address, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for what, bad in (("loopback", address.is_loopback), ("link-local", address.is_link_local),
                      ("unspecified", address.is_unspecified),
                      ("multicast", address.is_multicast)):
        if bad:
            return f"{address} is a {what} address"
    for net in internal:
        if address.version == net.version and address in net:
            return f"{address} is in the lab's internal range {net}"
    return None


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
        files = [(p, getattr(software, p)) for p in software.parts()]
        files = [(p, a) for p, a in files if isinstance(a, Artifact)]
        if files and not self.policy.allowSoftware:
            return Problem(Refusal.softwareNotAllowed,
                           f"namespace {self.namespace} may not boot its own software on the "
                           "lab's shared boards (LabPolicy allowSoftware is false for it); ask "
                           "the lab's administrators")
        for part, artifact in files:
            for url in (artifact.url, artifact.sha256Url):
                problem = self.url_problem(part, url) if url else None
                if problem:
                    return problem
        return None

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
        parts = urlsplit(url)
        try:
            host, port = (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS[scheme]
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
        if literal is not None:
            problem = address_problem(literal, self.internal)
            if problem:
                return problem
        shown = f"[{host}]" if ":" in host else host
        if not any(entry.lower() in (shown, f"{shown}:{port}")
                   for entry in self.policy.softwareHosts):
            return f"host {shown}:{port} is not on the namespace's allow-list"
        return None
