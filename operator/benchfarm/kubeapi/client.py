"""Talking to the Kubernetes API without kopf: status patches, events, Board objects, Leases.

Both programs use it: the operator (next to kopf, which owns its watch streams) and the session
runner, which checkpoints its run's status and renews its Lease. Every call waits out an API
server outage with backoff, bounded by a budget (the run's remaining time, for a runner), and
then raises `Outage(party=Party.api)`: an outage is never blamed on a board. What a tenant reads
of what it writes (events; the messages and progress of a status) passes through
`core.policy.redact` first: no address, host path or credential of the lab's.
"""

from __future__ import annotations

import base64
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.outcomes import LabFault
from benchfarm.core.policy.redact import Redactor
from benchfarm.errors import BenchfarmError, Outage, Party
from benchfarm.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
# connections kept to the API server (the client's default: 5 a CPU). More of the operator's
# threads than that call it at once (kopf's handlers, launches, round writes, board status), and
# a call beyond the pool discards its connection: a new connection and TLS handshake for a later
# call (benchmarks/RESULTS.md, "The GIL and the scheduling round")
POOL_SIZE = 32


# The Kubernetes client's methods this package calls, by API class. The client builds each
# method's argument validator (pydantic, `defer_build`) on its first call: a few tens of ms of
# CPU per method, paid again by every forked session. `prebuild` builds them once in the session
# server; a unit test keeps this list equal to the calls made here.
CALLS: dict[str, tuple[str, ...]] = {
    "CustomObjectsApi": (
        "create_cluster_custom_object", "create_namespaced_custom_object",
        "delete_namespaced_custom_object", "get_cluster_custom_object",
        "get_namespaced_custom_object", "list_cluster_custom_object",
        "list_namespaced_custom_object", "patch_cluster_custom_object_status",
        "patch_namespaced_custom_object_status"),
    "CoreV1Api": (
        "create_namespaced_config_map", "create_namespaced_event", "list_namespace",
        "patch_namespaced_config_map", "read_namespaced_config_map", "read_namespaced_secret"),
    "CoordinationV1Api": (
        "create_namespaced_lease", "delete_namespaced_lease", "list_lease_for_all_namespaces",
        "read_namespaced_lease", "replace_namespaced_lease"),
}


def prebuild() -> None:
    """Build the argument validators of every method in CALLS now, without a request: each is
    called with an argument no method has, which its validator refuses (in a process about to
    fork, so that its children do not build them each)."""
    from pydantic import ValidationError
    for cls, methods in CALLS.items():
        api = getattr(client, cls)
        for method in methods:
            try:
                getattr(api, method)(None, benchfarm_prebuild=True)
            except ValidationError:
                pass


class PreconditionFailed(Exception):
    """A guarded status write lost a race (the object changed since it was read)."""


# What a call through `Kube` (or an operator's write built on one) may raise that is no bug:
# benchfarm's own errors (the API's `Outage` past its budget, a run deleted meanwhile), the API
# server's refusal (4xx: gone, a conflict, an invalid object) and a guarded write's lost race.
# The operator catches these by name; anything else reaches a thread's last handler as a bug.
API_FAILURES: tuple[type[Exception], ...] = (BenchfarmError, ApiException, PreconditionFailed)
# a watch's stream is read without `Kube._call`: the transport's own errors reach its reader too
WATCH_FAILURES: tuple[type[Exception], ...] = (*API_FAILURES, urllib3.exceptions.HTTPError,
                                               OSError)


def lab_redactor(s: Settings, *, extra_endpoints: Iterable[str] = (),
                 extra_directories: Iterable[str] = ()) -> Redactor:
    """What tenants must not read, from the lab's settings (`core.policy.redact`): the store's
    and the signing key, the database's password; the lab's services; its directories and
    files. The two credentials no setting names (the store's and the database's client
    libraries read them) come from the same environment."""
    paths = (s.state, s.spool, s.software_cache, s.session_pids)
    return Redactor.of(
        secrets=[s.s3_secret_key, s.signing_key, s.environ.get("AWS_SECRET_ACCESS_KEY", ""),
                 s.environ.get("PGPASSWORD", "")],
        endpoints=[s.s3_endpoint, s.coordinator, s.web_url, s.database_url, s.liveness,
                   s.lease_coordinator, s.kubernetes_service_host, *extra_endpoints],
        directories=[*(str(p) for p in paths if p is not None), s.log_dir,
                     s.environ.get("VIRTUAL_ENV", ""), *extra_directories],
        files=[s.kubeconfig, s.ssh_config, str(s.device_types)])


