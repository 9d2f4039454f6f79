"""The software under test, fetched once and proven to be what the run asked for.

A run names each file of its software (kernel, initrd, dtb, modules) by URL — an `s3://` object
in the lab's store or an `http(s)://` URL — with its SHA-256, given or published beside it in a
sha256sum-format file. Files land in a local cache keyed by their digest (a second run of the same
build downloads nothing) and are verified before a board ever sees them.

The session trusts nothing the tenant wrote: before anything is read, every URL (and sha256Url)
is checked again against the namespace's LabPolicy (`core.software_policy`, as at admission); an
http(s) host is resolved and refused if any of its addresses is loopback, link-local,
unspecified, multicast or internal (BENCHFARM_INTERNAL_CIDRS), the connection goes to the address
that was checked (no second lookup to rebind), every redirect is checked the same way and may not
change the scheme, and no proxy is used. A wrong digest is reported without the digest found.

Who is to blame: a forbidden URL, a wrong digest, a missing object, a 404 or an unreachable host are the run's
(RunError: the board is never charged for a bad URL); an outage of the lab's own store is waited
out like any other (Outage, from the store).
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

from minio.error import S3Error

from ..api.models import Artifact, NamespacePolicy, SoftwareSet
from ..api.outcomes import Refusal
from ..core.software_policy import SoftwareReach, address_problem, internal_networks
from ..errors import InfraError, RunError
from .artifacts import ArtifactStore

log = logging.getLogger(__name__)

CHUNK = 1 << 20
TIMEOUT = 30.0                     # seconds without a byte before an http(s) download fails
CACHE_LIMIT = int(os.environ.get("BENCHFARM_SOFTWARE_CACHE_MIB", "4096")) << 20


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


def internal_from_env() -> tuple[Any, ...]:
    """The lab's internal ranges (BENCHFARM_INTERNAL_CIDRS); a bad value is the lab's fault."""
    try:
        return internal_networks(os.environ.get("BENCHFARM_INTERNAL_CIDRS", ""))
    except ValueError as exc:
        raise InfraError(str(exc), reason="BadConfiguration") from exc


class SoftwareCache:
    """Verified files by digest under `root`; the least recently used go beyond `limit` bytes.
    What may be fetched is what `policy` lets `namespace` reach (the LabPolicy `default`'s entry
    for the run's namespace, read by the session itself)."""

    def __init__(self, root: Path, store: ArtifactStore | None, *, policy: NamespacePolicy,
                 namespace: str, limit: int = CACHE_LIMIT) -> None:
        self.root, self.store, self.limit = root, store, limit
        bucket = store.config.bucket if store is not None else \
            os.environ.get("BENCHFARM_S3_BUCKET", "benchfarm-artifacts")
        self.reach = SoftwareReach(policy, namespace, bucket, internal_from_env())
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
        problem = self.reach.software_problem(SoftwareSet(**{part: artifact}))
        if problem:
            raise RunError(problem.message, reason=problem.reason)
        want = artifact.sha256 or self._published_digest(part, artifact)
        # named by digest too: staged files share one TFTP directory with the board's own
        base = re.sub(r"[^A-Za-z0-9._-]", "_", PurePosixPath(artifact.url.split("?", 1)[0]).name)
        path = self.root / want / f"{want[:12]}-{base or part}"
        if path.exists():
            os.utime(path)
            return Fetched(part, artifact.url, want, path, path.stat().st_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as f:
                got, size = self._download(part, artifact.url, f)
            if got != want:
                raise RunError(f"software {part}: {artifact.url} does not have the sha256 the "
                               "run expects", reason="DigestMismatch")
            os.replace(tmp, path)
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
                           reason="DigestMissing")
        return digest

    def _download(self, part: str, url: str, out: Any, limit: int | None = None
                  ) -> tuple[str, int]:
        """Stream url into `out`; (sha256, bytes)."""
        if url.startswith("s3://"):
            return self._from_store(part, url, out)
        return _from_http(part, url, out, limit, self.reach)

    def _from_store(self, part: str, url: str, out: Any) -> tuple[str, int]:
        if self.store is None:
            raise InfraError("artifact store not configured", reason="StoreNotConfigured")
        bucket, _, key = url[len("s3://"):].partition("/")

        def read() -> tuple[str, int]:
            out.seek(0)
            out.truncate()
            resp = self.store.client.get_object(bucket, key)
            try:
                return _copy(resp.stream(CHUNK), out)
            finally:
                resp.close()
                resp.release_conn()
        try:
            return self.store._retry(f"download {url}", read)
        except InfraError as exc:
            if exc.reason == "StoreError":   # no such object, no access: what the run names
                raise RunError(f"software {part}: {url} cannot be read from the lab's store: "
                               f"{str(exc).rsplit(': ', 1)[-1]}", reason="ArtifactNotFound") \
                    from exc
            raise
        except S3Error as exc:   # NoSuchBucket and kin
            raise RunError(f"software {part}: {url}: {exc.code}", reason="ArtifactNotFound") \
                from exc

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


def _checked_addresses(part: str, host: str, port: int, reach: SoftwareReach) -> list[Any]:
    """Where the host may be reached: every address it resolves to must be allowed (a name with
    one internal address among public ones is refused)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise RunError(f"software {part}: host {host} cannot be resolved: {exc}",
                       reason="ArtifactUnreachable") from exc
    for info in infos:
        problem = address_problem(ipaddress.ip_address(info[4][0].split("%", 1)[0]),
                                  reach.internal)
        if problem:
            raise RunError(f"software {part}: host {host} may not be fetched from: {problem}",
                           reason=Refusal.artifactForbidden)
    return infos


def _guarded(part: str, reach: SoftwareReach) -> urllib.request.OpenerDirector:
    """An opener that connects only to checked addresses, checks every redirect and uses no
    proxy."""

    def connect(conn: http.client.HTTPConnection) -> None:
        error: OSError | None = None
        for family, kind, proto, _, address in _checked_addresses(part, conn.host, conn.port,
                                                                  reach):
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
                raise RunError(f"software {part}: {req.full_url} redirects to {newurl}, another "
                               "scheme", reason=Refusal.artifactForbidden)
            problem = reach.url_problem(part, newurl)
            if problem:
                raise RunError(f"redirected from {req.full_url}: {problem.message}",
                               reason=problem.reason)
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    return urllib.request.build_opener(urllib.request.ProxyHandler({}), PlainHandler,
                                       SecureHandler, Redirects)


def _from_http(part: str, url: str, out: Any, limit: int | None, reach: SoftwareReach
               ) -> tuple[str, int]:
    request = urllib.request.Request(url, headers={"User-Agent": "benchfarm"})
    start = time.monotonic()
    try:
        with _guarded(part, reach).open(request, timeout=TIMEOUT) as resp:
            digest, size = _copy(iter(lambda: resp.read(CHUNK), b""), out, limit)
    except urllib.error.HTTPError as exc:
        raise RunError(f"software {part}: {url} answered HTTP {exc.code} {exc.reason}",
                       reason="ArtifactNotFound" if exc.code in (403, 404, 410)
                       else "ArtifactUnreachable") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise RunError(f"software {part}: {url} cannot be fetched: {why}",
                       reason="ArtifactUnreachable") from exc
    log.debug("fetched %s (%d bytes) in %.2f s", url, size, time.monotonic() - start)
    return digest, size


def _copy(chunks: Any, out: Any, limit: int | None = None) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    for chunk in chunks:
        h.update(chunk)
        out.write(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            raise RunError(f"more than {limit} bytes where a digest list was expected",
                           reason="DigestMissing")
    out.flush()
    return h.hexdigest(), size
