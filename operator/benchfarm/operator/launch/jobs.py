"""Board sessions as Kubernetes Jobs: the launcher of a cluster install (BENCHFARM_LAUNCHER=job).

One Job per session attempt and per resume, from the operator's own image, running `benchfarm
session run NS/NAME`. `backoffLimit: 0`: the Job controller never retries, the operator decides
about resuming from the run's checkpoints (`operator.runs.sessions`); `activeDeadlineSeconds` is what is
left of the run's timeout plus a grace period for uploading and releasing.

The Job lives in the operator's namespace, beside what the chart gives it (the MinIO Secret, the
device types, the session pod template rendered by Helm), because a pod can read a Secret only of
its own namespace and the run's namespace belongs to its users. What a session may do is granted
in the run's namespace, per run: a ServiceAccount of its own (owned by its Jobs, so it goes with
them) bound by a Role that names its run, its baseline and its Lease, and nothing else. The Role
and RoleBinding are owned by the run: deleting the run deletes them.

Those names are predictable, and whoever administers the run's namespace may have made an object of
that name first. One that already exists is used only if it is benchfarm's, of this run (labels,
owner, the Role its binding binds); its rules or subjects are then set back to what benchfarm
would create. Anything else refuses the launch (a lab fault): the session's account is never bound
to a Role benchfarm did not make, nor the session's Role to anyone else.

A board's health check (`session.health`) is a Job too, in the operator's namespace where its
Lease lives, under one ServiceAccount the chart makes for health checks (values
`sessions.healthAccount`; BENCHFARM_HEALTH_ACCOUNT): it reads and writes no run, only its
Board's status and its Lease, so it needs no grant per launch.
"""

from __future__ import annotations

import copy
import logging
import math
import re
from typing import Any

import yaml

from benchfarm.api.base import GROUP, VERSION
from benchfarm.api.grants import READY_FILE
from benchfarm.api.outcomes import LabFault, SessionKind
from benchfarm.core.policy import trust
from benchfarm.errors import InfraError
from benchfarm.kubeapi.client import API_FAILURES
from benchfarm.kubeapi.leases import HEALTH_LEASE_LABEL, session_lease_name, unheld_session_lease
from benchfarm.operator.launch import warm
from benchfarm.operator.launch.credentials import SessionCredentials, session_env
from benchfarm.operator.launch.interface import Launch
from benchfarm.settings import HEALTH_ACCOUNT, SESSION_JOB_TTL, Settings

log = logging.getLogger(__name__)

SESSION_LABEL = "benchfarm.io/session"
GRACE_S = 120          # past the run's own timeout: the runner's upload, power-off and release


def job_name(req: Launch) -> str:
    """`<run>-<uid>-a<attempt>r<resume>` (a health check: `health-<board>-<uid>-c<check>`):
    readable in `kubectl get jobs`, unique per launch, and short enough for the pod names the
    Job controller derives from it."""
    if req.kind == SessionKind.health_check:
        stem = re.sub(r"[^a-z0-9-]", "-", req.board.lower())[:29].strip("-") or "board"
        return f"health-{stem}-{req.uid[:8]}-c{req.attempt}"
    if req.kind == SessionKind.lease_end:
        stem = re.sub(r"[^a-z0-9-]", "-", req.name.lower())[:30].strip("-") or "lease"
        return f"lease-end-{stem}-{req.uid[:8]}"
    stem = re.sub(r"[^a-z0-9-]", "-", req.name.lower())[:36].strip("-") or "run"
    return f"{stem}-{req.uid[:8]}-a{req.attempt}r{req.resume}"


def account_name(uid: str) -> str:
    return f"benchfarm-session-{uid}"


