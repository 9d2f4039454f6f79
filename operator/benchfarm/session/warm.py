"""`benchfarm session warm`: a session pod started before its run, one of the job launcher's pool.

A cold session Job spends seconds between its creation and the first power-on: scheduling, the
container, then importing labgrid, grpc, kubernetes, minio, pydantic and scipy. A warm pod
(`operator.launch.warm` keeps a few) has done all of that already: it imports everything, then watches the
ConfigMap of its own slot's name (the only thing its account may read). When the operator gives
it a run, it has bound the run's Role to this pod's account and made the run's Lease, then written
the grant (`api.grants`) signed with the key the operator and its sessions share. The pod checks
the signature and that the grant is for its own slot, and runs that one session in this process,
as `benchfarm session run` would; then it exits. A pod never serves a second run. Without a grant
within BENCHFARM_WARM_IDLE_SECONDS it exits too, and the operator starts another.
"""

from __future__ import annotations

import logging
import time

from kubernetes import watch
from kubernetes.client.rest import ApiException

from benchfarm.api.grants import READY_FILE, SessionGrant
from benchfarm.core.policy import trust
from benchfarm.kubeapi.client import Kube
from benchfarm.logs import configure
from benchfarm.session import runner, server
from benchfarm.settings import Settings, adopt

log = logging.getLogger("benchfarm.session")

FORBIDDEN_WAIT_S = 15.0      # the run's Role, bound just before the grant, reaching the authorizer


def wait_for_grant(kube: Kube, namespace: str, slot: str, key: bytes,
                   idle_s: float) -> SessionGrant | None:
    """The signed grant for this slot, or None once `idle_s` passed without one."""
    deadline = time.monotonic() + idle_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            stream = watch.Watch().stream(
                kube.core.list_namespaced_config_map, namespace,
                field_selector=f"metadata.name={slot}", timeout_seconds=max(1, int(min(left, 300))))
            for event in stream:
                if event["type"] not in ("ADDED", "MODIFIED"):
                    continue
                data = kube.api.sanitize_for_serialization(event["object"]).get("data")
                grant = trust.read_grant(key, slot, data)
                if grant is None:
                    raise SystemExit(f"the ConfigMap {namespace}/{slot} holds no grant signed "
                                     f"for this slot; not running anything")
                return grant
        except ApiException as exc:   # 403 until the slot's Role is bound; an API outage
            log.debug("waiting for the grant of slot %s: %s", slot, exc.reason)
            time.sleep(0.2)
        except (OSError, ValueError) as exc:
            log.debug("waiting for the grant of slot %s: %s", slot, exc)
            time.sleep(1.0)
    return None


def _await_rights(kube: Kube, grant: SessionGrant) -> None:
    """The run's Role was bound to this account just before the grant: wait until it applies."""
    deadline = time.monotonic() + FORBIDDEN_WAIT_S
    while True:
        try:
            kube.get_run(grant.namespace, grant.name)
            return
        except ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                return          # the session reports whatever it is
            time.sleep(0.05)


def main() -> int:
    settings = Settings.from_env()
    configure(settings.log_level)
    slot, namespace, idle_s = settings.warm_slot, settings.namespace, settings.warm_idle_seconds
    if not slot:
        print("benchfarm session warm: BENCHFARM_WARM_SLOT is not set", flush=True)
        return 2
    try:
        key = trust.key_from(settings.signing_key)
    except ValueError as exc:
        print(f"benchfarm session warm: {exc}", flush=True)
        return 2
    server._import_everything(settings)
    kube = Kube(settings)
    ready = settings.warm_ready or READY_FILE
    try:                       # the pod's readiness probe (operator.launch.jobs): this slot is warm now
        with open(ready, "w"):
            pass
    except OSError as exc:
        log.warning("cannot mark the slot ready (%s): %s", ready, exc)
    grant = wait_for_grant(kube, namespace, slot, key, idle_s)
    if grant is None:
        log.info("warm slot %s: no run in %.0f s; exiting", slot, idle_s)
        return 0
    log.info("warm slot %s takes %s/%s (attempt %d, run %d) on %s", slot, grant.namespace,
             grant.name, grant.attempt, grant.resume, grant.env.get("BENCHFARM_RUN_BOARD"))
    adopt(grant.env)
    _await_rights(Kube(settings), grant)
    return runner.main(f"{grant.namespace}/{grant.name}")
