"""Every knob of benchfarm's programs, read once from the environment and typed.

The operator, a board session, the dashboard and the CLI are configured through environment
variables: the chart's values set them (the same names, listed in `docs/reference/generated/
settings.md`), the embedded lab writes them to `.benchfarm/env`, and the operator hands a session
the ones that say which run it is (group `launch`). `Settings.from_env` is the one place that
reads the process's environment: each program builds its `Settings` at its entry point and hands
it on, so a typo in a value is one clear error at start (`SettingError`, naming the variable and
what it takes), never a traceback mid-run, and a test builds the parts it tests from a `Settings`
instead of patching `os.environ`. `adopt` is the one place that writes it (a forked session takes
its run's variables, which labgrid and the suites' tools read too, and only then its settings).
The entry points (the CLI's dispatch, the operator, each session, the dashboard) are listed with
their reasons in tests/unit/test_settings.py, which fails on a `from_env` anywhere else.

Each field's docstring is its documentation: `benchfarm settings` prints them, the reference page
is generated from them, and a unit test fails on a field without one or on a variable some module
spells that no field names. Secrets (the signing key, the store's and the SMTP server's
credentials, the labgrid issuer) are fields too, read through the object like any other;
`repr` never shows them. `Settings.environ` is for child processes and other programs' variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

HEALTH_ACCOUNT = "benchfarm-health"   # the chart's ServiceAccount of health-check sessions
SESSION_JOB_TTL = 86400               # seconds finished session Jobs (and their logs) stay: a day
WARM_IDLE_SECONDS = 3600              # a warm session pod without a run this long exits
# variables whose empty value means something ("" for no liveness endpoint); elsewhere an empty
# value is the default, as if unset
_EMPTY_MEANS_NONE = frozenset({"BENCHFARM_LIVENESS"})


class SettingError(SystemExit):
    """A setting a program cannot start with: the variable, its value and what it takes."""


class Group(StrEnum):
    """Who reads a setting (the sections of `benchfarm settings` and the reference page)."""
    operator = "operator"            # the operator (the chart's Deployment)
    session = "session"              # a board session (and the operator, which launches it)
    store = "store"                  # the artifact store: operator, sessions, dashboard, CLI
    notifications = "notifications"  # the operator's deliveries of Notifications
    labgrid = "labgrid"              # the coordinator and the identities benchfarm has there
    tools = "tools"                  # the dashboard and the CLI's commands
    launch = "launch"                # set by the operator for each session it launches


def _var(name: str, group: Group, **kw: Any) -> Any:
    """A field read from the variable `name`."""
    return Field(validation_alias=name, json_schema_extra={"group": group.value}, **kw)


_O, _S, _ST, _N, _L, _T, _X = (Group.operator, Group.session, Group.store, Group.notifications,
                               Group.labgrid, Group.tools, Group.launch)


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True, populate_by_name=True,
                              extra="ignore")

    # -- the operator ---------------------------------------------------------------------------
    namespace: str = _var("BENCHFARM_NAMESPACE", _O, default="default")
    """The release's namespace: where the operator keeps its leader Lease, session Jobs and
    health-check Leases, and the namespace a dashboard or `benchfarm check` looks at."""
    pod_name: str = _var("BENCHFARM_POD_NAME", _O, default="")
    """The operator's identity in the leader Lease `benchfarm-operator` (the chart sets the pod's
    name; empty: host name and pid)."""
    log_level: str = _var("BENCHFARM_LOG_LEVEL", _O, default="INFO")
    """Python log level of the operator and the sessions."""
    liveness: str = _var("BENCHFARM_LIVENESS", _O, default="http://127.0.0.1:8080/healthz")
    """The operator's liveness endpoint (empty: none; `benchfarm operator --liveness`
    overrides it)."""
    metrics_port: int = _var("BENCHFARM_METRICS_PORT", _O, default=0, ge=0, le=65535)
    """Port of the operator's Prometheus metrics, served by a standby replica too
    (`benchfarm_leader` 0); 0 turns them off (9090 in the chart)."""
    metrics_addr: str = _var("BENCHFARM_METRICS_ADDR", _O, default="0.0.0.0")
    """Address the metrics listen on."""
    device_types: Path = _var("BENCHFARM_DEVICE_TYPES", _O,
                              default=Path("exporters/device-types"))
    """Directory of the device types (the chart mounts its `deviceTypes` ConfigMap)."""
    database_url: str = _var("BENCHFARM_DATABASE_URL", _O, default="", repr=False)
    """The results database (PostgreSQL, SQLAlchemy URL; empty: no results index). A lab
    admin's credential: it reads every namespace."""
    max_sessions: int | None = _var("BENCHFARM_MAX_SESSIONS", _O, default=None, ge=0)
    """Sessions holding a board at once (0 or unset: no limit); a board goes only to a run whose
    session can start at once or on standby."""
    standby: int | None = _var("BENCHFARM_STANDBY_SESSIONS", _O, default=None, ge=0)
    """Sessions launched on standby beyond `BENCHFARM_MAX_SESSIONS`, each waiting at its board
    for its go-ahead (default: as many as the limit; none without a limit)."""
    scheduler_rtprio: int = _var("BENCHFARM_SCHEDULER_RTPRIO", _O, default=0, ge=0, le=99)
    """The real-time round-robin priority the operator's scheduling thread asks for, where the
    process may (0: none, the chart's default; the embedded lab sets 1)."""
    launcher: Literal["process", "job"] = _var("BENCHFARM_LAUNCHER", _O, default="process")
    """How sessions are launched: `process` (beside the operator, the embedded lab) or `job`
    (Kubernetes Jobs, the chart's default)."""
    session_server: bool = _var("BENCHFARM_SESSION_SERVER", _O, default=True)
    """The process launcher's session server (one process that has imported everything and forks
    each run's session); `0` launches a process for each session."""
    session_logs: Path | None = _var("BENCHFARM_SESSION_LOGS", _O, default=None)
    """Directory of the process launcher's session logs (default
    `$BENCHFARM_STATE/logs/sessions`)."""
    session_pids: Path | None = _var("BENCHFARM_SESSION_PIDS", _O, default=None)
    """File where the process launcher records its sessions' pids, so a restarted operator
    adopts them."""
    session_template: Path = _var("BENCHFARM_SESSION_TEMPLATE", _O,
                                  default=Path("/etc/benchfarm/session/pod.yaml"))
    """The job launcher's pod template file (the chart mounts the `<release>-session`
    ConfigMap)."""
    session_template_configmap: str = _var("BENCHFARM_SESSION_TEMPLATE_CONFIGMAP", _O, default="")
    """The name of that ConfigMap; warm slots made from an older template are replaced after
    `helm upgrade`."""
    session_job_ttl: int = _var("BENCHFARM_SESSION_JOB_TTL", _O, default=SESSION_JOB_TTL, ge=0)
    """Seconds finished session Jobs are kept (`sessions.jobTTLSeconds`)."""
    warm_sessions: int = _var("BENCHFARM_WARM_SESSIONS", _O, default=0, ge=0)
    """Warm session pods the job launcher keeps started and imported (`sessions.warm`)."""
    health_account: str = _var("BENCHFARM_HEALTH_ACCOUNT", _O, default=HEALTH_ACCOUNT)
    """ServiceAccount of health-check Jobs (`sessions.healthAccount`)."""
    log_dir: str = _var("BENCHFARM_LOG_DIR", _O, default="")
    """The lab's log directory; named so that redaction keeps it out of what tenants read."""

    # -- a board session ------------------------------------------------------------------------
    state: Path = _var("BENCHFARM_STATE", _S, default=Path("/tmp/benchfarm"))
    """A session's working directory (the process launcher's too): the spool and the software
    cache live under it."""
    spool: Path | None = _var("BENCHFARM_SPOOL", _S, default=None)
    """Where a session keeps its checkpoints and artifacts until the store has them (default
    `$BENCHFARM_STATE/spool`)."""
    software_cache: Path | None = _var("BENCHFARM_SOFTWARE_CACHE", _S, default=None)
    """The cache of downloaded software by digest (default `$BENCHFARM_STATE/software`)."""
    software_cache_mib: int = _var("BENCHFARM_SOFTWARE_CACHE_MIB", _S, default=4096, ge=1)
    """Size limit of that cache in MiB."""
    session_lease_seconds: int = _var("BENCHFARM_SESSION_LEASE_SECONDS", _S, default=15, ge=3)
    """How long a session's run Lease lasts without renewal; a session renews it every few
    seconds."""
    parse_cpu_seconds: float = _var("BENCHFARM_PARSE_CPU_SECONDS", _S, default=30.0, gt=0,
                                    le=3600)
    """CPU seconds the parse of one step's output may take (it runs in a child process of the
    session, limited to this and to `parse_memory_mib`); past it the run fails with
    ParseOverBudget, and the session went on renewing its Lease meanwhile."""
    parse_memory_mib: int = _var("BENCHFARM_PARSE_MEMORY_MIB", _S, default=2048, ge=256)
    """Address space in MiB the parse of one step's output may take (its child process's
    limit); past it the run fails with ParseOverBudget."""
    report_cpu_seconds: float = _var("BENCHFARM_REPORT_CPU_SECONDS", _S, default=120.0, gt=0,
                                     le=3600)
    """CPU seconds building a run's results and reports from its figures may take (metrics.json,
    report.md/.rst/.html, the comparison with a baseline: in a child process of the session,
    limited to this and to `report_memory_mib`; a run's are a second or less); past it the run
    fails with ReportOverBudget, and the session went on renewing its Lease meanwhile."""
    report_memory_mib: int = _var("BENCHFARM_REPORT_MEMORY_MIB", _S, default=2048, ge=256)
    """Address space in MiB building a run's results and reports may take (its child process's
    limit); past it the run fails with ReportOverBudget."""
    guide_cpu_seconds: float = _var("BENCHFARM_GUIDE_CPU_SECONDS", _O, default=120.0, gt=0,
                                    le=3600)
    """CPU seconds the operator may spend rendering a campaign's guide and its changes from its
    columns' figures (in a child process, limited to this and to `guide_memory_mib`, while the
    operator goes on scheduling); past it the campaign fails with GuideOverBudget."""
    guide_memory_mib: int = _var("BENCHFARM_GUIDE_MEMORY_MIB", _O, default=2048, ge=256)
    """Address space in MiB rendering a campaign's guide may take (its child process's limit);
    past it the campaign fails with GuideOverBudget."""
    warm_idle_seconds: float = _var("BENCHFARM_WARM_IDLE_SECONDS", _S,
                                    default=float(WARM_IDLE_SECONDS), gt=0)
    """A warm session pod given no run within this time exits, and the operator starts
    another."""
    internal_cidrs: str = _var("BENCHFARM_INTERNAL_CIDRS", _S, default="")
    """Address ranges of the lab that software URLs and webhooks may never resolve to
    (comma-separated CIDRs), besides loopback, link-local and multicast."""
    ssh_config: str = _var("BENCHFARM_SSH_CONFIG", _S, default="")
    """The ssh_config given to every ssh and rsync labgrid starts (software staging,
    `LG_PROXY`); the chart's `ssh.existingSecret`."""
    iperf3_peer: str = _var("BENCHFARM_IPERF3_PEER", _S, default="")
    """The lab's iperf3 server (`HOST:PORT`) for network suites, when a place has no
    `iperf3-peer` tag."""
    signing_key: str = _var("BENCHFARM_SIGNING_KEY", _S, default="", repr=False)
    """The key (HMAC) with which the operator signs what a session executes, leases' grants and
    go-aheads; a Secret of the release (`signing.existingSecret`)."""

    # -- the artifact store ---------------------------------------------------------------------
    s3_endpoint: str = _var("BENCHFARM_S3_ENDPOINT", _ST, default="")
    """The S3 (MinIO) endpoint, `HOST:PORT`."""
    s3_access_key: str = _var("BENCHFARM_S3_ACCESS_KEY", _ST, default="", repr=False)
    """Its access key (the chart: `minio.existingSecret`)."""
    s3_secret_key: str = _var("BENCHFARM_S3_SECRET_KEY", _ST, default="", repr=False)
    """Its secret key."""
    s3_bucket: str = _var("BENCHFARM_S3_BUCKET", _ST, default="benchfarm-artifacts")
    """The artifact bucket."""
    s3_secure: bool = _var("BENCHFARM_S3_SECURE", _ST, default=False)
    """`true`: speak HTTPS to the store."""
    s3_public_endpoint: str = _var("BENCHFARM_S3_PUBLIC_ENDPOINT", _O, default="")
    """The store as tenants' CI and people reach it (`HOST:PORT`, or `https://HOST:PORT` for
    TLS), written with each namespace's own credential into its Secret `benchfarm-store`;
    empty: `BENCHFARM_S3_ENDPOINT`."""
    store_accounts: bool = _var("BENCHFARM_STORE_ACCOUNTS", _O, default=True)
    """`true`: the operator gives each namespace the LabPolicy names, and each with a
    BenchmarkRun, a store user of its own limited to `<namespace>/` (the MinIO admin API, with
    the store credential above) and its keys in the namespace's Secret `benchfarm-store`, what
    `benchfarm upload`, `submit`, `report` and `export` use. `false` for a store without
    MinIO's admin API: then no tenant has a store credential."""

    # -- notifications --------------------------------------------------------------------------
    smtp_host: str = _var("BENCHFARM_SMTP_HOST", _N, default="")
    """The lab's SMTP server for e-mail notifications; empty: no e-mail (a Notification with
    `email` is not Ready)."""
    smtp_port: int = _var("BENCHFARM_SMTP_PORT", _N, default=587, ge=1, le=65535)
    """Its port. The operator always speaks STARTTLS and verifies the server's certificate; a
    server without STARTTLS gets no mail."""
    smtp_from: str = _var("BENCHFARM_SMTP_FROM", _N, default="benchfarm@localhost")
    """The sender of notification e-mail."""
    smtp_username: str = _var("BENCHFARM_SMTP_USERNAME", _N, default="")
    """A login on the SMTP server, after STARTTLS (none by default)."""
    smtp_password: str = _var("BENCHFARM_SMTP_PASSWORD", _N, default="", repr=False)
    """Its password (the chart: `notifications.smtp.existingSecret`)."""
    smtp_ca_file: str = _var("BENCHFARM_SMTP_CA_FILE", _N, default="")
    """A CA bundle to verify the SMTP server's certificate with, where it is not one the system
    trusts."""
    notify_backoff_seconds: float = _var("BENCHFARM_NOTIFY_BACKOFF_SECONDS", _N, default=2.0,
                                         gt=0)
    """The delay before a failed delivery's first retry; it doubles at each failure."""
    notify_backoff_max_seconds: float = _var("BENCHFARM_NOTIFY_BACKOFF_MAX_SECONDS", _N,
                                             default=300.0, gt=0)
    """The longest delay between two attempts of a delivery."""
    notify_give_up_seconds: float = _var("BENCHFARM_NOTIFY_GIVE_UP_SECONDS", _N,
                                         default=86400.0, gt=0)
    """A delivery still failing this long after its event is given up (`Failed`)."""
    notify_deadline_seconds: float = _var("BENCHFARM_NOTIFY_DEADLINE_SECONDS", _N,
                                          default=20.0, gt=0, le=600)
    """One delivery attempt's deadline: connecting, sending and the receiver's answer (or the
    SMTP server's last) together, however slowly a receiver trickles; past it the attempt
    failed and is tried again later."""
    webhook_loopback_ports: str = _var("BENCHFARM_WEBHOOK_LOOPBACK_PORTS", _N, default="")
    """Loopback ports webhooks may post to (`8080,27060-27069`), for a lab whose receivers run
    on the operator's own host; none by default. A namespace's `webhookHosts` must still list
    the host."""

    # -- labgrid --------------------------------------------------------------------------------
    coordinator: str = _var("LG_COORDINATOR", _L, default="127.0.0.1:20408")
    """labgrid's coordinator, `HOST:PORT` (labgrid's own variable)."""
    lease_coordinator: str = _var("BENCHFARM_LEASE_COORDINATOR", _L, default="")
    """The coordinator's address as people's `benchfarm lease` reaches it (empty: the
    operator's own)."""
    labgrid_user: str = _var("BENCHFARM_LABGRID_USER", _L, default="benchfarm")
    """The user benchfarm is to the coordinator (places it holds show `<host>/<user>`)."""
    labgrid_host: str = _var("BENCHFARM_LABGRID_HOST", _L, default="operator")
    """The host part of that name."""
    labgrid_ca: str = _var("BENCHFARM_LABGRID_CA", _L, default="")
    """CA certificate of a coordinator that takes only clients with certificates (mutual
    TLS)."""
    labgrid_cert: str = _var("BENCHFARM_LABGRID_CERT", _L, default="")
    """The client certificate benchfarm connects with."""
    labgrid_key: str = _var("BENCHFARM_LABGRID_KEY", _L, default="")
    """Its private key."""
    labgrid_issuer_cert: str = _var("BENCHFARM_LABGRID_ISSUER_CERT", _L, default="")
    """The lab's labgrid CA certificate, with which the operator issues sessions' and people's
    certificates."""
    labgrid_issuer_key: str = _var("BENCHFARM_LABGRID_ISSUER_KEY", _L, default="", repr=False)
    """That CA's private key."""

    # -- the dashboard and the CLI --------------------------------------------------------------
    kubeconfig: str = _var("KUBECONFIG", _T, default="")
    """The kubeconfig of the CLI's commands and the embedded lab's programs outside a cluster
    (Kubernetes' own variable; empty: `~/.kube/config`, or the pod's service account)."""
    web_url: str = _var("BENCHFARM_WEB_URL", _T, default="")
    """The dashboard's URL (the embedded lab's; `benchfarm check --boards` also tries it from
    the boards)."""
    web_history_source: str = _var("BENCHFARM_WEB_HISTORY_SOURCE", _T, default="")
    """`MODULE:FACTORY` the dashboard's history comes from (`web.historySource`; default the
    results database, else the runs' `metrics.json`)."""
    web_cookie_secure: Literal["auto", "always", "never"] = _var(
        "BENCHFARM_WEB_COOKIE_SECURE", _T, default="auto")
    """Whether the dashboard's session cookie is `Secure` (sent over HTTPS only): `auto` marks it
    unless the site is plain HTTP on loopback (the embedded lab; behind a TLS-terminating ingress
    it is marked); `always`; `never` only for a site served in plain HTTP, where tokens cross the
    network in the clear anyway."""
    web_trusted_proxies: str = _var("BENCHFARM_WEB_TRUSTED_PROXIES", _T, default="")
    """The dashboard's proxies (an ingress; comma-separated CIDRs): a request from one counts its
    failed sign-ins against the client `X-Forwarded-For` names, not against the proxy (none by
    default: every request's own peer)."""
    web_render_cpu_seconds: float = _var("BENCHFARM_WEB_RENDER_CPU_SECONDS", _T, default=10.0,
                                         gt=0, le=300)
    """CPU seconds the dashboard may spend rendering one page from a tenant's figures (a
    history's chart, a run's page, a comparison: in a child process, limited to this and to
    `web_render_memory_mib`); past it the page answers 503 saying so, and every other page
    goes on answering."""
    web_render_memory_mib: int = _var("BENCHFARM_WEB_RENDER_MEMORY_MIB", _T, default=1024,
                                      ge=256)
    """Address space in MiB rendering one dashboard page may take (its child process's
    limit); past it the page answers 503."""
    control_endpoints: str = _var("BENCHFARM_CONTROL_ENDPOINTS", _T, default="")
    """Extra control endpoints for `benchfarm check --boards` to try from the boards
    (`HOST:PORT[=what]`, comma-separated: a BMC, a switch's management port)."""
    kcidb_token: str = _var("BENCHFARM_KCIDB_TOKEN", _T, default="", repr=False)
    """`benchfarm export kcidb --submit URL`: the bearer token sent to the KCIDB endpoint."""
    submit_outage_budget: float = _var("BENCHFARM_SUBMIT_OUTAGE_BUDGET", _T, default=300.0,
                                       ge=0)
    """`benchfarm submit`: seconds an unreachable API server is waited out before exiting 2
    (the lab's fault)."""
    kubernetes_service_host: str = _var("KUBERNETES_SERVICE_HOST", _T, default="")
    """The API server's address inside a pod (Kubernetes sets it; `benchfarm check --boards`
    names it as a control endpoint)."""
    kubernetes_service_port: str = _var("KUBERNETES_SERVICE_PORT", _T, default="443")
    """Its port (Kubernetes sets it)."""
    shell: str = _var("SHELL", _T, default="/bin/sh")
    """The shell `benchfarm lease` opens with the lease's commands set."""

    # -- what the operator hands a session ------------------------------------------------------
    run_uid: str = _var("BENCHFARM_RUN_UID", _X, default="")
    """The uid of the run the session was launched for: a run deleted and made again under the
    same name is not resumed."""
    run_board: str = _var("BENCHFARM_RUN_BOARD", _X, default="")
    """The board the operator granted."""
    run_place: str = _var("BENCHFARM_RUN_PLACE", _X, default="")
    """The place and the resources it matches, so the session's labgrid client reads one place,
    not the whole lab."""
    board_uid: str = _var("BENCHFARM_BOARD_UID", _X, default="")
    """The Board whose health check this session is."""
    health_namespace: str = _var("BENCHFARM_HEALTH_NAMESPACE", _X, default="")
    """Namespace of the health-check Leases a health-check session holds (empty: the
    release's)."""
    lease_uid: str = _var("BENCHFARM_LEASE_UID", _X, default="")
    """The BoardLease whose end this session is."""
    labgrid_session: str = _var("BENCHFARM_LABGRID_SESSION", _X, default="", repr=False)
    """The session's own labgrid certificate and key, sealed with the signing key
    (`operator/launch/credentials.py`); never set it yourself."""
    warm_slot: str = _var("BENCHFARM_WARM_SLOT", _X, default="")
    """The warm slot (its ConfigMap) a warm pod serves; it runs only a grant signed for that
    slot."""
    warm_ready: str = _var("BENCHFARM_WARM_READY", _X, default="")
    """File a warm session pod writes once it has imported everything (its readiness probe
    reads it)."""

    environ: Mapping[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    """The environment read (for child processes and other programs' variables, never a setting)."""

    @model_validator(mode="after")
    def _no_limit(self) -> Settings:
        if self.max_sessions == 0:        # 0 sessions: no limit
            object.__setattr__(self, "max_sessions", None)
        return self

    @property
    def standby_sessions(self) -> int:
        """Sessions on standby beyond the limit (none without one): as many as the limit by
        default, so that every seat has an heir, a standby session named it in a relay
        (`api.grants.Relay`) that takes it the moment its holder releases its place
        (benchmarks/RESULTS.md, "Sessions on standby and relays")."""
        if self.max_sessions is None:
            return 0
        return max(1, self.max_sessions) if self.standby is None else self.standby

    @property
    def session_logs_dir(self) -> Path:
        return self.session_logs or self.state / "logs" / "sessions"

    @property
    def spool_dir(self) -> Path:
        return self.spool or self.state / "spool"

    @property
    def software_cache_dir(self) -> Path:
        return self.software_cache or self.state / "software"

    # -- reading and writing the environment ----------------------------------------------------
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings of `environ` (default: this process's environment); SettingError
        naming the first variable that cannot be used."""
        env = dict(os.environ if environ is None else environ)
        given = {name: value for name, value in env.items()
                 if name in _BY_VARIABLE and (value.strip() or name in _EMPTY_MEANS_NONE)}
        try:
            return cls.model_validate({**given, "environ": env})
        except ValidationError as exc:
            raise SettingError(_explain(exc, given)) from None


def adopt(changes: Mapping[str, str]) -> None:
    """This process takes `changes` into its environment: a forked session its run's variables,
    a labgrid client its identity (labgrid and the suites' tools read them there)."""
    os.environ.update(changes)


def variables() -> Iterator[tuple[str, str, Group, Any, str]]:
    """(variable, field, group, default, description) of every setting, in the model's order."""
    for name, f in Settings.model_fields.items():
        if not isinstance(f.validation_alias, str):
            continue
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        default = None if f.default_factory is not None else f.default
        yield (f.validation_alias, name, Group(str(extra["group"])), default,
               " ".join((f.description or "").split()))


_BY_VARIABLE = {variable: name for variable, name, _, _, _ in variables()}


def _explain(exc: ValidationError, given: Mapping[str, str]) -> str:
    """pydantic's first error, as the variable, its value and what it takes."""
    err = exc.errors()[0]
    variable = str(err["loc"][0]) if err["loc"] else ""
    raw = given.get(variable, "")
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind == "int_parsing" or kind == "int_from_float":
        what = "an integer is needed"
    elif kind == "float_parsing":
        what = "a number is needed"
    elif kind == "bool_parsing":
        what = "true or false (1 or 0)"
    elif kind == "literal_error":
        what = str(ctx.get("expected", ""))
    elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        f = Settings.model_fields[_BY_VARIABLE[variable]]
        low = next((m.ge if hasattr(m, "ge") else m.gt for m in f.metadata
                    if hasattr(m, "ge") or hasattr(m, "gt")), None)
        high = next((m.le for m in f.metadata if hasattr(m, "le")), None)
        what = f"from {low}{f' to {high}' if high is not None else ' up'}"
    else:
        what = err["msg"]
    return f"{variable}={raw!r}: {what}"


def describe() -> str:
    """Every setting as `benchfarm settings` prints it: by group, with its default."""
    lines: list[str] = []
    group: Group | None = None
    for variable, _, g, default, text in variables():
        if g is not group:
            group = g
            lines += ["", f"# {_GROUP_TITLES[g]}"]
        shown = "" if default in (None, "") else f" (default {default})"
        lines.append(f"{variable}{shown}\n    {text}")
    return "\n".join(lines).strip() + "\n"


_GROUP_TITLES = {
    Group.operator: "The operator",
    Group.session: "A board session",
    Group.store: "The artifact store",
    Group.notifications: "Notifications (the operator's deliveries)",
    Group.labgrid: "labgrid",
    Group.tools: "The dashboard and the CLI",
    Group.launch: "What the operator hands each session it launches (never set these)",
}
