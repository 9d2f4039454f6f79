"""Proof of life through `coordination.k8s.io/v1` Leases: who leads, which session still runs.

Two uses, one mechanism. The operator replicas compete for one Lease; the holder leads, the others
stand by and take over once it stops renewing. Every session runner holds a Lease of its run and
renews it every few seconds; the operator judges a runner dead when its Lease stops moving.

Writes use the Lease's resourceVersion, so two contenders never both win. Whether a Lease is alive
is judged the way Kubernetes' own leader election does it: by watching `renewTime` change on this
observer's clock, not by comparing clocks across machines, and an observer that could not see the
API (an outage) starts its observation over instead of declaring everyone dead.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from benchfarm.kubeapi.client import API_FAILURES, Kube

log = logging.getLogger(__name__)


# The chart's admission policy (helm/benchfarm/templates/admission.yaml) lets benchfarm's accounts
# write only the leader Lease and Leases named by session_lease_name that carry this label = "true"
# (and, for a session's own account, benchfarm.io/run-uid = its run's uid): keep them in step.
SESSION_LEASE_LABEL = "benchfarm.io/session"


HEALTH_LEASE_LABEL = "benchfarm.io/health-check"   # "true" on a health check's session Lease


def session_lease_name(run: str) -> str:
    """The Lease a run's session runner holds, in the run's namespace."""
    return f"benchfarm-run-{run}"


def health_lease_name(board: str) -> str:
    """The Lease a board's health-check session holds, in the operator's namespace (a Board is
    cluster-scoped); labelled SESSION_LEASE_LABEL and HEALTH_LEASE_LABEL "true"."""
    return f"benchfarm-health-{board}"


def session_lease_labels(uid: str) -> dict[str, str]:
    """What the chart's policy asks of a session Lease (and what the operator looks for)."""
    return {SESSION_LEASE_LABEL: "true", "benchfarm.io/run-uid": uid,
            "app.kubernetes.io/managed-by": "benchfarm"}


def session_lease_owner(api_version: str, run: str, uid: str) -> dict[str, Any]:
    """A run's Lease goes with the run."""
    return {"apiVersion": api_version, "kind": "BenchmarkRun", "name": run, "uid": uid,
            "controller": True, "blockOwnerDeletion": False}


