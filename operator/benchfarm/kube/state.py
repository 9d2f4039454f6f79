"""What the operator knows of runs and boards between two watch events: plain records, no I/O.

kopf feeds every BenchmarkRun, Board and LabPolicy into these records; the scheduler, the session
supervisor and the inventory read them under the runtime's lock. The API server stays the source of
truth: every transition is written there first and only then mirrored here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..api.models import BenchmarkRunSpec

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "Pending", "Running", "Succeeded", "Failed", "Cancelled"
FINISHED = {SUCCEEDED, FAILED, CANCELLED}


def ts(iso: str | None) -> float:
    if not iso:
        return time.time()
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


@dataclass
class RunState:
    namespace: str
    name: str
    uid: str
    generation: int
    created: float
    spec: BenchmarkRunSpec
    status: dict[str, Any]
    deleting: bool = False
    starting: bool = False          # picked by the scheduler, status not yet confirmed
    # derived once, not every scheduling round: (fingerprint, value)
    queue_entry: tuple[Any, Any] | None = None
    completed_at: tuple[str, float] | None = None
    position_writes: int = 0        # queuePosition writes so far (capped: a run's write budget)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def phase(self) -> str | None:
        return self.status.get("phase")

    def ref(self) -> dict[str, Any]:
        return {"apiVersion": "benchfarm.io/v1alpha1", "kind": "BenchmarkRun",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}


@dataclass
class BoardRecord:
    name: str
    device_type: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    online: bool = False
    held_by_other: str | None = None
    maintenance: bool = False
    run: str | None = None
    failures: int = 0
    quarantined_since: float | None = None
    reason: str | None = None
    last_status: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        if self.quarantined_since is not None:  # also while its health check runs
            return "Quarantined"
        if self.run:
            return "Busy"
        if not self.online:
            return "Offline"
        if self.maintenance:
            return "Maintenance"
        if self.held_by_other:
            return "Busy"
        return "Idle"
