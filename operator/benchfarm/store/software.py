"""The software under test, fetched once and proven to be what the run asked for.

A run names each file of its software (kernel, initrd, dtb, modules) by URL — an `s3://` object
in the lab's store or an `http(s)://` URL — with its SHA-256, given or published beside it in a
sha256sum-format file. Files land in a local cache keyed by their digest (a second run of the same
build downloads nothing) and are verified before a board ever sees them.

Who is to blame: a wrong digest, a missing object, a 404 or an unreachable host are the run's
(RunError: the board is never charged for a bad URL); an outage of the lab's own store is waited
out like any other (Outage, from the store).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..api.models import Artifact, SoftwareSet
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


class SoftwareCache:
    """Verified files by digest under `root`; the least recently used go beyond `limit` bytes."""

    def __init__(self, root: Path, store: ArtifactStore | None, limit: int = CACHE_LIMIT) -> None:
        self.root, self.store, self.limit = root, store, limit
        self.root.mkdir(parents=True, exist_ok=True)

    def fetch_set(self, software: SoftwareSet) -> dict[str, Fetched]:
        """Every file of a software set, verified; RunError naming the first that is not."""
        out = {}
        for part in software.parts():
            artifact = getattr(software, part)
            if isinstance(artifact, Artifact):
                out[part] = self.fetch(part, artifact)
        return out

    def fetch(self, part: str, artifact: Artifact) -> Fetched:
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
                raise RunError(f"software {part}: {artifact.url} has sha256 {got}, the run "
                               f"expects {want}", reason="DigestMismatch")
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
        return _from_http(part, url, out, limit)

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


def _from_http(part: str, url: str, out: Any, limit: int | None) -> tuple[str, int]:
    request = urllib.request.Request(url, headers={"User-Agent": "benchfarm"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:  # noqa: S310 (http(s) only)
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
