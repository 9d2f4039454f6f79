"""The software under test, fetched once and proven to be what the run asked for.

A run names each file of its software (kernel, initrd, dtb, modules) by URL — an `s3://` object
in the lab's store or an `http(s)://` URL — with its SHA-256, given or published beside it in a
sha256sum-format file. Files land in a local cache by their digest (a second run of the same
build downloads nothing) and are verified before a board ever sees them.

The session trusts nothing the tenant wrote: before anything is read, every URL (and sha256Url)
is checked again against the namespace's LabPolicy (`core.policy.software`, as at admission); an
http(s) host is resolved and refused if any of its addresses is one the lab does not fetch from
(loopback, link-local, unspecified, multicast, internal (BENCHFARM_INTERNAL_CIDRS), or private
and otherwise non-global unless the LabPolicy lists that address), the connection goes to the
address that was checked (no second lookup to rebind), every redirect is checked the same way
and may not change the scheme, and no proxy is used. A wrong digest is reported without the
digest found.

The cache answers only after that: a file is served from it for a URL that is allowed for the
run's namespace now (its host resolved and checked again) and that this very URL yielded
before (`sources` beside the file). A digest alone proves nothing about who may read the file:
another namespace's private build must not come out of the cache for a URL of one's own that
has no such file, or for a host the namespace may no longer reach.

Whatever the network answered — no such object, an HTTP 403, 404 or 500, a refused or timed-out
connection, a name that does not resolve or resolves where the lab does not fetch from, a
redirect elsewhere — the tenant gets one reason (`ArtifactUnavailable`) and one message, so the
lab's downloads are no port scanner; the lab's log keeps what happened.

Who is to blame: a forbidden or unavailable URL or a wrong digest is the run's (RunError: the
board is never charged for a bad URL); an outage of the lab's own store is waited out like any
other (Outage, from the store).
"""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import logging
import os
import re
import shutil
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from minio.error import S3Error

from benchfarm.api.labpolicy import NamespacePolicy
from benchfarm.api.outcomes import LabFault, Refusal, RunFailure
from benchfarm.api.runs import Artifact, SoftwareSet
from benchfarm.core.policy.software import SoftwareReach, internal_networks
from benchfarm.errors import InfraError, RunError
from benchfarm.settings import Settings
from benchfarm.store.artifacts import ArtifactStore

log = logging.getLogger(__name__)

CHUNK = 1 << 20
SOURCES = "sources"                # beside a cached file: the URLs that yielded it, one a line
TIMEOUT = 30.0                     # seconds without a byte before an http(s) download fails


@dataclass(frozen=True)
class Fetched:
    """One verified file: where it is on this host, and what it is."""

    part: str
    url: str
    sha256: str
    path: Path
    size: int

    def provenance(self) -> dict[str, Any]:
        return {"url": self.url, "sha256": self.sha256, "bytes": self.size}


def internal_from(settings: Settings) -> tuple[Any, ...]:
    """The lab's internal ranges (BENCHFARM_INTERNAL_CIDRS); a bad value is the lab's fault."""
    try:
        return internal_networks(settings.internal_cidrs)
    except ValueError as exc:
        raise InfraError(str(exc), reason=LabFault.bad_configuration) from exc


