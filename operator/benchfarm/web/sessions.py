"""The dashboard's sign-in state, kept in its own process: who is signed in (`Sessions`), which
client keeps failing to sign in (`FailedSignIns`), whether a form came from this site's own page
(`cross_origin`) and whether the cookie must be `Secure` (`cookie_secure`). Pure: the time is
handed in.

Why it exists: a browser's cookie carries an opaque session id, never the person's Kubernetes
token (a cookie ends up where a token must not: a proxy's log, a shared profile, a plain-HTTP
hop); a page elsewhere must not sign a person in as someone else (login CSRF); and each failed
sign-in costs the API server a TokenReview, so a client that keeps failing is made to wait.
Every table here is bounded in count and age (`Expiring`: the least recently used entry goes
first), so no visitor grows the dashboard's memory. The sessions live in memory only: a restart
of the dashboard signs everyone out.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar
from urllib.parse import urlsplit

from benchfarm.core.policy.software import Network, networks

SESSIONS = 10_000            # sessions kept at once; the least recently used is signed out first
SESSION_SECONDS = 8 * 3600   # a session's lifetime: a working day, then the person signs in again
PER_USER = 16                # sessions one user keeps at once (their browsers); a 17th ends the first
BURST = 10                   # failed sign-ins a client may make in a row ...
REFILL_SECONDS = 6.0         # ... then one more every this many seconds (10 a minute)
CLIENTS = 4096               # clients whose failures are remembered at once

CookieSecure = Literal["auto", "always", "never"]
K = TypeVar("K")
V = TypeVar("V")


class Expiring(Generic[K, V]):
    """At most `size` entries, each kept until its expiry (`ttl` seconds after it was put, unless
    given); when full, the least recently used goes. Thread-safe: the access cache is used from
    the threads the dashboard's blocking calls run on."""

    def __init__(self, size: int, ttl: float) -> None:
        self.size, self.ttl = size, ttl
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, now: float) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            if hit[0] <= now:
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return hit[1]

    def put(self, key: K, value: V, now: float, ttl: float | None = None) -> None:
        with self._lock:
            self._items[key] = (now + (self.ttl if ttl is None else ttl), value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)


