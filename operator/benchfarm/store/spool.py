"""A session's artifacts on local disk first, in MinIO as soon as it answers: nothing measured is lost.

Every artifact a session produces (step checkpoints, raw outputs, the serial log, reports) is
written atomically under the spool directory (an emptyDir in a cluster, `.benchfarm/spool` in the
embedded lab) before it is uploaded. An upload that fails because MinIO is down leaves the file
where it is; a drain thread retries with backoff until it goes through. A session that restarts
on the same machine finds its spool again and finishes the uploads, without rewriting objects
MinIO already has (same key, same sha256: the spooled copy is just dropped). Nothing is held in
memory whole: uploads stream from the files, and `concat` makes serial.log of its parts (one per
resume) by streaming or by the store's own compose.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

from benchfarm.api.outcomes import LabFault
from benchfarm.errors import InfraError
from benchfarm.store.artifacts import ArtifactStore

log = logging.getLogger(__name__)
META = ".meta.json"
COPY_CHUNK = 1024 * 1024
MIN_PART = 5 * 1024 * 1024      # S3's smallest part but the last: what the store can compose


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class _Chain(io.RawIOBase):
    """The files `openers` open, read one after the other as one stream (each opened when
    the previous one ends, closed then)."""

    def __init__(self, openers: list[Callable[[], BinaryIO]]) -> None:
        self.openers = list(openers)
        self.current: BinaryIO | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:   # a writable buffer (memoryview, bytearray)
        while True:
            if self.current is None:
                if not self.openers:
                    return 0
                self.current = self.openers.pop(0)()
            data = self.current.read(len(buffer))
            if data:
                buffer[:len(data)] = data
                return len(data)
            self.current.close()
            self.current = None

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None
        super().close()


class Spool:
    def __init__(self, root: Path, store: ArtifactStore) -> None:
        self.root = root
        self.store = store
        self.root.mkdir(parents=True, exist_ok=True)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    # -- writing ------------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise InfraError(f"artifact key {key!r} escapes the spool", reason=LabFault.bad_key)
        return path

    def write(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> Path:
        """Keep `data` under `key` on local disk (atomic, fsynced); upload later."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        meta = path.with_name(path.name + META)
        meta.write_text(json.dumps({"key": key, "contentType": content_type}))
        os.replace(tmp, path)
        return path

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Spool, try to upload at once, and leave it to the drain thread if MinIO is down."""
        path = self.write(key, data, content_type)
        if self.last_error is not None:  # the store is known to be down: don't block the step
            self._wake.set()
            return self.store.url(key)
        try:
            self._upload(path, check=False)
        except InfraError as exc:
            self.last_error = str(exc)
            log.warning("artifact %s stays in the spool until the store is back: %s", key, exc)
            self.start()
            self._wake.set()
        return self.store.url(key)

    def append_path(self, key: str) -> Path:
        """A spool file a caller appends to (the serial log); uploaded by `put_file`."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def put_file(self, key: str, content_type: str = "text/plain") -> str:
        """Upload a spool file written in place (see `append_path`)."""
        path = self._path(key)
        path.with_name(path.name + META).write_text(
            json.dumps({"key": key, "contentType": content_type}))
        try:
            self._upload(path, check=False)
        except InfraError as exc:
            self.last_error = str(exc)
            self.start()
            self._wake.set()
        return self.store.url(key)

    def concat(self, keys: list[str], dest: str, content_type: str = "text/plain") -> str:
        """One object `dest` of the spooled `keys` in order (the serial log's parts, one per
        resume), never held in memory: the store composes it when the parts are all there and
        big enough, else it is streamed up in parts from the local files and the stored objects
        in turn. Parts all still on local disk (the store is down) are copied into a spool file
        for `dest`, uploaded like any other."""
        local = [self._path(k).exists() for k in keys]
        if keys and all(local):
            path = self.append_path(dest)
            tmp = path.with_name(f".{path.name}.tmp")
            with tmp.open("wb") as out:
                for key in keys:
                    with self._path(key).open("rb") as part:
                        shutil.copyfileobj(part, out, COPY_CHUNK)
            os.replace(tmp, path)
            return self.put_file(dest, content_type)
        if not any(local) and all(self.store.size(k) >= MIN_PART for k in keys[:-1]):
            return self.store.compose(dest, keys, content_type)
        return self.store.put_stream(
            dest, lambda: cast(BinaryIO, _Chain([self._opener(k) for k in keys])), content_type)

    def _opener(self, key: str) -> Callable[[], BinaryIO]:
        path = self._path(key)
        if path.exists():
            return lambda: path.open("rb")
        return lambda: self.store.open(key)

    # -- reading ------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        path = self._path(key)
        if path.exists():
            return path.read_bytes()
        return self.store.get(key)

    def keys(self, prefix: str) -> set[str]:
        """Keys under `prefix` that exist here or in the store (the store may be down: then the
        spool's own, and the caller decides whether that is enough)."""
        top = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        local = {key for p in (top.rglob("*") if top.is_dir() else [])
                 if p.is_file() and not p.name.endswith(META) and not p.name.startswith(".")
                 and (key := str(p.relative_to(self.root))).startswith(prefix)}
        return local | set(self.store.list(prefix))

    # -- uploading ----------------------------------------------------------------------------
    def _upload(self, path: Path, *, check: bool = True) -> None:
        """Upload a spooled file and drop it; with `check`, skip objects the store already has
        with the same bytes (a spool left by a session that died after uploading)."""
        meta_path = path.with_name(path.name + META)
        with self._lock:
            if not path.exists():
                return
            meta = json.loads(meta_path.read_text())
            digest = _sha256(path)
            if not check or self.store.sha256(meta["key"]) != digest:
                self.store.put_stream(meta["key"], lambda: path.open("rb"), meta["contentType"],
                                      length=path.stat().st_size, sha256=digest)
            path.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)

    def pending(self) -> list[Path]:
        return sorted(m.with_name(m.name[:-len(META)]) for m in self.root.rglob(f"*{META}"))

    def drain_once(self) -> bool:
        """Upload what is waiting; True when nothing is left."""
        for path in self.pending():
            try:
                self._upload(path)
            except InfraError as exc:
                self.last_error = str(exc)
                return False
        self.last_error = None
        return True

    def drain(self, deadline: float) -> bool:
        """Block until everything is uploaded or the (monotonic) deadline passes."""
        delay = 1.0
        while not self.drain_once():
            if time.monotonic() + delay > deadline:
                return False
            log.warning("waiting for the artifact store to upload %d spooled artifact(s): %s",
                        len(self.pending()), self.last_error)
            time.sleep(delay)
            delay = min(delay * 2, 15.0)
        return True

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain_loop, name="spool-drain",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _drain_loop(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            self._wake.wait(delay)
            self._wake.clear()
            if self.drain_once():
                delay = 5.0
            else:
                delay = min(delay * 2, 15.0)
