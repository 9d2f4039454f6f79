"""A webhook's POST, to an address that was checked: the host is resolved and every address it
resolves to must be one the namespace's webhooks may reach (`core.notify.WebhookReach`), the
connection goes to the address checked (no second lookup to rebind), TLS verifies the host's
name, no proxy is used and no redirect is followed (a receiver that redirects is answered as a
failure: following it would post the body where no check was made).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

from ..core.notify import WebhookReach
from ..core.software_policy import DEFAULT_PORTS
from . import DeliveryFailed

TIMEOUT = 10.0          # seconds to connect, and without an answer


def _addresses(host: str, port: int, reach: WebhookReach) -> list[tuple[int, int, int, Any]]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        raise DeliveryFailed(f"{host} does not resolve") from exc
    out: list[tuple[int, int, int, Any]] = []
    for family, kind, proto, _, address in infos:
        problem = reach.address_problem(ipaddress.ip_address(str(address[0]).split("%", 1)[0]),
                                        port)
        if problem:
            raise DeliveryFailed(f"{host} resolves where webhooks may not post: {problem}")
        out.append((family, kind, proto, address))
    return out


def _connect(host: str, port: int, reach: WebhookReach, timeout: float) -> socket.socket:
    error: OSError | None = None
    for family, kind, proto, address in _addresses(host, port, reach):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise DeliveryFailed(f"no connection to {host}:{port}: {error}")


def post(url: str, payload: bytes, headers: dict[str, str], reach: WebhookReach,
         timeout: float = TIMEOUT) -> int:
    """POST the payload; returns the receiver's 2xx status, else raises DeliveryFailed."""
    problem = reach.url_problem(url)
    if problem:
        raise DeliveryFailed(f"the LabPolicy does not let webhooks post there: {problem}")
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port or DEFAULT_PORTS[scheme]
    sock = _connect(host, port, reach, timeout)
    conn: http.client.HTTPConnection
    if scheme == "https":
        try:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise DeliveryFailed(f"TLS with {host}:{port} failed: {exc}") from exc
        conn = http.client.HTTPSConnection(host, port, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.sock = sock
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        conn.request("POST", path, body=payload, headers={
            "Content-Type": "application/json", "User-Agent": "benchfarm-notifier", **headers})
        resp = conn.getresponse()
        resp.read(65536)
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryFailed(f"POST to {host}:{port} failed: {exc}") from exc
    finally:
        conn.close()
    if not 200 <= resp.status < 300:
        what = "redirects are not followed" if 300 <= resp.status < 400 else resp.reason
        raise DeliveryFailed(f"the receiver answered HTTP {resp.status} ({what})")
    return resp.status