class Kube:
    def __init__(self, settings: Settings, *, outage_budget: float = 600.0) -> None:
        s = settings
        try:
            config.load_incluster_config()
        except config.ConfigException:
            # KUBECONFIG as it is now: the client library reads it once, when it is imported
            config.load_kube_config(config_file=s.kubeconfig or None)
        configuration = client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = POOL_SIZE
        self.api = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.outage_budget = outage_budget
        # what tenants read (events, conditions, progress) names no lab address, path or key
        self.redact = lab_redactor(s, extra_endpoints=[urlsplit(configuration.host or "").netloc],
                                   extra_directories=[sys.prefix])

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        delay, deadline = 0.5, time.monotonic() + self.outage_budget
        while True:
            try:
                return fn()
            except ApiException as exc:
                if exc.status and exc.status < 500 and exc.status != 429:
                    raise
                err: Exception = exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                err = exc
            if time.monotonic() > deadline:
                raise Outage(f"Kubernetes API unavailable for {self.outage_budget:.0f} s "
                             f"({what}): {err}", party=Party.api,
                             reason=LabFault.api_unreachable) from err
            log.warning("Kubernetes API unavailable (%s): %s; retrying", what, err)
            time.sleep(delay)
            delay = min(delay * 2, 10)

    def _body(self, what: str, fn: Callable[[], object]) -> dict[str, Any]:
        """`_call` of a custom-objects method: the client types its answers `object`; the API
        server answers with the object as JSON."""
        return cast(dict[str, Any], self._call(what, fn))

    def _items(self, what: str, fn: Callable[[], object]) -> list[dict[str, Any]]:
        """`_call` of a custom-objects list: the list's items."""
        return cast(list[dict[str, Any]], self._body(what, fn)["items"])

    # -- BenchmarkRuns ------------------------------------------------------------------------
    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._body("get run", lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "benchmarkruns", name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_runs(self) -> list[dict[str, Any]]:
        return self._items("list runs", lambda: self.custom.list_cluster_custom_object(
            GROUP, VERSION, "benchmarkruns"))

    def patch_run_status(self, namespace: str, name: str,
                         status: dict[str, Any]) -> dict[str, Any] | None:
        """Merge-patch status: the run as the API server wrote it; None when it no longer
        exists."""
        status = self.redact.status(status)
        try:
            return self._body("patch run status",
                              lambda: self.custom.patch_namespaced_custom_object_status(
                                  GROUP, VERSION, namespace, "benchmarkruns", name,
                                  {"status": status}))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def guarded_status_write(self, namespace: str, name: str, expect: dict[str, Any],
                             status: dict[str, Any],
                             plural: str = "benchmarkruns") -> dict[str, Any] | None:
        """Set status fields only if the run's status still has the `expect` values, atomically
        (a JSON patch whose `test` operations the API server checks): the object as written;
        None when it is gone; PreconditionFailed when it changed (e.g. cancelled while being
        scheduled)."""
        ops: list[dict[str, Any]] = [{"op": "test", "path": f"/status/{k}", "value": v}
                                     for k, v in expect.items()]
        ops += [{"op": "add", "path": f"/status/{k}", "value": v}
                for k, v in self.redact.status(status).items()]
        try:
            return self._body("guarded status write",
                              lambda: self.custom.patch_namespaced_custom_object_status(
                                  GROUP, VERSION, namespace, plural, name, ops,
                                  _content_type="application/json-patch+json"))
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status in (409, 422):
                raise PreconditionFailed(str(exc.reason)) from exc
            raise

    def list_runs_paged(self, limit: int = 500) -> Iterator[dict[str, Any]]:
        """Every BenchmarkRun, a page at a time (bounded memory per call)."""
        token = None
        while True:
            # B023: _call runs the lambda at once, within this iteration
            page = self._body("list runs", lambda: self.custom.list_cluster_custom_object(
                GROUP, VERSION, "benchmarkruns", limit=limit, _continue=token))  # noqa: B023
            yield from page["items"]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def delete_run(self, namespace: str, name: str) -> None:
        try:
            self._call("delete run", lambda: self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "benchmarkruns", name))
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- benchfarm's namespaced objects by plural (campaigns, their runs, BoardLeases) ----------
    def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._body(f"get {plural}", lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_custom_all(self, plural: str) -> list[dict[str, Any]]:
        """Every object of the kind, in every namespace."""
        return self._items(f"list {plural}", lambda: self.custom.list_cluster_custom_object(
            GROUP, VERSION, plural))

    def list_custom(self, plural: str, namespace: str, labels: str = "") -> list[dict[str, Any]]:
        return self._items(f"list {plural}", lambda: self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, label_selector=labels))

    def create_custom(self, plural: str, namespace: str, body: dict[str, Any]) -> bool:
        """False when one of that name exists already."""
        try:
            self._call(f"create {plural}", lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, body))
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def patch_custom(self, plural: str, namespace: str, name: str, patch: dict[str, Any],
                     *, status: bool = False) -> bool:
        """Merge-patch the object (or its status); False when it no longer exists."""
        fn = (self.custom.patch_namespaced_custom_object_status if status
              else self.custom.patch_namespaced_custom_object)
        if status and isinstance(patch.get("status"), dict):
            patch = {**patch, "status": self.redact.status(patch["status"])}
        try:
            self._call(f"patch {plural}", lambda: fn(GROUP, VERSION, namespace, plural, name, patch))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    # -- cluster-scoped objects ---------------------------------------------------------------
    def list_cluster(self, plural: str) -> list[dict[str, Any]]:
        return self._items(f"list {plural}", lambda: self.custom.list_cluster_custom_object(
            GROUP, VERSION, plural))

    def get_cluster(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            return self._body(f"get {plural}", lambda: self.custom.get_cluster_custom_object(
                GROUP, VERSION, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_board(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Board",
                "metadata": {"name": name, "labels": labels}, "spec": {"maintenance": False}}
        try:
            return self._body("create board", lambda: self.custom.create_cluster_custom_object(
                GROUP, VERSION, "boards", body))
        except ApiException as exc:
            if exc.status == 409:
                return self.get_cluster("boards", name) or body
            raise

    def patch_board_status(self, name: str, status: dict[str, Any]) -> None:
        try:
            status = self.redact.status(status)
            self._call("patch board status", lambda: self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "boards", name, {"status": status}))
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- config maps (small operator state that must survive a restart) ------------------------
    def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            cm = self._call("get configmap", lambda: self.core.read_namespaced_config_map(
                name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(cm.data or {})

    def put_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        body = client.V1ConfigMap(
            api_version="v1", kind="ConfigMap", data=data, metadata=client.V1ObjectMeta(
                name=name, namespace=namespace,
                labels={"app.kubernetes.io/managed-by": "benchfarm"}))
        try:
            self._call("patch configmap", lambda: self.core.patch_namespaced_config_map(
                name, namespace, {"data": data}))
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._call("create configmap", lambda: self.core.create_namespaced_config_map(
                namespace, body))

    # -- the Secrets the operator reads by name (notifications' keys, store credentials) -----
    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """A Secret's data, decoded; None if there is none. PermissionError where RBAC does not
        let the operator read it (the chart grants `get` on one name only)."""
        try:
            secret = self._call("read secret", lambda: self.core.read_namespaced_secret(
                name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                raise PermissionError(f"may not read Secret {namespace}/{name}") from exc
            raise
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    # -- built-in namespaced objects (the job launcher's Jobs, ServiceAccounts, Roles) ---------
    def _typed(self, kind: str) -> tuple[Any, str]:
        apis = {"Job": (client.BatchV1Api, "job"), "ServiceAccount": (client.CoreV1Api,
                "service_account"), "Role": (client.RbacAuthorizationV1Api, "role"),
                "RoleBinding": (client.RbacAuthorizationV1Api, "role_binding"),
                "ConfigMap": (client.CoreV1Api, "config_map"), "Pod": (client.CoreV1Api, "pod"),
                "Lease": (client.CoordinationV1Api, "lease"),
                "Secret": (client.CoreV1Api, "secret")}
        api, noun = apis[kind]
        return api(self.api), noun

    def create_namespaced(self, kind: str, namespace: str, body: dict[str, Any]) -> bool:
        """Create a Job, ServiceAccount, Role, RoleBinding, ConfigMap, Lease or Secret (a
        namespace's store credential); False when it already exists."""
        api, noun = self._typed(kind)
        create = getattr(api, f"create_namespaced_{noun}")
        try:
            self._call(f"create {kind}", lambda: create(namespace, body))
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def patch_namespaced(self, kind: str, namespace: str, name: str,
                         patch: dict[str, Any]) -> None:
        api, noun = self._typed(kind)
        patch_fn = getattr(api, f"patch_namespaced_{noun}")
        self._call(f"patch {kind}", lambda: patch_fn(name, namespace, patch))

    def replace_namespaced(self, kind: str, namespace: str, name: str,
                           body: dict[str, Any]) -> None:
        """Replace the object (with body's metadata.resourceVersion: a write that lost a race
        fails with 409 instead of undoing someone else's)."""
        api, noun = self._typed(kind)
        replace = getattr(api, f"replace_namespaced_{noun}")
        self._call(f"replace {kind}", lambda: replace(name, namespace, body))

    def list_namespaced(self, kind: str, namespace: str, labels: str) -> list[dict[str, Any]]:
        """The objects of a kind with these labels (a label selector), as plain JSON."""
        api, noun = self._typed(kind)
        list_fn = getattr(api, f"list_namespaced_{noun}")
        found = self._call(f"list {kind}", lambda: list_fn(namespace, label_selector=labels))
        return [self.api.sanitize_for_serialization(o) for o in found.items]

    def delete_namespaced(self, kind: str, namespace: str, name: str) -> None:
        """Delete it and what it owns (in the background); one already gone is no error."""
        api, noun = self._typed(kind)
        delete = getattr(api, f"delete_namespaced_{noun}")
        try:
            self._call(f"delete {kind}", lambda: delete(
                name, namespace, body=client.V1DeleteOptions(propagation_policy="Background")))
        except ApiException as exc:
            if exc.status != 404:
                raise

    def namespace_exists(self, name: str) -> bool:
        """Whether the namespace is there (and not being deleted): a list by name, what the
        operator's `list namespaces` (kopf's) allows."""
        found = self._call("list namespaces", lambda: self.core.list_namespace(
            field_selector=f"metadata.name={name}"))
        return any(ns.metadata is not None and not ns.metadata.deletion_timestamp
                   for ns in found.items)

    def read_namespaced(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as plain JSON (camelCase keys, as in a manifest); None if there is none."""
        api, noun = self._typed(kind)
        read = getattr(api, f"read_namespaced_{noun}")
        try:
            obj = self._call(f"read {kind}", lambda: read(name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return cast(dict[str, Any], self.api.sanitize_for_serialization(obj))

    # -- events -------------------------------------------------------------------------------
    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta.get('name', 'obj')}.",
                                         namespace=namespace),
            involved_object=client.V1ObjectReference(
                api_version=obj.get("apiVersion", f"{GROUP}/{VERSION}"), kind=obj.get("kind"),
                name=meta.get("name"), namespace=meta.get("namespace"), uid=meta.get("uid")),
            reason=reason, message=self.redact(message)[:1024], type=type_, first_timestamp=now,
            last_timestamp=now, count=1,
            source=client.V1EventSource(component="benchfarm-operator"))
        try:
            self._call("post event", lambda: self.core.create_namespaced_event(namespace, body))
        except API_FAILURES:  # an event is a courtesy; never fail a run for it
            log.debug("event not posted", exc_info=True)