def unheld_session_lease(namespace: str, run: str, uid: str, api_version: str) -> dict[str, Any]:
    """A run's Lease held by nobody: made by the operator for a session whose account may not
    create Leases (a warm slot's, `operator.launch.warm`); the session takes it as it takes an expired one."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": session_lease_name(run), "namespace": namespace,
                         "labels": session_lease_labels(uid),
                         "ownerReferences": [session_lease_owner(api_version, run, uid)]},
            "spec": {}}


def _now() -> datetime:
    return datetime.now(UTC)


OPERATOR_LEASE = "benchfarm-operator"    # the leader's, in the operator's namespace (admission.yaml)


class LeaseLost(Exception):
    """Someone else holds the Lease now: stop acting on what it guards."""


@dataclass
class LeaseHolder:
    """One contender for one Lease."""

    kube: Kube
    namespace: str
    name: str
    identity: str
    duration: int = 15
    labels: dict[str, str] | None = None
    owner: dict[str, Any] | None = None     # an ownerReference (a run's Lease goes with the run)

    def __post_init__(self) -> None:
        self.api = client.CoordinationV1Api(self.kube.api)
        self._version: str | None = None
        self._tried = False           # try_acquire has run before
        self.last_renewed: float | None = None   # monotonic, of the last successful renewal
        self.released = False                    # given up: renewals stop

    def _body(self, transitions: int = 0) -> client.V1Lease:
        meta = client.V1ObjectMeta(name=self.name, namespace=self.namespace, labels=self.labels,
                                   owner_references=[self.owner] if self.owner else None,
                                   resource_version=self._version)
        now = _now()
        return client.V1Lease(metadata=meta, spec=client.V1LeaseSpec(
            holder_identity=self.identity, lease_duration_seconds=self.duration,
            acquire_time=now, renew_time=now, lease_transitions=transitions))

    def _read(self) -> client.V1Lease | None:
        try:
            return self.kube._call("read lease", lambda: self.api.read_namespaced_lease(
                self.name, self.namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def try_acquire(self) -> bool:
        """Take the Lease if it is free, expired or already ours; False if someone else's is live.
        Expiry here is by the wall clock (a fresh contender has no observation history). A
        first session of a run finds no Lease: the first try creates one straight away (one round
        trip, not a read first); an existing one is read (and every later try reads first)."""
        first, self._tried = not self._tried, True
        if first:
            try:
                created = self.kube._call("create lease", lambda: self.api.create_namespaced_lease(
                    self.namespace, self._body()))
                self._version = _meta(created).resource_version
                self.last_renewed = time.monotonic()
                return True
            except ApiException as exc:
                # 409: it exists; whose it is is read below. 403: this account may not create
                # Leases (a warm slot's: the operator made the Lease, `operator.launch.warm`)
                if exc.status not in (403, 409):
                    raise
        lease = self._read()
        try:
            if lease is None:
                self._version = None
                created = self.kube._call("create lease", lambda: self.api.create_namespaced_lease(
                    self.namespace, self._body()))
                self._version = _meta(created).resource_version
            else:
                spec = _spec(lease)
                holder = spec.holder_identity
                renewed = spec.renew_time or spec.acquire_time
                expired = renewed is None or \
                    (_now() - renewed).total_seconds() > (spec.lease_duration_seconds or 0)
                if holder and holder != self.identity and not expired:
                    return False
                self._version = _meta(lease).resource_version
                transitions = (spec.lease_transitions or 0) + (holder != self.identity)
                body = self._body(transitions)
                if holder == self.identity and spec.acquire_time:
                    _spec(body).acquire_time = spec.acquire_time
                replaced = self.kube._call("take lease", lambda: self.api.replace_namespaced_lease(
                    self.name, self.namespace, body))
                self._version = _meta(replaced).resource_version
        except ApiException as exc:
            if exc.status == 409:   # another contender won the race
                return False
            raise
        self.last_renewed = time.monotonic()
        return True

    def renew(self) -> None:
        """Move renewTime; LeaseLost if the Lease is someone else's now (or gone)."""
        lease = self._read()
        if lease is None or _spec(lease).holder_identity != self.identity:
            raise LeaseLost(f"lease {self.namespace}/{self.name} is held by "
                            f"{_spec(lease).holder_identity if lease else 'nobody (deleted)'}")
        lease.spec = _spec(lease)
        lease.spec.renew_time = _now()
        try:
            updated = self.kube._call("renew lease", lambda: self.api.replace_namespaced_lease(
                self.name, self.namespace, lease))
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseLost(f"lease {self.namespace}/{self.name} changed hands") from exc
            raise
        self._version = _meta(updated).resource_version
        self.last_renewed = time.monotonic()

    def valid(self) -> bool:
        """Whether this holder may still act: renewed within the Lease's duration."""
        return self.last_renewed is not None and \
            time.monotonic() - self.last_renewed < self.duration

    def release(self) -> None:
        """Give the Lease up (delete it) if it is still ours; best effort. A renewal racing the
        delete (its precondition) is retried, so a clean stop hands over at once."""
        self.released = True
        for _ in range(3):
            try:
                lease = self._read()
                if lease is None or _spec(lease).holder_identity != self.identity:
                    return
                # B023: _call runs the lambda at once, within this iteration
                self.kube._call("release lease", lambda: self.api.delete_namespaced_lease(
                    self.name, self.namespace, body=client.V1DeleteOptions(
                        preconditions=client.V1Preconditions(
                            resource_version=_meta(lease).resource_version))))  # noqa: B023
                return
            except ApiException as exc:
                if exc.status != 409:
                    break
            except API_FAILURES:  # an expired Lease says the same thing a little later
                break
        log.debug("lease release failed", exc_info=True)


def _meta(lease: client.V1Lease) -> client.V1ObjectMeta:
    """The Lease's metadata (the client's models type every field optional; the API server
    always answers with it)."""
    return lease.metadata or client.V1ObjectMeta()


def _spec(lease: client.V1Lease) -> client.V1LeaseSpec:
    """The Lease's spec (empty when the API server sent none: nobody holds it)."""
    return lease.spec or client.V1LeaseSpec()


@dataclass
class Seen:
    renew_time: str
    holder: str
    duration: int
    since: float            # monotonic: when this observer first saw this renewTime


class LeaseObserver:
    """Judges which Leases are alive from repeated listings (see the module docstring)."""

    def __init__(self, grace: float = 5.0) -> None:
        self.grace = grace
        self.seen: dict[str, Seen] = {}

    def observe(self, leases: list[client.V1Lease], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        current = {}
        for lease in leases:
            key = f"{_meta(lease).namespace}/{_meta(lease).name}"
            spec = _spec(lease)
            renewed = str(spec.renew_time or spec.acquire_time)
            old = self.seen.get(key)
            since = old.since if old is not None and old.renew_time == renewed else now
            current[key] = Seen(renewed, spec.holder_identity or "", spec.lease_duration_seconds
                                or 15, since)
        self.seen = current

    def forget(self) -> None:
        """After an outage of our own: what we saw before says nothing about who is alive."""
        self.seen = {}

    def alive(self, key: str, now: float | None = None) -> bool:
        """A Lease is alive until its renewTime has stood still, on our clock, for its duration
        plus a grace period. A Lease we do not see is not alive."""
        now = time.monotonic() if now is None else now
        s = self.seen.get(key)
        return s is not None and bool(s.holder) and now - s.since <= s.duration + self.grace


def list_leases(kube: Kube, label_selector: str) -> list[client.V1Lease]:
    api = client.CoordinationV1Api(kube.api)
    return kube._call("list leases", lambda: api.list_lease_for_all_namespaces(
        label_selector=label_selector).items)
