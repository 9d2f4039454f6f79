"""serial.log made of its parts in MinIO without the parts ever held in memory (Spool.concat).

The parts are what a session leaves: one serial log file per resume, each uploaded as the session
ends (`put_file`) or still on the spool's disk. Against the lab's real MinIO: parts in the store
and on disk streamed up as one object, parts big enough composed by the store itself, parts all
on disk copied into one spool file and uploaded; the process's peak RSS does not grow with them.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from benchfarm.settings import Settings
from benchfarm.store.artifacts import ArtifactStore, StoreConfig
from benchfarm.store.spool import Spool

pytestmark = pytest.mark.stack
MiB = 1024 * 1024


def _vm_hwm() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


@pytest.fixture
def spool(lab, tmp_path):
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    store.ensure_bucket()
    return Spool(tmp_path / "spool", store)


def _pieces(key: str, size: int):
    """A serial log part's bytes, 1 MiB at a time."""
    for i in range(0, size, MiB):
        n, line = min(MiB, size - i), key.encode() + b" %d\n" % i
        yield (line * (n // len(line) + 1))[:n]


def _part(spool: Spool, key: str, size: int, *, upload: bool) -> None:
    """A spooled serial log part; `upload`: put up as a session's end does (else still on disk,
    as when the store was down)."""
    path = spool.append_path(key)
    with path.open("wb") as f:
        for piece in _pieces(key, size):
            f.write(piece)
    if upload:
        spool.put_file(key)
        assert not path.exists()            # uploaded, dropped from the spool


def _stored(spool: Spool, key: str) -> tuple[int, bytes]:
    digest, size = hashlib.sha256(), 0
    with spool.store.open(key) as f:
        while chunk := f.read(MiB):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.digest()


def _expected(keys: list[str], sizes: list[int]) -> tuple[int, bytes]:
    digest = hashlib.sha256()
    for key, size in zip(keys, sizes, strict=True):
        for piece in _pieces(key, size):
            digest.update(piece)
    return sum(sizes), digest.digest()


def test_parts_in_the_store_and_on_disk_stream_up_as_one_object(spool):
    run = f"concat-{os.urandom(4).hex()}"
    keys = [f"{run}/serial/attempt-001-run-{i:02d}.log" for i in range(3)]
    sizes = [40 * MiB, 3 * MiB, 40 * MiB]
    before = _vm_hwm()
    _part(spool, keys[0], sizes[0], upload=True)
    _part(spool, keys[1], sizes[1], upload=False)      # the store was down when it ended
    _part(spool, keys[2], sizes[2], upload=True)
    url = spool.concat(keys, f"{run}/serial.log")
    grown = _vm_hwm() - before
    assert url == spool.store.url(f"{run}/serial.log")
    assert _stored(spool, f"{run}/serial.log") == _expected(keys, sizes)
    assert grown < 48 * MiB, f"peak RSS grew {grown / MiB:.0f} MiB for {sum(sizes) / MiB} MiB"


def test_big_parts_all_in_the_store_are_composed_by_it(spool):
    run = f"compose-{os.urandom(4).hex()}"
    keys = [f"{run}/serial/attempt-001-run-{i:02d}.log" for i in range(3)]
    sizes = [6 * MiB, 5 * MiB, 100]
    for key, size in zip(keys, sizes, strict=True):
        _part(spool, key, size, upload=True)
    spool.concat(keys, f"{run}/serial.log")
    assert _stored(spool, f"{run}/serial.log") == _expected(keys, sizes)


def test_parts_all_on_disk_become_one_spool_file_uploaded_like_any_other(spool):
    run = f"local-{os.urandom(4).hex()}"
    keys = [f"{run}/serial/attempt-001-run-{i:02d}.log" for i in range(2)]
    sizes = [2 * MiB, 1000]
    for key, size in zip(keys, sizes, strict=True):
        _part(spool, key, size, upload=False)
    spool.concat(keys, f"{run}/serial.log")
    assert spool.drain_once()
    assert _stored(spool, f"{run}/serial.log") == _expected(keys, sizes)
    assert spool.store.sha256(f"{run}/serial.log") == _expected(keys, sizes)[1].hex()
