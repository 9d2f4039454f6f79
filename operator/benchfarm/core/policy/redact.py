"""What a tenant reads must not show the lab's insides: its services' addresses, its host paths,
its credentials.

Messages that reach events, conditions and progress lines often carry an exception's text (an
outage of the store names its endpoint, a launcher its log file, a database driver its URL). The
lab's own log keeps them whole; what goes to the Kubernetes API passes through `Redactor` first.
It replaces:
- the lab's credentials (the store's secret key, the signing key, the database password) with
  `<redacted>`;
- any address on this host's loopback with a port (`127.0.0.1:21900`, `localhost:8080`,
  `[::1]:443`, urllib3's `host='127.0.0.1', port=21900`, libpq's `"10.0.0.5", port 5432`),
  and the lab's configured service
  endpoints (store, coordinator, dashboard, database, API server) wherever they are, with
  `<lab service>`: no tenant URL may point at loopback (`core.policy.software`), so nothing a
  tenant wrote is lost;
- absolute paths under the lab's own directories (its state, spool, software cache, kubeconfig,
  SSH configuration, device types, the Python environment) with `<lab path>/` and the file's
  name.

Pure: the values to hide are handed to `Redactor.of` (the Kubernetes client's, from the lab's
settings: `kubeapi.client.lab_redactor`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlsplit

SERVICE = "<lab service>"
SECRET = "<redacted>"
PATH = "<lab path>"

# host:port on loopback, however written; urllib3's HTTPConnectionPool(host=..., port=...) and
# libpq's `server at "host", port N`
LOOPBACK = re.compile(
    r"(?:\b127(?:\.\d{1,3}){3}|\blocalhost|\[::1\]|\[::ffff:127(?:\.\d{1,3}){3}\]):\d{1,5}\b"
    r"|host='[^']*', port=\d{1,5}|\"[^\"\s]*\", port \d{1,5}", re.IGNORECASE)
MIN_SECRET = 6        # shorter values would blank ordinary words


def _lab_path(match: re.Match[str]) -> str:
    rest = (match.group(1) or "").rstrip("/")
    return f"{PATH}/{rest.rsplit('/', 1)[-1]}" if rest else PATH


@dataclass(frozen=True)
class Redactor:
    """Hides the lab's credentials, service addresses and host paths in a message."""

    secrets: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = ()
    directories: tuple[str, ...] = ()

    @classmethod
    def of(cls, *, secrets: Iterable[str] = (), endpoints: Iterable[str] = (),
           directories: Iterable[str] = (), files: Iterable[str] = ()) -> Redactor:
        """From the lab's values: its credentials, its service endpoints (`HOST:PORT` or a URL,
        whose password is a secret too), its directories and its files (their directory is
        the lab's); empty values are none."""
        secrets = list(secrets)
        hosts: list[str] = []
        for value in endpoints:
            if "://" in value:
                parts = urlsplit(value)
                if parts.password:
                    secrets.append(parts.password)
                value = parts.netloc.rpartition("@")[2]
            hosts.append(value)
        dirs = list(directories) + [str(PurePosixPath(f).parent) for f in files if f]
        return cls(
            secrets=tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len,
                                 reverse=True)),
            endpoints=tuple(sorted({e for e in hosts if len(e) >= 3}, key=len, reverse=True)),
            directories=tuple(sorted({d.rstrip("/") for d in dirs if d.startswith("/") and
                                      d.rstrip("/").count("/") >= 2}, key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        for directory in self.directories:      # a file's name stays: it says what it was
            text = re.sub(re.escape(directory) + r"(/[^\s'\",;)]*)?", _lab_path, text)
        for secret in self.secrets:
            text = text.replace(secret, SECRET)
        for endpoint in self.endpoints:
            text = text.replace(endpoint, SERVICE)
        return LOOPBACK.sub(SERVICE, text)

    def status(self, status: dict[str, object]) -> dict[str, object]:
        """A status patch with its messages redacted: each condition's `message`, `progress`,
        the `message` of a hand-back (`sessionEnd`, `leaseEnd`, `healthCheckEnd`) and each
        `error` of a Notification's `deliveries`; nothing else (suites, commands and signatures
        are what they are)."""
        out = dict(status)
        for key, value in status.items():
            if key == "progress" and isinstance(value, str):
                out[key] = self(value)
            elif key == "conditions" and isinstance(value, list):
                out[key] = [{**c, "message": self(c["message"])}
                            if isinstance(c, dict) and isinstance(c.get("message"), str) else c
                            for c in value]
            elif key == "deliveries" and isinstance(value, list):
                out[key] = [{**d, "error": self(d["error"])}
                            if isinstance(d, dict) and isinstance(d.get("error"), str) else d
                            for d in value]
            elif isinstance(value, dict) and isinstance(value.get("message"), str):
                out[key] = {**value, "message": self(value["message"])}
        return out