def digest(secret: str) -> str:
    """The key a secret (a token, a session id) is kept under: its SHA-256, so that the tables
    hold nothing a memory dump could replay as a key."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    token: str = field(repr=False)   # the person's Kubernetes token: reviewed again every TTL
    user: str                        # who the TokenReview said it was at sign-in
    expires: float


class Sessions:
    """Signed-in people by session id (the cookie's value, random, 256 bits). One user keeps at
    most `per_user` sessions: signing in again and again with one token cannot push everyone
    else's sessions out of the table."""

    def __init__(self, size: int = SESSIONS, lifetime: float = SESSION_SECONDS,
                 per_user: int = PER_USER) -> None:
        self.lifetime, self.per_user = lifetime, per_user
        self._table: Expiring[str, Session] = Expiring(size, lifetime)
        self._of: Expiring[str, tuple[str, ...]] = Expiring(size, lifetime)  # user -> their ids

    def open(self, token: str, user: str, now: float) -> str:
        """A new session for a reviewed token: its id, for the cookie."""
        sid = secrets.token_urlsafe(32)
        key = digest(sid)
        self._table.put(key, Session(token, user, now + self.lifetime), now)
        theirs = (*(k for k in self._of.get(user, now) or () if k in self._table), key)
        for old in theirs[:-self.per_user]:
            self._table.pop(old)
        self._of.put(user, theirs[-self.per_user:], now)
        return sid

    def get(self, sid: str, now: float) -> Session | None:
        return self._table.get(digest(sid), now) if sid else None

    def close(self, sid: str) -> None:
        if sid:
            self._table.pop(digest(sid))

    def __len__(self) -> int:
        return len(self._table)


def proxies(text: str) -> tuple[Network, ...]:
    """BENCHFARM_WEB_TRUSTED_PROXIES: comma-separated CIDRs (or addresses); ValueError names a
    bad one."""
    return networks(text, "BENCHFARM_WEB_TRUSTED_PROXIES")


def _address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address((text or "").strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def client_of(peer: str | None, forwarded_for: str = "",
              trusted: Sequence[Network] = ()) -> str:
    """The client a failure counts against: the peer's IPv4 address, or its IPv6 /64 (one host
    often holds a whole /64). When the peer is a trusted proxy (an ingress), the client is the
    last address of `X-Forwarded-For` that is not one: each proxy appends the address that
    connected to it, so what a client wrote there itself comes before and is passed over."""
    def ours(ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        return ip is not None and any(ip in net for net in trusted)
    ip, text = _address(peer), peer or "unknown"
    if ours(ip):
        for hop in reversed([h.strip() for h in forwarded_for.split(",") if h.strip()]):
            ip, text = _address(hop), hop[:64]
            if not ours(ip):
                break
    if ip is None:
        return text
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class FailedSignIns:
    """A token bucket per client: each failed sign-in takes a token, `burst` at most, one back
    every `refill` seconds. A client with none left waits (`wait`) and gets no TokenReview. A
    bucket forgotten (its table full, or after the time it takes to fill) is a full one."""

    def __init__(self, burst: int = BURST, refill: float = REFILL_SECONDS,
                 clients: int = CLIENTS) -> None:
        self.burst, self.refill = burst, refill
        self._buckets: Expiring[str, tuple[float, float]] = Expiring(clients, burst * refill)

    def _tokens(self, client: str, now: float) -> float:
        hit = self._buckets.get(client, now)
        if hit is None:
            return float(self.burst)
        tokens, at = hit
        return min(float(self.burst), tokens + (now - at) / self.refill)

    def wait(self, client: str, now: float) -> float:
        """Seconds until `client` may try again; 0: now."""
        tokens = self._tokens(client, now)
        return 0.0 if tokens >= 1 else (1 - tokens) * self.refill

    def failed(self, client: str, now: float) -> None:
        tokens = max(0.0, self._tokens(client, now) - 1)
        # forgotten once full again: (burst - tokens) refills from now
        self._buckets.put(client, (tokens, now), now, ttl=(self.burst - tokens) * self.refill)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL; None for anything else ("null", a bad port)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme]


def cross_origin(origin: str | None, referer: str | None, host: str, tls: bool,
                 site_url: str = "") -> str | None:
    """Why a POST did not come from this site's own page, or None when it did.

    The page's origin is the `Origin` header (every current browser sends it with a form's
    POST), else the `Referer`'s. It is this site's when its host and port are the ones the
    request was sent to (`Host`: a page elsewhere cannot choose it) or those of the site's URL
    (`BENCHFARM_WEB_URL`, for a proxy that rewrites `Host`). The scheme is not compared with the
    request's (behind a TLS-terminating ingress the request is plain HTTP, the page HTTPS), but a
    request that came in over TLS takes only an HTTPS page."""
    claimed = origin if origin is not None else referer
    if not claimed:
        return "the sign-in form must be sent from this site's own page (no Origin or Referer)"
    page = _origin(claimed)
    if page is None:
        return f"the sign-in form must be sent from this site's own page, not from {claimed!r}"
    ours = []
    own = _origin(f"{page[0]}://{host}") if host else None
    if own is not None:
        ours.append(own[1:])
    if site_url and (site := _origin(site_url)) is not None:
        ours.append(site[1:])
    if page[1:] not in ours or (tls and page[0] != "https"):
        port = "" if page[2] == _DEFAULT_PORTS[page[0]] else f":{page[2]}"
        return (f"the sign-in form must be sent from this site's own page, not from "
                f"{page[0]}://{page[1]}{port}")
    return None


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cookie_secure(mode: CookieSecure, tls: bool, host: str, local_address: str | None) -> bool:
    """Whether the session cookie is marked `Secure` (the browser sends it over HTTPS only).

    `always` and `never` say so; `auto` marks it unless the site is plain HTTP on loopback: the
    request came in without TLS, on a loopback address of this host, for a loopback host name
    (the embedded lab). Behind an ingress the host asked for is the site's public name, so the
    cookie is `Secure` though the request itself was plain HTTP."""
    if mode != "auto":
        return mode == "always"
    hostname = urlsplit(f"//{host}").hostname if host else None
    return tls or not (_loopback(local_address) and _loopback(hostname))