def _value(text: str) -> str:
    """A label value: <= 63 characters, alphanumeric at both ends."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63].strip("-_.")


def _labels(req: Launch) -> dict[str, str]:
    value = _value
    if req.kind == SessionKind.health_check:
        return {"app.kubernetes.io/name": "benchfarm-session",
                "app.kubernetes.io/managed-by": "benchfarm", SESSION_LABEL: "true",
                HEALTH_LEASE_LABEL: "true", "benchfarm.io/board": value(req.board),
                "benchfarm.io/board-uid": req.uid, "benchfarm.io/check": str(req.attempt)}
    if req.kind == SessionKind.lease_end:
        return {"app.kubernetes.io/name": "benchfarm-session",
                "app.kubernetes.io/managed-by": "benchfarm", "benchfarm.io/board": value(req.board),
                "benchfarm.io/lease-namespace": value(req.namespace),
                "benchfarm.io/lease-name": value(req.name), "benchfarm.io/lease-uid": req.uid}
    return {"app.kubernetes.io/name": "benchfarm-session",
            "app.kubernetes.io/managed-by": "benchfarm", SESSION_LABEL: "true",
            "benchfarm.io/run-namespace": value(req.namespace),
            "benchfarm.io/run-name": value(req.name), "benchfarm.io/run-uid": req.uid,
            "benchfarm.io/attempt": str(req.attempt), "benchfarm.io/resume": str(req.resume)}


def run_owner(req: Launch) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkRun", "name": req.name,
            "uid": req.uid}


def session_role(req: Launch, *, create_lease: bool = True) -> dict[str, Any]:
    """In the run's namespace, owned by the run: read its run (and its baseline), patch its status,
    hold its Lease, post events. Nothing of other runs. A warm slot's account does not create the
    Lease (the operator does: `operator.launch.warm`), so it is not given that."""
    lease = session_lease_name(req.name)
    create = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "verbs": ["create"]}] if create_lease else []    # create cannot be limited to a name
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": account_name(req.uid), "namespace": req.namespace,
                         "labels": _labels(req), "ownerReferences": [run_owner(req)]},
            "rules": [
                {"apiGroups": [GROUP], "resources": ["benchmarkruns"],
                 "resourceNames": [req.name, *req.reads], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [GROUP], "resources": ["benchmarkruns/status"],
                 "resourceNames": [req.name], "verbs": ["get", "patch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": [lease], "verbs": ["get", "update", "delete"]},
                *create,
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]}


def session_binding(req: Launch, account_namespace: str, account: str | None = None) -> dict[str, Any]:
    """The run's Role bound to the run's own account, or to the warm slot that takes the run."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": account_name(req.uid), "namespace": req.namespace,
                         "labels": _labels(req), "ownerReferences": [run_owner(req)]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": account_name(req.uid)},
            "subjects": [{"kind": "ServiceAccount", "name": account or account_name(req.uid),
                          "namespace": account_namespace}]}


def _plain(value: Any) -> Any:
    """For comparing what the API server returns with what we send: no empty fields."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def foreign(have: dict[str, Any], want: dict[str, Any], req: Launch) -> str | None:
    """Why an existing object of the name benchfarm would give `want` is not this run's, or None.
    Rules and subjects are not asked about: those of this run's object are set back anyway."""
    meta = have.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get("app.kubernetes.io/managed-by") != "benchfarm":
        return "not labelled app.kubernetes.io/managed-by=benchfarm"
    if labels.get("benchfarm.io/run-uid") != req.uid:
        return f"labelled for run uid {labels.get('benchfarm.io/run-uid')!r}, not {req.uid}"
    if want["kind"] in ("Role", "RoleBinding") and not any(
            o.get("kind") == "BenchmarkRun" and o.get("uid") == req.uid
            for o in meta.get("ownerReferences") or []):
        return "not owned by the run"
    if want["kind"] == "RoleBinding" and _plain(have.get("roleRef")) != _plain(want["roleRef"]):
        ref = have.get("roleRef") or {}
        return f"it binds {ref.get('kind')} {ref.get('name')}, not the run's session Role"
    return None


