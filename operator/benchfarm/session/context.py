"""What every part of one session shares: its configuration and the run it serves.

The runner builds one `RunContext` from the run as the operator launched it; the step runner
(`session.steps`), the blame decision (`session.blame`) and the results (`session.reporting`)
read it. Nothing here is taken from a run's status that the tenant could have written: the
spec is immutable after admission and the prefix is computed from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from benchfarm.api.runs import BenchmarkRunSpec, SoftwareSet, SuiteSpec
from benchfarm.core import steps as st
from benchfarm.kubeapi.client import Kube
from benchfarm.session.lifeline import Lifeline
from benchfarm.session.status import StatusWriter
from benchfarm.settings import Settings
from benchfarm.store.spool import Spool

PEER_TAG = "iperf3-peer"   # a place's own network peer (host:port), as a bench has one


def iperf3_peer(peer: str) -> dict[str, str]:
    """What a network suite's command reads of its peer: BENCHFARM_IPERF3_HOST and _PORT. The
    lab's peer (BENCHFARM_IPERF3_PEER) serves one test at a time; a place tagged `iperf3-peer`
    names the board's own, so boards measured at once do not find it busy."""
    if not peer:
        return {}
    host, _, port = peer.partition(":")
    return {"BENCHFARM_IPERF3_HOST": host, "BENCHFARM_IPERF3_PORT": port or "5201"}


@dataclass
class Config:
    coordinator: str
    device_types: Path
    spool: Path
    environment: dict[str, str]
    software_cache: Path = Path("/tmp/benchfarm/software")
    lease_seconds: int = 15
    renew_seconds: float = 3.0
    settings: Settings = field(default_factory=Settings)

    @classmethod
    def from_settings(cls, s: Settings) -> Config:
        """The session's configuration from its settings."""
        return cls(coordinator=s.coordinator, device_types=s.device_types, spool=s.spool_dir,
                   environment=iperf3_peer(s.iperf3_peer), software_cache=s.software_cache_dir,
                   lease_seconds=s.session_lease_seconds, settings=s)


@dataclass
class RunContext:
    """One run as this session serves it (one attempt = one board)."""

    namespace: str
    name: str
    uid: str
    spec: BenchmarkRunSpec
    suites: list[SuiteSpec]
    place: str
    attempt: int
    resume: int
    deadline: float                 # monotonic: the run's timeout
    prefix: str                     # the run's keys in the store
    config: Config
    kube: Kube
    lifeline: Lifeline
    status: StatusWriter
    spool: Spool
    labels: dict[str, str] = field(default_factory=dict)    # the run's metadata.labels

    def sides(self) -> list[tuple[str, str, SoftwareSet | None]]:
        """(key, label, software set or None) of each side: key "" for a one-sided run."""
        sets = self.spec.software_sets()
        return [(key, label, software)
                for key, (label, software) in zip(st.side_keys(len(sets)), sets, strict=False)]

    def iterations(self) -> int:
        """Measured iterations planned: fixed, or at most repeat.maxIterations."""
        return self.spec.repeat.maxIterations if self.spec.repeat else self.spec.iterations

    def plan(self) -> list[st.Step]:
        return st.plan_steps(self.spec.bootCycles, [s.name for s in self.suites],
                             self.iterations(), self.spec.warmupIterations,
                             sides=len(self.spec.software_sets()))

    def done_steps(self) -> set[str]:
        """Names of the steps this attempt has checkpointed (in the spool or the store)."""
        prefix = st.checkpoint_prefix(self.prefix, self.attempt)
        return self.lifeline.wait_out("read the checkpoints",
                                      lambda: st.done_names(self.spool.keys(prefix), prefix))

    def serial_key(self) -> str:
        return f"{self.prefix}/serial/attempt-{self.attempt:03d}-run-{self.resume:02d}.log"
