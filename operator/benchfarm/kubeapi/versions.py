"""Which of two resourceVersions of one object came first.

The operator decides on what it wrote itself (a run launched, a go-ahead given) the moment the
API server answers, while kopf hands it the run's watch events later: on a busy host, seconds
later. An event from before the operator's own write, taken as the run's state, undid that
write: a launched run seen Pending again, a go-ahead seen gone. Such a run counted against no
session seat, and a bench of 1,000 boards had up to 20 boards powered by 12 seats. The runtime
keeps the newest version it knows of each run and passes over events older than it.

Kubernetes defines resource versions as comparable (KEP-5504, stable in 1.35; the etcd-backed
API server's have always been): a positive integer in decimal, without leading zeros, compared
as a number, between versions of one resource. Where either is not of that form, nothing is
said (`older` is False): the event is taken, as before.
"""

from __future__ import annotations

from typing import Any


def number(version: str | None) -> int | None:
    """A resourceVersion as the number it is, or None where it is not one."""
    if not version or not version.isascii() or not version.isdigit() or version[0] == "0":
        return None
    return int(version)


def older(version: str | None, than: str | None) -> bool:
    """Is `version` known to be from before `than`?"""
    a, b = number(version), number(than)
    return a is not None and b is not None and a < b


def of(body: dict[str, Any]) -> str | None:
    """An object's resourceVersion."""
    return (body.get("metadata") or {}).get("resourceVersion")
