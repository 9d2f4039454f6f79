"""Run artifacts in S3 (MinIO): serial log, raw outputs, metrics.json, the report.

Keys are `<namespace>/<run>/<uid>/<prefix>/<name>` (`run_prefix`, the one function that computes
them): a run's artifacts stay under its namespace's folder whatever its `artifactPrefix` says, the
uid makes a re-created run with the same name a different folder, and a retried upload writes the
same key again, never a duplicate.
Outages are retried briefly and then surface as `Outage(party=Party.store)`; the session's spool
(`store.spool`) keeps the bytes on local disk and uploads them when MinIO is back.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar, cast

import urllib3
from minio import Minio
from minio.commonconfig import ComposeSource
from minio.error import S3Error
from urllib3 import BaseHTTPResponse

from benchfarm.api.outcomes import LabFault
from benchfarm.errors import InfraError, Outage, Party
from benchfarm.settings import Settings

T = TypeVar("T")
log = logging.getLogger(__name__)

PART_SIZE = 8 * 1024 * 1024     # a streamed upload's part: what memory holds of it at a time
# the largest JSON document the lab reads whole (`get_document`): a run's metrics.json at the
# LabPolicy's highest maxMetricsPerRun (100,000 metrics, about 280 bytes each) is under 30 MB
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class StoreConfig:
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    secure: bool = False

    @classmethod
    def from_settings(cls, s: Settings) -> StoreConfig:
        """The store the settings name; InfraError where they name none."""
        for variable, value in (("BENCHFARM_S3_ENDPOINT", s.s3_endpoint),
                                ("BENCHFARM_S3_ACCESS_KEY", s.s3_access_key),
                                ("BENCHFARM_S3_SECRET_KEY", s.s3_secret_key)):
            if not value:
                raise InfraError(f"artifact store not configured: {variable} is not set",
                                 reason=LabFault.store_not_configured)
        return cls(endpoint=s.s3_endpoint, access_key=s.s3_access_key,
                   secret_key=s.s3_secret_key, bucket=s.s3_bucket, secure=s.s3_secure)


def run_prefix(namespace: str, run: str, uid: str, prefix: str = "") -> str:
    """`<namespace>/<run>/<uid>[/<prefix>]`: the tenant's prefix only ever adds folders inside
    the run's own. ValueError for empty, '.' or '..' segments (the schema refuses them too)."""
    extra = prefix.strip("/")
    segments = [namespace, run, uid, *(extra.split("/") if extra else [])]
    if any(s in ("", ".", "..") or "/" in s for s in segments):
        raise ValueError(f"artifact prefix {namespace}/{run}/{uid}/{prefix}: empty, '.' and '..' "
                         "segments are not allowed")
    return "/".join(segments)


# What the store answers for a request that will never succeed: an error to report, not an outage
# to wait out (a name MinIO refuses held a board for a run's whole timeout).
PERMANENT = frozenset({"NoSuchKey", "NoSuchBucket", "AccessDenied", "InvalidAccessKeyId",
                       "InvalidArgument", "InvalidObjectName", "InvalidBucketName",
                       "XMinioInvalidResourceName", "XMinioInvalidObjectName", "KeyTooLongError"})