class SoftwareCache:
    """Verified files by digest under `root`; the least recently used go beyond `limit` bytes.
    What may be fetched is what `policy` lets `namespace` reach (the LabPolicy `default`'s entry
    for the run's namespace, read by the session itself)."""

    def __init__(self, root: Path, store: ArtifactStore | None, *, policy: NamespacePolicy,
                 namespace: str, settings: Settings) -> None:
        s = settings
        self.root, self.store, self.limit = root, store, s.software_cache_mib << 20
        bucket = store.config.bucket if store is not None else s.s3_bucket
        self.reach = SoftwareReach(policy, namespace, bucket, internal_from(s))
        self.root.mkdir(parents=True, exist_ok=True)

    def fetch_set(self, software: SoftwareSet) -> dict[str, Fetched]:
        """Every file of a software set, verified; RunError naming the first that is not (or
        that the namespace may not fetch: all are checked before any is downloaded)."""
        problem = self.reach.software_problem(software)
        if problem:
            raise RunError(problem.message, reason=problem.reason)
        out = {}
        for part in software.parts():
            artifact = getattr(software, part)
            if isinstance(artifact, Artifact):
                out[part] = self.fetch(part, artifact)
        return out

    def fetch(self, part: str, artifact: Artifact) -> Fetched:
        """One verified file: from the cache only once its URL is authorised for the namespace
        (the LabPolicy, and for http(s) every address its host resolves to now) and only if
        this URL yielded it before; else downloaded and verified."""
        problem = self.reach.software_problem(SoftwareSet(**{part: artifact}))
        if problem:
            raise RunError(problem.message, reason=problem.reason)
        if not artifact.url.startswith("s3://"):
            _checked_addresses(part, artifact.url, *_host_port(artifact.url), self.reach)
        want = artifact.sha256 or self._published_digest(part, artifact)
        # named by digest too: staged files share one TFTP directory with the board's own
        base = re.sub(r"[^A-Za-z0-9._-]", "_", PurePosixPath(artifact.url.split("?", 1)[0]).name)
        path = self.root / want / f"{want[:12]}-{base or part}"
        if path.exists() and artifact.url in _sources(path.parent):
            os.utime(path)
            return Fetched(part, artifact.url, want, path, path.stat().st_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as f:
                got, size = self._download(part, artifact.url, f)
            if got != want:
                raise RunError(f"software {part}: {artifact.url} does not have the sha256 the "
                               "run expects", reason=RunFailure.digest_mismatch)
            os.replace(tmp, path)
            with (path.parent / SOURCES).open("a") as f:   # one short append: no lock needed
                f.write(artifact.url + "\n")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        log.info("software %s: %s verified (sha256 %s, %d bytes)", part, artifact.url, want, size)
        self._prune(keep=path.parent)
        return Fetched(part, artifact.url, want, path, size)

    # -- sources --------------------------------------------------------------------------------
    def _published_digest(self, part: str, artifact: Artifact) -> str:
        """The digest of the artifact's file name in its sha256sum-format file."""
        assert artifact.sha256Url is not None
        name = PurePosixPath(artifact.url.split("?", 1)[0]).name
        with tempfile.TemporaryFile() as f:
            self._download(part, artifact.sha256Url, f, limit=1 << 20)
            f.seek(0)
            lines = f.read().decode("utf-8", "replace").splitlines()
        for line in lines:
            fields = line.split()
            if len(fields) >= 2 and fields[-1].lstrip("*").rsplit("/", 1)[-1] == name:
                digest = fields[0].lower()
                break
        else:
            fields = lines[0].split() if len(lines) == 1 else []
            digest = fields[0].lower() if fields else ""   # a lone digest names no file
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise RunError(f"software {part}: {artifact.sha256Url} lists no sha256 for {name}",
                           reason=RunFailure.digest_missing)
        return digest

    def _download(self, part: str, url: str, out: Any, limit: int | None = None
                  ) -> tuple[str, int]:
        """Stream url into `out`; (sha256, bytes)."""
        if url.startswith("s3://"):
            return self._from_store(part, url, out)
        return _from_http(part, url, out, limit, self.reach)

    def _from_store(self, part: str, url: str, out: Any) -> tuple[str, int]:
        if self.store is None:
            raise InfraError("artifact store not configured", reason=LabFault.store_not_configured)
        store = self.store
        bucket, _, key = url[len("s3://"):].partition("/")

        def read() -> tuple[str, int]:
            out.seek(0)
            out.truncate()
            resp = store.client.get_object(bucket, key)
            try:
                return _copy(resp.stream(CHUNK), out)
            finally:
                resp.close()
                resp.release_conn()
        try:
            return store._retry(f"download {url}", read)
        except InfraError as exc:
            if exc.reason == LabFault.store_error:   # no such object, no access: what the run names
                raise unavailable(part, url, exc) from exc
            raise
        except S3Error as exc:   # NoSuchBucket and kin
            raise unavailable(part, url, exc) from exc

    def _prune(self, keep: Path) -> None:
        entries = []
        for d in self.root.iterdir():
            files = [f for f in d.iterdir() if f.is_file()] if d.is_dir() else []
            if d != keep and files:
                entries.append((max(f.stat().st_mtime for f in files),
                                sum(f.stat().st_size for f in files), d))
        total = sum(size for _, size, _ in entries) + sum(
            f.stat().st_size for f in keep.iterdir() if f.is_file())
        for _, size, d in sorted(entries):
            if total <= self.limit:
                break
            shutil.rmtree(d, ignore_errors=True)
            total -= size


def unavailable(part: str, url: str, detail: object) -> RunError:
    """The one error a tenant gets for a URL the network did not give the lab (see the module's
    docstring); what happened goes to the lab's log only."""
    log.warning("software %s: %s not fetched: %s", part, url, detail)
    return RunError(f"software {part}: {url} could not be fetched. The lab gives one answer for "
                    "every URL it could not use (no such file, an HTTP error, no answer, a host "
                    "that does not resolve or resolves to an address the lab does not fetch "
                    "from, a redirect elsewhere) and does not say which; check the URL and that "
                    "the namespace's LabPolicy lists its host", reason=Refusal.artifactUnavailable)


class Refused(OSError):
    """A connection or redirect the lab will not make (an OSError: urllib passes it on as it
    would a failed connection, and it ends the same way)."""


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def _checked_addresses(part: str, url: str, host: str, port: int, reach: SoftwareReach
                       ) -> list[Any]:
    """Where the host may be reached: every address it resolves to must be allowed (a name with
    one internal address among public ones is refused)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:    # UnicodeError: a name IDNA cannot encode
        raise unavailable(part, url, f"{host} does not resolve: {exc}") from exc
    for info in infos:
        problem = reach.address_problem(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]),
                                        port)
        if problem:
            raise unavailable(part, url, f"{host} resolves where the lab does not fetch from: "
                                         f"{problem}")
    return infos


def _guarded(part: str, url: str, reach: SoftwareReach) -> urllib.request.OpenerDirector:
    """An opener that connects only to checked addresses, checks every redirect and uses no
    proxy."""

    def connect(conn: http.client.HTTPConnection) -> None:
        error: OSError | None = None
        try:
            infos = _checked_addresses(part, url, conn.host, conn.port or 80, reach)
        except RunError as exc:
            raise Refused(exc.message) from exc
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(conn.timeout if isinstance(conn.timeout, (int, float))
                                else TIMEOUT)
                sock.connect(address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            conn.sock = sock
            return
        raise error or OSError(f"no address for {conn.host}")

    class Plain(http.client.HTTPConnection):
        def connect(self) -> None:
            connect(self)

    class Secure(http.client.HTTPSConnection):
        def connect(self) -> None:
            connect(self)
            self.sock = self._context.wrap_socket(self.sock,  # type: ignore[attr-defined]
                                                  server_hostname=self.host)

    class PlainHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> Any:
            return self.do_open(Plain, req)

    class SecureHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> Any:
            return self.do_open(Secure, req, context=ssl.create_default_context())

    class Redirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                             headers: Any, newurl: str) -> urllib.request.Request | None:
            if newurl.partition("://")[0].lower() != req.full_url.partition("://")[0].lower():
                raise Refused(f"{req.full_url} redirects to {newurl}, another scheme")
            problem = reach.url_problem(part, newurl)
            if problem:
                raise Refused(f"redirected from {req.full_url}: {problem.message}")
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    return urllib.request.build_opener(urllib.request.ProxyHandler({}), PlainHandler,
                                       SecureHandler, Redirects)


def _from_http(part: str, url: str, out: Any, limit: int | None, reach: SoftwareReach
               ) -> tuple[str, int]:
    request = urllib.request.Request(url, headers={"User-Agent": "benchfarm"})
    start = time.monotonic()
    try:
        with _guarded(part, url, reach).open(request, timeout=TIMEOUT) as resp:
            digest, size = _copy(iter(lambda: resp.read(CHUNK), b""), out, limit)
    except urllib.error.HTTPError as exc:
        raise unavailable(part, url, f"HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        raise unavailable(part, url, getattr(exc, "reason", exc)) from exc
    log.debug("fetched %s (%d bytes) in %.2f s", url, size, time.monotonic() - start)
    return digest, size


def _sources(folder: Path) -> set[str]:
    """The URLs that yielded the cached file(s) in a digest's folder."""
    try:
        return set((folder / SOURCES).read_text().splitlines())
    except OSError:
        return set()


def _copy(chunks: Any, out: Any, limit: int | None = None) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    for chunk in chunks:
        h.update(chunk)
        out.write(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            raise RunError(f"more than {limit} bytes where a digest list was expected",
                           reason=RunFailure.digest_missing)
    out.flush()
    return h.hexdigest(), size
