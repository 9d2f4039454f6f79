"""Real receivers of notifications on loopback, for the tests: an HTTP server that records every
POST, and an SMTP server (aiosmtpd) that speaks STARTTLS only, with a certificate of a CA made
here with the `cryptography` package. Both stop and start again on the same port (a receiver
that is down for a while)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import select
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class WebhookReceiver:
    """POSTs to http://127.0.0.1:PORT/..., recorded as {"path", "headers", "body"}; answers
    `answer` (200 by default)."""

    def __init__(self, port: int = 0, answer: int = 200) -> None:
        self.port = port
        self.answer = answer
        self.received: list[dict[str, Any]] = []
        self.server: ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.received.append({"path": self.path, "headers": dict(self.headers),
                                              "body": body})
                self.send_response(receiver.answer)
                if 300 <= receiver.answer < 400:
                    self.send_header("Location", "http://127.0.0.1:1/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [r["body"] for r in self.received]


class TricklingReceiver:
    """A receiver that takes its time: it accepts on 127.0.0.1:PORT (TLS with `context`), reads
    what comes up to a blank line, then answers `answer` one byte every `every` seconds (an HTTP
    status line that never ends: a webhook receiver; `220 ` and a greeting: an SMTP server;
    nothing at all), until the client goes. Each connection is recorded as {"opened", "closed"} (monotonic
    seconds; closed: when the client was found gone)."""

    def __init__(self, port: int = 0, every: float = 1.0, answer: bytes = b"HTTP/1.1 200 OK",
                 context: ssl.SSLContext | None = None, read_first: bool = True) -> None:
        self.port = port
        self.every = every
        self.answer = answer
        self.context = context
        self.read_first = read_first
        self.connections: list[dict[str, float | None]] = []
        self.server: socket.socket | None = None
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> TricklingReceiver:
        self.server = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self.port = self.server.getsockname()[1]
        self.server.settimeout(0.5)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self.stopping.is_set():
            assert self.server is not None
            try:
                conn, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            record: dict[str, float | None] = {"opened": time.monotonic(), "closed": None}
            self.connections.append(record)
            threading.Thread(target=self._trickle, args=(conn, record), daemon=True).start()

    def _trickle(self, conn: socket.socket, record: dict[str, float | None]) -> None:
        try:
            if self.context is not None:
                conn.settimeout(30)
                conn = self.context.wrap_socket(conn, server_side=True)
            if self.read_first:
                conn.settimeout(30)
                seen = b""
                while b"\r\n\r\n" not in seen:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    seen += chunk
            while not self.stopping.is_set():
                for byte in self.answer or b"\0":
                    if self.answer:
                        conn.sendall(bytes([byte]))
                    # wait `every`, seeing at once when the client goes (end of file)
                    readable, _, _ = select.select([conn], [], [], self.every)
                    if readable and not conn.recv(4096):
                        return
        except OSError:
            pass
        finally:
            record["closed"] = time.monotonic()
            conn.close()

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.close()
            self.server = None

    def held(self) -> list[float]:
        """Seconds each finished connection was held open by the client."""
        return [float(c["closed"]) - float(c["opened"] or 0) for c in list(self.connections)
                if c["closed"] is not None]


def tls_files(folder: Path, ca_file: Path | None = None) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 issued by it: (cert, key, CA cert) paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)

    def cert(subject: str, key: Any, issuer: x509.Name | None, signer: Any, ca: bool) -> Any:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(minutes=5))
             .not_valid_after(now + dt.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        else:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = cert("benchfarm test SMTP CA", ca_key, None, ca_key, True)
    server = cert("127.0.0.1", key, ca_cert.subject, ca_key, False)
    pem = serialization.Encoding.PEM
    paths = folder / "smtp.crt", folder / "smtp.key", ca_file or folder / "smtp-ca.pem"
    paths[0].write_bytes(server.public_bytes(pem))
    paths[1].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].parent.mkdir(parents=True, exist_ok=True)
    paths[2].write_bytes(ca_cert.public_bytes(pem))
    return paths


class SmtpServer:
    """aiosmtpd on 127.0.0.1:PORT, STARTTLS required; messages recorded (aiosmtpd's Envelope:
    `mail_from`, `rcpt_tos`, `content`) with whether the session was under TLS."""

    def __init__(self, port: int, cert: Path, key: Path) -> None:
        self.port = port
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.messages: list[dict[str, Any]] = []
        self.controller: Any = None

    def start(self) -> SmtpServer:
        from aiosmtpd.controller import Controller
        server = self

        class Handler:
            async def handle_DATA(self, srv: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                server.messages.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                                        "content": envelope.content,
                                        "tls": session.ssl is not None})
                return "250 OK"

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port,
                                     tls_context=self.context, require_starttls=True,
                                     ready_timeout=10)
        self.controller.start()
        return self

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def wait(self, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.messages
