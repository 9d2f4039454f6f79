"""Each board session's own labgrid credentials: what the operator issues at a launch, whatever
launcher starts the session (`launchers.ProcessLauncher`, `jobs.JobLauncher` cold or warm).

The coordinator believes a client's certificate, not its claims (`core.policy.identity`); so a
session gets a certificate of its own that lets it be its own identity and acquire its own board
only, never the operator's certificate, which may drive every place.
"""

from __future__ import annotations

import datetime as dt

from benchfarm.api.outcomes import SessionKind
from benchfarm.api.places import health_identity, lease_identity, run_identity
from benchfarm.core.policy import trust
from benchfarm.lab.labgrid_compat import ENV_CA, ENV_CERT, ENV_KEY, ENV_SEALED
from benchfarm.lab.labgrid_pki import ENV_ISSUER_CERT, ENV_ISSUER_KEY, Issuer, issuer_from, seal
from benchfarm.operator.launch.interface import Launch
from benchfarm.settings import Settings

# what the operator's own labgrid credentials are: never handed on to a session it issues for
OPERATOR_ONLY = (ENV_CERT, ENV_KEY, ENV_ISSUER_CERT, ENV_ISSUER_KEY)


def session_identity(req: Launch) -> str:
    """The labgrid identity ("host/user") the session of `req` holds its place under."""
    if req.kind == SessionKind.health_check:
        return "/".join(health_identity(req.board, req.attempt))
    if req.kind == SessionKind.lease_end:
        return "/".join(lease_identity(req.uid))
    return "/".join(run_identity(req.uid))


class SessionCredentials:
    """Each session's own labgrid certificate: the operator holds the lab's labgrid issuing key
    (BENCHFARM_LABGRID_ISSUER_CERT/_KEY, file paths) and, for each session it launches, issues a
    certificate that lets its holder be that session's identity and nothing else
    (`core.policy.identity`, role `session`) and acquire its own board only (a `place` grant),
    expiring with the session's deadline. Certificate and key go into the session's environment
    sealed with the signing key (BENCHFARM_LABGRID_SESSION, `lab.labgrid_pki.seal`), the same way
    for a local process, a Job's pod and a warm slot's grant; no key file is written. The
    operator's own certificate and the issuing key are never in a session's environment. A
    session's credentials reach its own place only."""

    MARGIN = dt.timedelta(minutes=15)      # a session's deadline is its run's, give or take

    def __init__(self, issuer: Issuer, signing_key: bytes) -> None:
        self.issuer, self.signing_key = issuer, signing_key

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionCredentials | None:
        """The operator's issuer, or None where it has none (a coordinator without TLS)."""
        issuer = issuer_from(settings)
        if issuer is None:
            return None
        try:
            key = trust.key_from(settings.signing_key)
        except ValueError as exc:
            raise SystemExit(f"{ENV_ISSUER_CERT}: sessions' labgrid certificates are sealed "
                             f"with the signing key: {exc}") from exc
        if not settings.labgrid_ca:
            raise SystemExit(f"{ENV_ISSUER_CERT} is set but not {ENV_CA}: a session checks the "
                             "coordinator against that CA")
        return cls(issuer, key)

    def issue(self, req: Launch) -> dict[str, str]:
        """The environment that gives the session of `req` its own certificate (the CA that
        vouches for the coordinator is in the session's own environment already)."""
        identity = session_identity(req)
        cert, key = self.issuer.issue_with_key(
            common_name=identity,
            grants=[("session", identity), *([("place", req.board)] if req.board else [])],
            lifetime=dt.timedelta(seconds=req.deadline_s) + self.MARGIN)
        return {ENV_SEALED: seal(self.signing_key, cert, key)}


def session_env(req: Launch, credentials: SessionCredentials | None) -> dict[str, str]:
    """What a launcher adds to a session's environment: the run's (or board's) identity, and
    its own labgrid credentials where the operator issues them."""
    return {**req.env(), **(credentials.issue(req) if credentials is not None else {})}
