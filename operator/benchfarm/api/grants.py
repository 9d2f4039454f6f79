"""What the operator hands a warm session pod when it gives it a run: one typed definition.

A warm pod (`operator.launch.warm`, `session.warm`) is started before any run exists, imports everything and
waits for a ConfigMap of its own name. The operator writes the grant there and signs it with the
key only it and its sessions hold (`core.policy.trust`): the pod runs exactly the run, board, attempt and
deadline the operator chose, for its own slot only, and nothing whose signature does not verify.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

LAUNCH_ENV_PREFIX = "BENCHFARM_RUN_"
# a session's own labgrid certificate and key, sealed by the operator (`lab.labgrid_pki.seal`)
LABGRID_SESSION_ENV = "BENCHFARM_LABGRID_SESSION"


class SessionGrant(BaseModel):
    """One run for one warm slot: what `benchfarm session run` would get from its launch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slot: str                     # the warm pod's slot (its Job, ServiceAccount and ConfigMap)
    namespace: str
    name: str
    attempt: int
    resume: int
    deadline_s: float
    env: dict[str, str]           # the launch's identity, as a cold session gets it: the run's
                                  # uid, its board and place (BENCHFARM_RUN_*) and its sealed
                                  # labgrid credentials, nothing else

    @field_validator("env")
    @classmethod
    def _only_the_launch(cls, env: dict[str, str]) -> dict[str, str]:
        if bad := sorted(k for k in env if not k.startswith(LAUNCH_ENV_PREFIX)
                         and k != LABGRID_SESSION_ENV):
            raise ValueError(f"a grant sets only {LAUNCH_ENV_PREFIX}* variables and "
                             f"{LABGRID_SESSION_ENV}, not {bad}")
        return env


READY_FILE = "/tmp/benchfarm-warm-ready"   # a warm pod made it once its imports are done (its
                                           # readiness probe, `operator.launch.jobs`)
GRANT_KEY = "grant.json"          # the ConfigMap's data keys
SIGNATURE_KEY = "signature"


GO_AHEAD_FIELD = "goAhead"        # `status.goAhead` of a BenchmarkRun


class Relay(BaseModel):
    """`status.goAhead.after`: the seat a standby session takes is the one the session holding
    `place` (as `holder`, its labgrid identity) gives up when it releases that place.

    The operator names it ahead of time, when it launches the standby run (or in a later round),
    for a seated run whose place it sees acquired. The standby session's labgrid client then
    takes its board as soon as the coordinator's update shows `place` no longer held by
    `holder`, which it receives anyway (the coordinator sends every place change to every
    client): the seat changes hands in one coordinator update instead of four API round trips
    (the session's boardReleased write, the operator's watch, its go-ahead write, the standby
    session's watch: 1.1 s at the median of `make bench-scale`, 4.2 s at p99). The operator
    counts the seat as the standby run's from the moment it sees the holder's board released
    (or its run ended) and, if the standby session has not taken its place a while later
    (its connection came up after the release), writes the plain go-ahead as before."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    place: str
    holder: str


class GoAhead(BaseModel):
    """`status.goAhead`: the operator's word that the session of this attempt may take its board.

    Where the lab limits how many sessions hold a board at once (BENCHFARM_MAX_SESSIONS), the
    operator launches more sessions than that, on standby: each starts, takes its Lease,
    connects and fetches its software, then waits here before acquiring its place. Its go-ahead
    is a relay (`after`: the seat it takes when its holder releases it) or, for a seat that
    freed with no heir named, written when the operator sees the seat free; either way that
    session powers its board on at once instead of being launched only then. Without a limit
    the go-ahead is written with the run's Running status and nobody waits. Signed with the sessions' key
    (`core.policy.trust.sign_go_ahead`): a tenant who can write the run's status cannot give its own
    session a board beyond the lab's limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempt: int                  # the attempt it is for: a re-queued run needs a new one
    signature: str
    after: Relay | None = None    # a relay: the go-ahead holds once that seat is given up
