"""One deadline for a whole attempt: connecting, sending and reading the answer together.

A socket's timeout bounds one operation, so a receiver that sends a byte every few seconds never
lets one expire and keeps its delivery (and the delivery thread) for as long as it likes. Here
every network operation of an attempt first sets its socket's timeout to what is left of the
attempt's deadline, and fails at once when nothing is: the TCP connect, each send, each read
(http.client's and smtplib's reads go through `recv_into`), and under TLS the handshake and every
read and write. The name lookup before the connection counts against the deadline when it
returns; it is bounded by the system's resolver (its own timeout and attempts, resolv.conf).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any

# the module's socket type, by a name the class's own `socket` method does not hide
Socket = socket.socket


class Deadline:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.at = clock() + seconds

    def left(self) -> float:
        """Seconds left; TimeoutError (an OSError, as a socket's timeout) when none are."""
        left = self.at - self.clock()
        if left <= 0:
            raise TimeoutError(f"the attempt's deadline of {self.seconds:g} s passed")
        return left

    @property
    def passed(self) -> bool:
        return self.clock() >= self.at

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM,
               proto: int = 0) -> socket.socket:
        """A socket whose every operation ends by the deadline."""
        sock = _BoundedSocket(family, kind, proto)
        sock.deadline = self
        return sock

    def connect(self, addresses: Iterable[tuple[int, int, int, Any]]) -> Socket:
        """The first of `addresses` (family, kind, proto, address) that accepts a connection
        within the deadline; the last connection's OSError when none does (none tried once the
        deadline passed), or an OSError saying there was no address."""
        error: OSError | None = None
        for family, kind, proto, address in addresses:
            sock = self.socket(family, kind, proto)
            try:
                sock.connect(address)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
                if self.passed:
                    break
        raise error or OSError("no address to connect to")

    def tls(self, context: ssl.SSLContext) -> ssl.SSLContext:
        """`context`, whose TLS sockets (its `wrap_socket`, smtplib's STARTTLS) end by the
        deadline, their handshake too."""
        context.sslsocket_class = type("BoundedTLSSocket", (_BoundedTLSSocket,),
                                       {"deadline": self})
        return context


class _BoundedSocket(socket.socket):
    deadline: Deadline

    def connect(self, address: Any) -> None:
        self.settimeout(self.deadline.left())
        super().connect(address)

    def send(self, data: Any, flags: int = 0) -> int:
        self.settimeout(self.deadline.left())
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.settimeout(self.deadline.left())      # sendall's timeout bounds all of it
        super().sendall(data, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self.settimeout(self.deadline.left())
        return super().recv(bufsize, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.settimeout(self.deadline.left())
        return super().recv_into(buffer, nbytes, flags)


class _BoundedTLSSocket(ssl.SSLSocket):
    """ssl's own socket, each of whose operations that touch the network (the OpenSSL call
    bounds its whole wait by the socket's timeout) gets what is left of the deadline first."""

    deadline: Deadline       # set on the class `Deadline.tls` makes for one attempt

    def do_handshake(self, block: bool = False) -> None:
        self.settimeout(self.deadline.left())
        super().do_handshake(block)

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # noqa: A002 - ssl's name
        self.settimeout(self.deadline.left())
        return super().read(len, buffer)

    def write(self, data: Any) -> int:
        self.settimeout(self.deadline.left())
        return super().write(data)

    def send(self, data: Any, flags: int = 0) -> int:
        self.settimeout(self.deadline.left())
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.settimeout(self.deadline.left())
        super().sendall(data, flags)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self.settimeout(self.deadline.left())
        return super().recv(buflen, flags)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self.settimeout(self.deadline.left())
        return super().recv_into(buffer, nbytes, flags)

    def unwrap(self) -> socket.socket:
        self.settimeout(self.deadline.left())
        return super().unwrap()
