"""The operator's settings, read once from its environment and typed: what `benchfarm operator`
is told by the chart's Deployment (or the embedded lab) — its namespace, the lab's addresses, how
sessions are launched and how many at once. `main.run` reads them before anything starts and
hands them on; nothing else in the operator reads its environment, so a typo in a value is one
clear error at start (SystemExit naming the variable), never a traceback mid-run, and a test
builds the operator's parts from a `Settings` instead of patching `os.environ`.

`docs/reference/settings.md` describes each variable. Secrets (the signing key, the labgrid
issuer and CA) are read by their own typed readers (`core.trust.key_from`,
`lab.labgrid_pki.issuer_from_env`, `kube.credentials.SessionCredentials.from_env`) from the same
environment, kept here as `environ`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

HEALTH_ACCOUNT = "benchfarm-health"   # the chart's ServiceAccount of health-check sessions
SESSION_JOB_TTL = 86400               # seconds finished session Jobs (and their logs) stay: a day


class SettingError(SystemExit):
    """A setting the operator cannot start with: the variable, its value and what it takes."""


def _int(environ: Mapping[str, str], name: str, default: int, low: int = 0,
         high: int | None = None) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r}: an integer is needed") from None
    if value < low or (high is not None and value > high):
        raise SettingError(f"{name}={raw!r}: from {low}"
                           f"{f' to {high}' if high is not None else ' up'}")
    return value


@dataclass(frozen=True)
class Settings:
    namespace: str = "default"                  # BENCHFARM_NAMESPACE: the operator's own
    pod_name: str = ""                          # BENCHFARM_POD_NAME: its identity as leader
    log_level: str = "INFO"                     # BENCHFARM_LOG_LEVEL
    liveness: str = "http://127.0.0.1:8080/healthz"   # BENCHFARM_LIVENESS ("" for none)
    metrics_port: int = 0                       # BENCHFARM_METRICS_PORT (0: no /metrics)
    metrics_addr: str = "0.0.0.0"               # BENCHFARM_METRICS_ADDR
    device_types: Path = Path("exporters/device-types")   # BENCHFARM_DEVICE_TYPES
    coordinator: str = "127.0.0.1:20408"        # LG_COORDINATOR: labgrid's coordinator
    labgrid_user: str = "benchfarm"             # BENCHFARM_LABGRID_USER: the operator's name
    labgrid_host: str = "operator"              # BENCHFARM_LABGRID_HOST  (as labgrid shows it)
    lease_coordinator: str = ""                 # BENCHFARM_LEASE_COORDINATOR ("": coordinator)
    database_url: str = ""                      # BENCHFARM_DATABASE_URL ("": no results index)
    max_sessions: int | None = None             # BENCHFARM_MAX_SESSIONS (0 or unset: no limit)
    standby: int = 0                            # BENCHFARM_STANDBY_SESSIONS (see from_env)
    scheduler_rtprio: int = 0                   # BENCHFARM_SCHEDULER_RTPRIO (0: none)
    launcher: Literal["process", "job"] = "process"   # BENCHFARM_LAUNCHER
    state: Path = Path("/tmp/benchfarm")        # BENCHFARM_STATE: the process launcher's
    session_logs: Path | None = None            # BENCHFARM_SESSION_LOGS (state/logs/sessions)
    session_pids: Path | None = None            # BENCHFARM_SESSION_PIDS
    session_server: bool = True                 # BENCHFARM_SESSION_SERVER ("0": a process each)
    session_template: Path = Path("/etc/benchfarm/session/pod.yaml")  # BENCHFARM_SESSION_TEMPLATE
    session_template_configmap: str = ""        # BENCHFARM_SESSION_TEMPLATE_CONFIGMAP
    session_job_ttl: int = SESSION_JOB_TTL      # BENCHFARM_SESSION_JOB_TTL
    warm_sessions: int = 0                      # BENCHFARM_WARM_SESSIONS
    health_account: str = HEALTH_ACCOUNT        # BENCHFARM_HEALTH_ACCOUNT
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        get = env.get
        max_sessions = _int(env, "BENCHFARM_MAX_SESSIONS", 0) or None
        # sessions on standby beyond the limit (none without one): as many as the limit by
        # default, so that every seat has an heir, a standby session named it in a relay
        # (`api.grants.Relay`) that takes it the moment its holder releases its place. In
        # `make bench-scale ARGS="--runs 2000 --window 120"` (12 sessions), 3 on standby took
        # 204 of 548 seats by relay and the boards were powered 82.6 % of the time their
        # sessions allowed; 6 took 505 of 685 (85.6 %); 12 took 783 of 795 (87.9 %; board freed
        # -> next powered 0.16 / 1.28 s p50/p99), at 10 runs created a second instead of 16:
        # the waiting sessions' Leases and watches load the API server.
        standby = 0 if max_sessions is None else \
            _int(env, "BENCHFARM_STANDBY_SESSIONS", max(1, max_sessions))
        launcher = get("BENCHFARM_LAUNCHER", "process")
        if launcher not in ("process", "job"):
            raise SettingError(f"BENCHFARM_LAUNCHER={launcher!r}: 'process' or 'job'")
        state = Path(get("BENCHFARM_STATE", "/tmp/benchfarm"))
        logs, pids = get("BENCHFARM_SESSION_LOGS"), get("BENCHFARM_SESSION_PIDS")
        return cls(
            namespace=get("BENCHFARM_NAMESPACE", "default"),
            pod_name=get("BENCHFARM_POD_NAME", ""),
            log_level=get("BENCHFARM_LOG_LEVEL", "INFO"),
            liveness=get("BENCHFARM_LIVENESS", cls.liveness),
            metrics_port=_int(env, "BENCHFARM_METRICS_PORT", 0, high=65535),
            metrics_addr=get("BENCHFARM_METRICS_ADDR", "0.0.0.0"),
            device_types=Path(get("BENCHFARM_DEVICE_TYPES", "exporters/device-types")),
            coordinator=get("LG_COORDINATOR", cls.coordinator),
            labgrid_user=get("BENCHFARM_LABGRID_USER", "benchfarm"),
            labgrid_host=get("BENCHFARM_LABGRID_HOST", "operator"),
            lease_coordinator=get("BENCHFARM_LEASE_COORDINATOR", ""),
            database_url=get("BENCHFARM_DATABASE_URL", ""),
            max_sessions=max_sessions,
            standby=standby,
            # the real-time priority the scheduling thread asks for (`cpu.first_in_line`), 0
            # for none: the default, since a cluster's pod may seldom take one. The embedded lab
            # asks for 1 where it may. In `make bench-scale ARGS="--runs 2000 --window 120"` the
            # worst round fell from 86.4 to 57.0 ms and p99 from 11.7 to 7.3 ms
            scheduler_rtprio=min(99, _int(env, "BENCHFARM_SCHEDULER_RTPRIO", 0)),
            launcher="job" if launcher == "job" else "process",
            state=state,
            session_logs=Path(logs) if logs else state / "logs" / "sessions",
            session_pids=Path(pids) if pids else None,
            session_server=get("BENCHFARM_SESSION_SERVER", "1") != "0",
            session_template=Path(get("BENCHFARM_SESSION_TEMPLATE", str(cls.session_template))),
            session_template_configmap=get("BENCHFARM_SESSION_TEMPLATE_CONFIGMAP", ""),
            session_job_ttl=_int(env, "BENCHFARM_SESSION_JOB_TTL", SESSION_JOB_TTL),
            warm_sessions=_int(env, "BENCHFARM_WARM_SESSIONS", 0),
            health_account=get("BENCHFARM_HEALTH_ACCOUNT", HEALTH_ACCOUNT),
            environ=env)
