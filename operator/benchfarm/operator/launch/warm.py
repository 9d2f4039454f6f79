"""Warm session pods: Jobs started before any run, each of which takes one run when it is launched.

A session Job starts cold: the pod is scheduled, its container started, and Python imports
labgrid, grpc, kubernetes, minio, pydantic and scipy before the board is touched (3.4 s from apply
to power-on on the one-node cluster). So the job launcher keeps `BENCHFARM_WARM_SESSIONS` pods
waiting (`benchfarm session warm`, `session.warm`): each has imported everything and watches for a
ConfigMap of its own slot's name. A launch takes the oldest running one: the run's Role in the
run's namespace is bound to the slot's ServiceAccount instead of an account of the run's own, the
run's Lease is made by the operator (a slot's account may not create Leases: the chart's policy
ties Lease creation to a run's own account), the slot's Job is labelled with the run and given
the run's deadline, and the grant (`api.grants`), signed with the key only the operator and its
sessions hold, is written to the slot's ConfigMap. The pod runs that run and exits.

One pod, one run: a slot never serves a second run, so a run is as isolated as in a cold Job,
and a slot whose run is over has no rights left to any other (its binding names one run's Role).

A slot is a Job `benchfarm-warm-<id>` in the operator's namespace, its ServiceAccount, a Role that
lets it read only its own ConfigMap, and that Role's binding, all owned by the Job; the Job is
owned by the chart's session template ConfigMap, so `helm uninstall` takes the slots with it. A
slot that gets no run within `BENCHFARM_WARM_IDLE_SECONDS` exits and is replaced. After an operator
restart (or a new leader) the pool is read back from the API: Jobs labelled benchfarm.io/warm-slot,
still active, not labelled as granted; those made from another pod template (a `helm upgrade`
changed the image or the environment) are deleted, not given runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from benchfarm.api.grants import SessionGrant
from benchfarm.core.policy.trust import sign_grant
from benchfarm.operator.launch.interface import Launch

log = logging.getLogger(__name__)

WARM_LABEL = "benchfarm.io/warm-slot"        # value: the slot's name
GRANTED_LABEL = "benchfarm.io/granted"       # on a slot's Job once it has been given a run
TEMPLATE_ANNOTATION = "benchfarm.io/template"  # which pod template a slot was made from
RESYNC_S = 30.0                              # how often the pool is read back from the API
IDLE_S = 3600                                # a slot without a run this long exits


def slot_name() -> str:
    return f"benchfarm-warm-{secrets.token_hex(4)}"


def slot_role(slot: str, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A slot may read its own ConfigMap, nothing else, until a run's Role is bound to it."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": slot, "namespace": namespace, "labels": slot_labels(slot),
                         "ownerReferences": [owner]},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [slot],
                       "verbs": ["get", "list", "watch"]}]}


def slot_binding(slot: str, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": slot, "namespace": namespace, "labels": slot_labels(slot),
                         "ownerReferences": [owner]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": slot},
            "subjects": [{"kind": "ServiceAccount", "name": slot, "namespace": namespace}]}


def slot_labels(slot: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "benchfarm-session",
            "app.kubernetes.io/managed-by": "benchfarm", WARM_LABEL: slot}


def job_owner(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}


def _created(obj: dict[str, Any]) -> float:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return time.time()
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


class WarmPool:
    """The slots of one operator's namespace; used only by the leader (from its loop: `top_up`,
    and from a launch: `take`)."""

    def __init__(self, kube: Any, namespace: str, size: int, key: bytes,
                 job_manifest: Callable[[str], dict[str, Any]], owner: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.namespace = namespace
        self.size = size
        self.key = key
        self.job_manifest = job_manifest      # the warm Job of a slot (operator.launch.jobs)
        self.owner = owner                    # the ConfigMap whose deletion takes the slots
        self.clock = clock
        # slots made from another pod template (before a helm upgrade) are not given runs
        self.template = hashlib.sha256(json.dumps(job_manifest("slot")["spec"],
                                                  sort_keys=True).encode()).hexdigest()[:16]
        self.slots: dict[str, float] = {}     # waiting slot -> wall time its Job was created
        self.synced = -math.inf

    # -- keeping it full ----------------------------------------------------------------------
    def top_up(self) -> None:
        if self.size <= 0:
            return
        if self.clock() - self.synced >= RESYNC_S:
            self._sync()
        while len(self.slots) < self.size:
            self._start()

    def _sync(self) -> None:
        jobs = self.kube.list_namespaced("Job", self.namespace, f"{WARM_LABEL},!{GRANTED_LABEL}")
        live = [j for j in jobs if not _finished(j) and not j["metadata"].get("deletionTimestamp")]
        for job in live:
            if (job["metadata"].get("annotations") or {}).get(TEMPLATE_ANNOTATION) != self.template:
                log.info("warm session slot %s/%s was made from another pod template; deleting it",
                         self.namespace, job["metadata"]["name"])
                self.kube.delete_namespaced("Job", self.namespace, job["metadata"]["name"])
        self.slots = {j["metadata"]["name"]: _created(j) for j in live
                      if (j["metadata"].get("annotations") or {}).get(TEMPLATE_ANNOTATION)
                      == self.template}
        self.synced = self.clock()

    def _start(self) -> None:
        slot = slot_name()
        ns = self.namespace
        # the account first: a pod whose account does not exist yet is not created at all
        self.kube.create_namespaced("ServiceAccount", ns, {
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": slot, "namespace": ns, "labels": slot_labels(slot)}})
        manifest = self.job_manifest(slot)
        meta = manifest["metadata"]
        meta.setdefault("annotations", {})[TEMPLATE_ANNOTATION] = self.template
        if self.owner:           # helm uninstall deletes that ConfigMap, and the slots with it
            cm = self.kube.read_namespaced("ConfigMap", ns, self.owner)
            if cm is not None:
                meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                            "name": self.owner, "uid": cm["metadata"]["uid"]}]
        self.kube.create_namespaced("Job", ns, manifest)
        job = self.kube.read_namespaced("Job", ns, slot)
        if job is None:
            raise RuntimeError(f"the warm session Job {ns}/{slot} vanished after its creation")
        owner = job_owner(job)
        # while the pod imports (seconds), its Role and binding appear; its watch retries on 403
        self.kube.create_namespaced("Role", ns, slot_role(slot, ns, owner))
        self.kube.create_namespaced("RoleBinding", ns, slot_binding(slot, ns, owner))
        self.kube.patch_namespaced("ServiceAccount", ns, slot,
                                   {"metadata": {"ownerReferences": [owner]}})
        self.slots[slot] = _created(job)
        log.info("warm session slot %s/%s started (%d of %d)", ns, slot, len(self.slots),
                 self.size)

    # -- giving a slot a run ------------------------------------------------------------------
    def take(self) -> tuple[str, float] | None:
        """A waiting slot whose pod runs, now no longer waiting, with the wall time its Job was
        created; None when there is none. Ready pods (done importing) first, then the oldest."""
        if not self.slots:
            return None
        pods = self.kube.list_namespaced("Pod", self.namespace, WARM_LABEL)
        running = sorted(
            (not _ready(p), self.slots[slot], slot) for p in pods
            if (slot := (p["metadata"].get("labels") or {}).get(WARM_LABEL)) in self.slots
            and (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp"))
        if not running:
            return None
        _, created, slot = running[0]
        del self.slots[slot]
        return slot, created

    def mark(self, req: Launch, slot: str, created: float, labels: dict[str, str],
             grace_s: int) -> dict[str, Any]:
        """Label the slot's Job as the run's (no restarted operator gives it another run) and
        give it the run's deadline; the Job as it is now."""
        deadline = int(math.ceil(time.time() - created + req.deadline_s)) + grace_s
        self.kube.patch_namespaced("Job", self.namespace, slot, {
            "metadata": {"labels": {**labels, GRANTED_LABEL: "true"},
                         "annotations": {"benchfarm.io/run": f"{req.namespace}/{req.name}"}},
            "spec": {"activeDeadlineSeconds": deadline}})
        job: dict[str, Any] | None = self.kube.read_namespaced("Job", self.namespace, slot)
        if job is None:
            raise RuntimeError(f"the warm session Job {self.namespace}/{slot} is gone")
        return job

    def grant(self, req: Launch, job: dict[str, Any], env: dict[str, str]) -> None:
        """Hand the slot's pod its run: the grant, signed for that slot, in its ConfigMap. `env`:
        the session's environment (the launch's, and its sealed labgrid credentials)."""
        slot = job["metadata"]["name"]
        grant = SessionGrant(slot=slot, namespace=req.namespace, name=req.name,
                             attempt=req.attempt, resume=req.resume, deadline_s=req.deadline_s,
                             env=env)
        self.kube.create_namespaced("ConfigMap", self.namespace, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": slot, "namespace": self.namespace, "labels": slot_labels(slot),
                         "ownerReferences": [job_owner(job)]},
            "data": sign_grant(self.key, grant)})


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _finished(job: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])