def _restricted(pod: dict[str, Any]) -> None:
    """The `restricted` pod security standard, whatever the template left out."""
    sc = pod.setdefault("securityContext", {})
    sc.setdefault("runAsNonRoot", True)
    sc.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    for container in pod["containers"]:
        csc = container.setdefault("securityContext", {})
        csc["allowPrivilegeEscalation"] = False
        csc.setdefault("capabilities", {})["drop"] = ["ALL"]
        csc.setdefault("readOnlyRootFilesystem", True)


def _pod(template: dict[str, Any], labels: dict[str, str], account: str, command: list[str],
         env: dict[str, str]) -> dict[str, Any]:
    """A session pod from the chart's template: its command, account and identity set here."""
    pod = copy.deepcopy(template)
    spec = pod.setdefault("spec", {})
    pod.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    spec["restartPolicy"] = "Never"
    spec["serviceAccountName"] = account
    spec["automountServiceAccountToken"] = True
    container = spec["containers"][0]
    container["command"] = command
    container.pop("args", None)
    kept = [e for e in container.get("env") or [] if e.get("name") not in env]
    container["env"] = [*kept, *({"name": k, "value": v} for k, v in env.items())]
    _restricted(spec)
    return pod


def job_manifest(req: Launch, template: dict[str, Any], namespace: str,
                 ttl_s: int = SESSION_JOB_TTL, health_account: str = HEALTH_ACCOUNT,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """The Job of one launch. `template` is a pod template (`metadata`, `spec`) whose first
    container runs the operator's image; the session's command, identity (`env`, by default
    the launch's own: `launchers.session_env` adds its sealed labgrid credentials) and deadline
    are set here. A health check runs under the chart's `health_account` (its Role: the health
    Leases in this namespace, Boards' status), not an account of a run."""
    labels = _labels(req)
    board_level = req.kind in (SessionKind.health_check, SessionKind.lease_end)
    account = health_account if board_level else account_name(req.uid)
    pod = _pod(template, labels, account, ["benchfarm", "session", *req.argv()],
               req.env() if env is None else env)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name(req), "namespace": namespace, "labels": labels,
                         "annotations": {"benchfarm.io/board": req.board}
                         if board_level else
                         {"benchfarm.io/run": f"{req.namespace}/{req.name}"}},
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": ttl_s,
                     "activeDeadlineSeconds": int(math.ceil(req.deadline_s)) + GRACE_S,
                     "template": pod}}


def warm_job_manifest(slot: str, template: dict[str, Any], namespace: str,
                      ttl_s: int = SESSION_JOB_TTL,
                      idle_s: int = warm.IDLE_S) -> dict[str, Any]:
    """The Job of a warm slot (`operator.launch.warm`): no run yet; its deadline is set when it gets one."""
    labels = warm.slot_labels(slot)
    pod = _pod(template, labels, slot, ["benchfarm", "session", "warm"],
               {"BENCHFARM_WARM_SLOT": slot, "BENCHFARM_NAMESPACE": namespace,
                "BENCHFARM_WARM_IDLE_SECONDS": str(idle_s), "BENCHFARM_WARM_READY": READY_FILE})
    # Ready once its imports are done (`kubectl get pods` shows which slots are warm)
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["test", "-e", READY_FILE]}, "periodSeconds": 2}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": slot, "namespace": namespace, "labels": labels},
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": ttl_s, "template": pod}}


