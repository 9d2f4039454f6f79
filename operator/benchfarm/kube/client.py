"""Talking to the Kubernetes API outside kopf's handlers: status patches, events, Board objects.

kopf owns the watch streams; board sessions run in threads and checkpoint their runs directly.
Every call waits out an API server outage (retries with backoff) instead of failing the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from ..api.models import GROUP, VERSION

log = logging.getLogger(__name__)
T = TypeVar("T")


class Kube:
    def __init__(self, *, outage_budget: float = 600.0) -> None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self.api = client.ApiClient()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.outage_budget = outage_budget

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
                raise err
            log.warning("Kubernetes API unavailable (%s): %s; retrying", what, err)
            time.sleep(delay)
            delay = min(delay * 2, 10)

    # -- BenchmarkRuns ------------------------------------------------------------------------
    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("get run", lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "benchmarkruns", name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_runs(self) -> list[dict[str, Any]]:
        return self._call("list runs", lambda: self.custom.list_cluster_custom_object(
            GROUP, VERSION, "benchmarkruns"))["items"]

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        """Merge-patch status; False when the run no longer exists."""
        try:
            self._call("patch run status", lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "benchmarkruns", name, {"status": status}))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def delete_run(self, namespace: str, name: str) -> None:
        try:
            self._call("delete run", lambda: self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "benchmarkruns", name))
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- cluster-scoped objects ---------------------------------------------------------------
    def list_cluster(self, plural: str) -> list[dict[str, Any]]:
        return self._call(f"list {plural}", lambda: self.custom.list_cluster_custom_object(
            GROUP, VERSION, plural))["items"]

    def get_cluster(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call(f"get {plural}", lambda: self.custom.get_cluster_custom_object(
                GROUP, VERSION, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_board(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Board",
                "metadata": {"name": name, "labels": labels}, "spec": {"maintenance": False}}
        try:
            return self._call("create board", lambda: self.custom.create_cluster_custom_object(
                GROUP, VERSION, "boards", body))
        except ApiException as exc:
            if exc.status == 409:
                return self.get_cluster("boards", name) or body
            raise

    def patch_board_status(self, name: str, status: dict[str, Any]) -> None:
        try:
            self._call("patch board status", lambda: self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, "boards", name, {"status": status}))
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- events -------------------------------------------------------------------------------
    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = datetime.now(timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta.get('name', 'obj')}.",
                                         namespace=namespace),
            involved_object=client.V1ObjectReference(
                api_version=obj.get("apiVersion", f"{GROUP}/{VERSION}"), kind=obj.get("kind"),
                name=meta.get("name"), namespace=meta.get("namespace"), uid=meta.get("uid")),
            reason=reason, message=message[:1024], type=type_, first_timestamp=now,
            last_timestamp=now, count=1,
            source=client.V1EventSource(component="benchfarm-operator"))
        try:
            self._call("post event", lambda: self.core.create_namespaced_event(namespace, body))
        except Exception:  # an event is a courtesy; never fail a run for it
            log.debug("event not posted", exc_info=True)
