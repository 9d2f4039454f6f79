"""Whose run a stored document is: read from where it lies in the store, never from what it says.

A run's artifacts lie under `<namespace>/<name>/<uid>/[artifactPrefix/]` (store.artifacts), a
layout only the operator and the run's own session write; the documents in it are written by
sessions whose suites a tenant wrote. So the results index takes a run's namespace, name and uid
from the key (and from the run object, when the operator hands it one) and uses the document's
own `run` fields only to check them: a metrics.json whose identity disagrees with its key is not
indexed (it would put one namespace's figures in another's series, or overwrite another run's
rows). Pure: the indexer and `results reindex` call it with a key and a parsed document.
"""

from __future__ import annotations

from typing import Any, NamedTuple

DOCUMENT = "metrics.json"


class RunKey(NamedTuple):
    namespace: str
    name: str
    uid: str


def run_of_key(key: str) -> RunKey | None:
    """The run a store key belongs to: its first three segments, when they are all non-empty and
    none is `.` or `..` (None: a key that is no run's, e.g. `builds/...` with too few parts)."""
    parts = key.split("/")
    if len(parts) < 4 or any(p in ("", ".", "..") for p in parts[:3]):
        return None
    return RunKey(parts[0], parts[1], parts[2])


def is_run_document(key: str) -> bool:
    """A run's own metrics.json (at its prefix or below its artifactPrefix), not one inside a
    raw folder of outputs a suite copied back (`.../raw/.../metrics.json`)."""
    parts = key.split("/")
    return parts[-1] == DOCUMENT and run_of_key(key) is not None and "raw" not in parts[3:-1]


def disagreement(doc: dict[str, Any], where: RunKey) -> str | None:
    """Why the document's own `run` identity is not the one of where it lies (None: it agrees).
    A document without a `run` object, or without a uid in it, disagrees: every metrics.json a
    session writes names its run."""
    run = doc.get("run")
    if not isinstance(run, dict) or not run.get("uid"):
        return "it names no run"
    claimed = RunKey(str(run.get("namespace") or ""), str(run.get("name") or ""),
                     str(run.get("uid") or ""))
    if claimed != where:
        return (f"it names run {claimed.namespace}/{claimed.name} (uid {claimed.uid}), "
                f"its key {where.namespace}/{where.name} (uid {where.uid})")
    return None
