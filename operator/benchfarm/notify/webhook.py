"""A webhook's POST, to an address that was checked: the host is resolved and every address it
resolves to must be one the namespace's webhooks may reach (`core.notifications.webhooks.WebhookReach`), the
connection goes to the address checked (no second lookup to rebind), TLS verifies the host's
name, no proxy is used and no redirect is followed (a receiver that redirects is answered as a
failure: following it would post the body where no check was made). The attempt has one deadline
(`notify.deadline`): a receiver slow to accept, to read or to answer, however it trickles, has
the attempt fail when it passes.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

from benchfarm.core.notifications.webhooks import WebhookReach
from benchfarm.core.policy.software import DEFAULT_PORTS
from benchfarm.notify import DeliveryFailed
from benchfarm.notify.deadline import Deadline

DEADLINE = 20.0         # seconds for the attempt: connecting, sending and the answer together


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


def _connect(host: str, port: int, reach: WebhookReach, deadline: Deadline) -> socket.socket:
    try:
        return deadline.connect(_addresses(host, port, reach))
    except OSError as error:
        raise DeliveryFailed(_late(host, port, deadline) if deadline.passed else
                             f"no connection to {host}:{port}: {error}") from error


def _late(host: str, port: int, deadline: Deadline) -> str:
    return (f"{host}:{port} took longer than the attempt's deadline of {deadline.seconds:g} s "
            "(connecting, sending and the answer together)")


def post(url: str, payload: bytes, headers: dict[str, str], reach: WebhookReach,
         seconds: float = DEADLINE) -> int:
    """POST the payload within `seconds` in all; returns the receiver's 2xx status, else
    raises DeliveryFailed."""
    deadline = Deadline(seconds)
    problem = reach.url_problem(url)
    if problem:
        raise DeliveryFailed(f"the LabPolicy does not let webhooks post there: {problem}")
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    port = parts.port or DEFAULT_PORTS[scheme]
    sock = _connect(host, port, reach, deadline)
    conn: http.client.HTTPConnection
    if scheme == "https":
        try:
            sock = deadline.tls(ssl.create_default_context()).wrap_socket(
                sock, server_hostname=host)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise DeliveryFailed(_late(host, port, deadline) if deadline.passed else
                                 f"TLS with {host}:{port} failed: {exc}") from exc
        conn = http.client.HTTPSConnection(host, port)
    else:
        conn = http.client.HTTPConnection(host, port)
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
        raise DeliveryFailed(_late(host, port, deadline) if deadline.passed else
                             f"POST to {host}:{port} failed: {exc}") from exc
    finally:
        conn.close()
    if not 200 <= resp.status < 300:
        what = "redirects are not followed" if 300 <= resp.status < 400 else resp.reason
        raise DeliveryFailed(f"the receiver answered HTTP {resp.status} ({what})")
    return resp.status
