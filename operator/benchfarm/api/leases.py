"""A BoardLease's shape: a person's board, through the same queue as the runs. Its spec (a
selector, a duration, the person's labgrid user and public key), the access it is granted (the
certificates for labgrid's coordinator and the exporter hosts' SSH), its status, and the rules
the API server checks of it. No I/O.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from benchfarm.api.base import Condition, Model, Status, immutable
from benchfarm.api.boards import BoardSelector
from benchfarm.api.outcomes import LeaseEnd

#: `90m`, `2h`, `1h30m`, `45s` (core.scheduling.durations reads exactly this)
DURATION_PATTERN = r"^(([0-9]{1,4})h)?(([0-9]{1,6})m)?(([0-9]{1,7})s)?$"
#: labgrid's user as `labgrid-client` names it: LG_HOSTNAME/LG_USERNAME
LabgridUser = Annotated[str, Field(min_length=3, max_length=128,
                                   pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")]


class BoardLeaseSpec(Model):
    selector: BoardSelector = Field(json_schema_extra=immutable("selector is immutable"))
    duration: Annotated[str, Field(min_length=2, max_length=24, pattern=DURATION_PATTERN)] = Field(
        description=("How long the person keeps the board once granted, in the Kubernetes "
                     "duration form (90m, 2h, 1h30m). Raise it to extend a granted lease, up to "
                     "the LabPolicy's leases.maxLeaseSeconds for the namespace."))
    priority: int = Field(100, ge=0, le=1000, description=(
        "Higher first, in the same queue as BenchmarkRuns; capped by the namespace's ceiling."))
    user: LabgridUser = Field(
        description=("The labgrid user (host/name, i.e. LG_HOSTNAME/LG_USERNAME) the person "
                     "connects as: benchfarm allows it on the place (labgrid-client allow). "
                     "The name is the creator's own Kubernetes user name as labgrid spells it "
                     "(`_` doubled, `:` as `_c`, `@` as `_a`; `benchfarm lease` fills it in) "
                     "and the host never the lab's (benchfarm, operator): the API server "
                     "refuses any other."),
        json_schema_extra=immutable("user is immutable"))
    release: bool = Field(False, description="Set true to end the lease now (the board is "
                                             "powered off and goes to the next in the queue).")
    publicKey: Annotated[str, Field(max_length=4096, pattern=r"^-----BEGIN PUBLIC KEY-----")] | None = Field(
        None, description=("The person's public key (PEM, EC P-256/P-384 or RSA >= 2048): at the "
                           "grant the operator issues a certificate for `user`, valid until the "
                           "lease expires, into status.access; it is the only way to the "
                           "coordinator (`benchfarm lease --shell` makes the key and uses it)."),
        json_schema_extra=immutable("publicKey is immutable"))


#: a host name or address as an ssh_config line takes it (no space, no quote)
SshHostName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._:%\[\]-]+$")]


class LeaseSshHost(Model):
    """One exporter host as a lease's holder reaches its SSH."""

    name: SshHostName = Field(description="The exporter host as labgrid names it (a resource's "
                                          "extra.proxy): the ssh_config's Host.")
    hostName: SshHostName = Field(description="The address its SSH is reached at.")
    port: int = Field(22, ge=1, le=65535, description="Its SSH port.")
    user: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z_][a-z0-9_-]*$")] = Field(
        "root", description="The user to log in as (the certificate decides what it may do).")


class LeaseSshAccess(Model):
    """The exporter hosts' SSH for a lease: an OpenSSH user certificate for the lease's public
    key that lets it forward to its own place's console and power only, until the lease ends."""

    certificate: Annotated[str, Field(max_length=8192)] = Field(description=(
        "The OpenSSH user certificate (one `...-cert-v01@openssh.com` line), signed by the lab's "
        "labgrid issuer as the SSH user CA: principal `place:<place>`, key id `<namespace>/<name> "
        "<uid>`, valid until the lease expires, port forwarding only."))
    principal: Annotated[str, Field(max_length=256)] = Field(description=(
        "The certificate's principal (`place:<place>`)."))
    hosts: list[LeaseSshHost] = Field(default_factory=list, max_length=64, description=(
        "The exporter hosts and where their SSH is."))
    knownHosts: Annotated[str, Field(max_length=65536)] = Field("", description=(
        "known_hosts lines pinning those hosts' keys."))


class LeaseAccess(Model):
    """`status.access` of a granted BoardLease whose spec.publicKey the operator signed."""

    coordinator: str = Field(description="The labgrid coordinator's address (mutual TLS).")
    certificate: str = Field(description=(
        "An X.509 client certificate for the lease's user (labgrid role person), expiring with "
        "the lease."))
    ca: str = Field("", description="The CA that vouches for the coordinator (PEM).")
    expiresAt: str = Field(description="When the certificates expire (the lease's end).")
    ssh: LeaseSshAccess | None = Field(None, description=(
        "The exporter hosts' SSH, through which labgrid reaches the place's console and power."))


class BoardLeaseStatus(Status):
    """`status` of a BoardLease: the operator's (its place in the queue, the grant it signed,
    the end) and its end session's (`leaseEnd`). Read as `BoardLeaseStatus.of`; a field with a
    description is in the CRD's status schema (`api.crdgen.status_schema`)."""

    phase: str | None = Field(None, description="Pending, Granted, Releasing, Ended or Refused.")
    conditions: list[Condition] = Field(default_factory=list)
    place: str | None = Field(None, description="The board (labgrid place) granted to the lease.")
    grantedAt: str | None = None
    expiresAt: str | None = Field(None, json_schema_extra={"format": "date-time"}, description=(
        "When the lease ends and its board is powered off and released; raise spec.duration to "
        "extend."))
    grantSignature: str | None = None       # the operator's over `core.policy.trust.LEASE_SIGNED`
    queuePosition: int | None = Field(None, description=(
        "While pending: the lease's place in the lab's queue."))
    estimatedStart: str | None = Field(None, json_schema_extra={"format": "date-time"}, description=(
        "While pending: when a fitting board should be free (a lease's expiry, a run's timeout)."))
    access: LeaseAccess | None = Field(None, description=(
        "While granted, where spec.publicKey was given: the lease's certificates (labgrid's "
        "coordinator, the exporter hosts' SSH) and where they lead."))
    warnedFor: str | None = None            # the expiry its LeaseEnding warning was given for
    endReason: str | None = None            # why it is Releasing (`LeaseReason`, `Refusal`)
    endedAt: str | None = None
    refusedGeneration: int | None = None    # a spec.duration over the namespace's maximum
    leaseEnd: LeaseEnd | None = None        # its end session's report: the board is off


BOARDLEASE_SPEC_RULES = [
    {"rule": "has(self.selector.deviceType) || has(self.selector.board)",
     "message": "selector needs deviceType or board"},
    {"rule": "self.duration.matches('[1-9]')",
     "message": "duration must be longer than zero (e.g. 90m or 2h)"},
    {"rule": "self.release || !oldSelf.release",
     "message": "a released lease stays released (create a new one)"},
]