class ArtifactStore:
    def __init__(self, config: StoreConfig, *, attempts: int = 5) -> None:
        self.config = config
        self.attempts = attempts
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=5, read=60),
                                   retries=urllib3.Retry(total=0))
        self.client = Minio(config.endpoint, access_key=config.access_key,
                            secret_key=config.secret_key, secure=config.secure, http_client=http)

    run_prefix = staticmethod(run_prefix)   # what sessions holding a store call

    def url(self, key: str) -> str:
        return f"s3://{self.config.bucket}/{key}"

    def _retry(self, what: str, fn: Callable[[], T]) -> T:
        delay = 0.5
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except (S3Error, urllib3.exceptions.HTTPError, OSError) as exc:
                if isinstance(exc, S3Error) and exc.code in PERMANENT:
                    raise InfraError(f"artifact store: {what}: {exc.code}",
                                     reason=LabFault.store_error) from exc
                if attempt == self.attempts:
                    raise Outage(f"artifact store unreachable at {self.config.endpoint} "
                                 f"({what}): {exc}", party=Party.store,
                                 reason=LabFault.store_unreachable) from exc
                time.sleep(delay)
                delay = min(delay * 2, 10)
        raise AssertionError("unreachable")

    def ensure_bucket(self) -> None:
        def _ensure() -> None:
            if not self.client.bucket_exists(self.config.bucket):
                self.client.make_bucket(self.config.bucket)
        self._retry("create bucket", _ensure)

    def ping(self) -> None:
        """The cheapest question the store answers (is the bucket there?): Outage when it does
        not answer, InfraError when it refuses (credentials)."""
        self._retry("ping", lambda: self.client.bucket_exists(self.config.bucket))

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Upload (idempotently: same key, same bytes) and return the object's URL."""
        digest = hashlib.sha256(data).hexdigest()

        def _put() -> None:
            self.client.put_object(self.config.bucket, key, io.BytesIO(data), len(data),
                                   content_type=content_type, metadata={"sha256": digest})
        self._retry(f"upload {key}", _put)
        return self.url(key)

    def put_stream(self, key: str, open_stream: Callable[[], BinaryIO],
                   content_type: str = "application/octet-stream", *, length: int = -1,
                   sha256: str | None = None) -> str:
        """Upload what `open_stream()` reads, in parts of `PART_SIZE` (multipart when longer):
        memory holds one part whatever the object's size. `open_stream` is called again for a
        retried upload; `length` -1 when unknown."""
        def _put() -> None:
            with open_stream() as stream:
                self.client.put_object(self.config.bucket, key, stream, length,
                                       content_type=content_type, part_size=PART_SIZE,
                                       num_parallel_uploads=1,
                                       metadata={"sha256": sha256} if sha256 else None)
        self._retry(f"upload {key}", _put)
        return self.url(key)

    def compose(self, key: str, sources: list[str], content_type: str) -> str:
        """`key` made of `sources` in order by the store itself (nothing passes through here);
        every source but the last must be at least 5 MiB (S3's smallest part)."""
        self._retry(f"compose {key}", lambda: self.client.compose_object(
            self.config.bucket, key, [ComposeSource(self.config.bucket, s) for s in sources],
            metadata={"Content-Type": content_type}))
        return self.url(key)

    def size(self, key: str) -> int:
        return self._retry(f"stat {key}",
                           lambda: self.client.stat_object(self.config.bucket, key)).size or 0

    def modified(self, key: str) -> datetime.datetime | None:
        """When the object was last written (the results index's time of a run without one)."""
        return self._retry(f"stat {key}",
                           lambda: self.client.stat_object(self.config.bucket, key)).last_modified

    def open(self, key: str) -> BinaryIO:
        """A streaming reader of an object (close it: it holds a connection)."""
        return cast(BinaryIO, _Response(self._retry(
            f"download {key}", lambda: self.client.get_object(self.config.bucket, key))))

    def get(self, key: str) -> bytes:
        def _get() -> bytes:
            resp = self.client.get_object(self.config.bucket, key)
            try:
                return resp.read()
            finally:
                resp.close()
                resp.release_conn()
        return self._retry(f"download {key}", _get)

    def list(self, prefix: str) -> list[str]:
        return self._retry(f"list {prefix}", lambda: [
            o.object_name for o in self.client.list_objects(self.config.bucket, prefix=prefix,
                                                            recursive=True)])

    def get_document(self, key: str, limit: int = MAX_DOCUMENT_BYTES) -> dict[str, Any] | None:
        """A JSON object of the store read whole (a run's metrics.json); None when there is none,
        or when it is larger than `limit` bytes or no JSON object (logged): a session writes no
        such document, so someone else put it there (a tenant's store credential writes its
        namespace's folder), and the indexer, the campaigns, KCIDB and the dashboard read it as
        no results rather than hold it in memory."""
        stat = self._stat(key)
        if stat is None:
            return None
        if (stat.size or 0) > limit:
            log.warning("%s: %d bytes, more than the %d of a document the lab reads; not read",
                        key, stat.size, limit)
            return None
        try:
            doc = json.loads(self.get(key))
        except ValueError as exc:
            log.warning("%s: not JSON (%s); not read", key, exc)
            return None
        if not isinstance(doc, dict):
            log.warning("%s: not a JSON object; not read", key)
            return None
        return doc

    def _stat(self, key: str) -> Any | None:
        """The object's stat (size, metadata), or None when there is no such object."""
        try:
            return self._retry(f"stat {key}",
                               lambda: self.client.stat_object(self.config.bucket, key))
        except InfraError as exc:
            if exc.reason == LabFault.store_error and "NoSuchKey" in str(exc):
                return None
            raise

    def sha256(self, key: str) -> str | None:
        """The sha256 recorded at upload, or None when there is no such object."""
        stat = self._stat(key)
        if stat is None:
            return None
        meta = {k.lower(): v for k, v in (stat.metadata or {}).items()}
        return meta.get("x-amz-meta-sha256")


class _Response(io.RawIOBase):
    """An object's HTTP response as a file the reader closes (and its connection released)."""

    def __init__(self, response: BaseHTTPResponse) -> None:
        self.response = response

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:   # a writable buffer (memoryview, bytearray)
        data = self.response.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self.response.close()
            self.response.release_conn()
        super().close()