class JobLauncher:
    """Starts each session as a Job: a warm slot's when one waits (`operator.launch.warm`), a cold one otherwise."""

    def __init__(self, kube: Any, namespace: str, template: dict[str, Any],
                 ttl_s: int = SESSION_JOB_TTL, health_account: str = HEALTH_ACCOUNT,
                 warm_slots: int = 0,
                 key: bytes = b"", template_configmap: str = "",
                 credentials: SessionCredentials | None = None) -> None:
        self.kube = kube
        self.credentials = credentials      # each session's own labgrid certificate, sealed
        self.namespace = namespace
        self.template = template
        self.ttl_s = ttl_s
        self.health_account = health_account
        self.warm = warm.WarmPool(kube, namespace, warm_slots, key,
                                  lambda slot: warm_job_manifest(slot, template, namespace, ttl_s),
                                  owner=template_configmap)

    @classmethod
    def from_settings(cls, settings: Settings, kube: Any) -> JobLauncher:
        path = settings.session_template
        try:
            template = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise SystemExit(f"BENCHFARM_LAUNCHER=job needs the session pod template "
                             f"(BENCHFARM_SESSION_TEMPLATE={path}): {exc}") from exc
        if not isinstance(template, dict) or not (template.get("spec") or {}).get("containers"):
            raise SystemExit(f"{path}: a pod template with spec.containers is needed")
        slots = settings.warm_sessions
        try:
            key = trust.key_from(settings.signing_key) if slots else b""
        except ValueError as exc:
            raise SystemExit(f"BENCHFARM_WARM_SESSIONS={slots}: {exc}") from exc
        return cls(kube, settings.namespace, template, settings.session_job_ttl,
                   settings.health_account, slots, key, settings.session_template_configmap,
                   SessionCredentials.from_settings(settings))

    def launch(self, req: Launch) -> str:
        if req.kind in (SessionKind.health_check, SessionKind.lease_end):
            return self._launch_board_session(req)    # the chart's health account, cold
        taken = self.warm.take()
        if taken is not None:
            slot, created = taken
            try:
                return self._launch_warm(req, slot, created)
            except API_FAILURES as exc:    # a cold Job instead; the slot, perhaps half given, goes
                log.warning("the warm slot %s could not take %s/%s (%s); starting a cold Job",
                            slot, req.namespace, req.name, exc)
                try:
                    self.kube.delete_namespaced("Job", self.namespace, slot)
                except API_FAILURES as gone:     # then it exits when idle (operator.launch.warm.IDLE_S)
                    log.warning("could not delete the warm slot %s: %s", slot, gone)
        return self._launch_cold(req)

    def _launch_warm(self, req: Launch, slot: str, created: float) -> str:
        """The slot's Job marked as the run's, the run's Role bound to the slot's account, the
        run's Lease made, then the grant."""
        job = self.warm.mark(req, slot, created, _labels(req), GRACE_S)
        self._ensure(req, session_role(req, create_lease=False))
        self._ensure(req, session_binding(req, self.namespace, account=slot))
        self.kube.create_namespaced("Lease", req.namespace, unheld_session_lease(
            req.namespace, req.name, req.uid, f"{GROUP}/{VERSION}"))    # exists on a resume
        self.warm.grant(req, job, session_env(req, self.credentials))
        log.info("launched the session of %s/%s (attempt %d, run %d): warm job %s/%s",
                 req.namespace, req.name, req.attempt, req.resume, self.namespace, slot)
        return f"job {self.namespace}/{slot} (warm)"

    def _launch_cold(self, req: Launch) -> str:
        account = account_name(req.uid)
        self._ensure(req, session_role(req))     # the grants first: a refusal leaves no account
        self._ensure(req, session_binding(req, self.namespace))
        self._ensure(req, {"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": account, "namespace": self.namespace,
                                        "labels": _labels(req)}})
        manifest = job_manifest(req, self.template, self.namespace, self.ttl_s,
                                env=session_env(req, self.credentials))
        name = manifest["metadata"]["name"]
        self.kube.create_namespaced("Job", self.namespace, manifest)
        self._owned_by_job(account, name)
        log.info("launched the session of %s/%s (attempt %d, run %d): job %s/%s",
                 req.namespace, req.name, req.attempt, req.resume, self.namespace, name)
        return f"job {self.namespace}/{name}"

    def _launch_board_session(self, req: Launch) -> str:
        """A health check's Job (or a BoardLease's end), in this namespace (a check's Lease's),
        under the chart's health account: no run, no account of its own."""
        manifest = job_manifest(req, self.template, self.namespace, self.ttl_s,
                                self.health_account, session_env(req, self.credentials))
        name = manifest["metadata"]["name"]
        self.kube.create_namespaced("Job", self.namespace, manifest)
        log.info("launched %s: job %s/%s", req.what(), self.namespace, name)
        return f"job {self.namespace}/{name}"

    def _ensure(self, req: Launch, want: dict[str, Any]) -> None:
        """Create `want`; if its name is taken, use the existing object only if it is this run's
        (`foreign`), with its rules or subjects set back to `want`'s."""
        kind, meta = want["kind"], want["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if self.kube.create_namespaced(kind, namespace, want):
            return
        have = self.kube.read_namespaced(kind, namespace, name)
        if have is None:      # deleted since: it is ours to create now
            self.kube.create_namespaced(kind, namespace, want)
            return
        problem = foreign(have, want, req)
        if problem:
            raise InfraError(f"{kind} {namespace}/{name} exists and is not benchfarm's session "
                             f"{kind} of run {req.namespace}/{req.name} ({problem}); refusing to "
                             f"start the session: delete it or ask the namespace's admin",
                             reason=LabFault.foreign_session_object)
        field = {"Role": "rules", "RoleBinding": "subjects"}.get(kind)
        if field and _plain(have.get(field)) != _plain(want[field]):
            log.warning("%s %s/%s of run %s/%s was changed; setting its %s back", kind,
                        namespace, name, req.namespace, req.name, field)
            body = {**want, "metadata": {**meta, "labels": {**(have["metadata"].get("labels")
                                                                or {}), **meta["labels"]},
                                         "resourceVersion": have["metadata"]["resourceVersion"]}}
            self.kube.replace_namespaced(kind, namespace, name, body)

    def _owned_by_job(self, account: str, job: str) -> None:
        """The ServiceAccount goes when the last of the run's Jobs has gone (TTL or delete)."""
        created = self.kube.read_namespaced("Job", self.namespace, job)
        sa = self.kube.read_namespaced("ServiceAccount", self.namespace, account)
        if created is None or sa is None:
            return
        owners = [{k: o[k] for k in ("apiVersion", "kind", "name", "uid")}
                  for o in sa["metadata"].get("ownerReferences") or []]
        uid = created["metadata"]["uid"]
        if any(o["uid"] == uid for o in owners):
            return
        owners.append({"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid})
        self.kube.patch_namespaced("ServiceAccount", self.namespace, account,
                                   {"metadata": {"ownerReferences": owners}})

    def end(self, req: Launch) -> str:
        """Delete the run's (or board's health check's) session Jobs that still run (a warm slot's too: it carries the
        run's labels once marked), their pods with them (`Background` propagation: the kubelet
        sends SIGTERM, then SIGKILL after the pod's grace period)."""
        label = {SessionKind.run: "benchfarm.io/run-uid", SessionKind.lease_end:
                 "benchfarm.io/lease-uid", SessionKind.health_check: "benchfarm.io/board-uid"}
        ended = []
        for job in self.kube.list_namespaced("Job", self.namespace,
                                             f"{label[req.kind]}={req.uid}"):
            done = job.get("status") or {}      # a Job's (Kubernetes'), not a benchfarm status
            if done.get("succeeded") or done.get("failed"):
                continue                 # already over; its TTL removes it
            name = job["metadata"]["name"]
            self.kube.delete_namespaced("Job", self.namespace, name)
            ended.append(name)
        return f"job(s) {', '.join(ended)} deleted" if ended else "no session Job was running"

    def reap(self) -> None:
        """Nothing to reap (finished Jobs expire by their TTL); the warm pool is topped up."""
        try:
            self.warm.top_up()
        except API_FAILURES as exc:       # the API is down: cold Jobs still work; try again later
            log.warning("could not top up the warm session pool: %s", exc)
