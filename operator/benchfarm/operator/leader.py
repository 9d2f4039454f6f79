"""One operator leads: the holder of the `benchfarm-operator` Lease; other replicas stand by.

A replica blocks here until it holds the Lease, then renews it in a thread. It stays leader while
its renewals go through or while nobody else could have taken over (the API server itself is
down: nobody can). When a renewal shows the Lease in someone else's hands, the process exits at
once: a replica that is not leader must not schedule, and its restart makes it a standby.
A standby answers its liveness probe, so a Deployment does not restart it for waiting, and
serves its metrics with `benchfarm_leader` 0 (1 once it leads): the alert that the lab has no
leader reads them.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import threading
import time
from urllib.parse import urlparse

from benchfarm.kubeapi.client import API_FAILURES, Kube
from benchfarm.kubeapi.leases import OPERATOR_LEASE, LeaseHolder, LeaseLost
from benchfarm.operator.state import metrics
from benchfarm.settings import Settings

log = logging.getLogger("benchfarm.leader")

DURATION = 10          # seconds: a standby takes over within DURATION + RETRY of a leader's death
RENEW = 2.0
RETRY = 2.0


def _standby_probe(liveness: str | None) -> http.server.HTTPServer | None:
    """Answer the liveness endpoint while standing by (kopf serves it once we lead)."""
    if not liveness:
        return None
    url = urlparse(liveness)

    class Alive(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"standby": true}')

        def log_message(self, *_: object) -> None:
            pass
    server = http.server.HTTPServer((url.hostname or "0.0.0.0", url.port or 8080), Alive)
    threading.Thread(target=server.serve_forever, name="standby-probe", daemon=True).start()
    return server


def lead(liveness: str | None, settings: Settings) -> LeaseHolder:
    """Block until this replica holds the operator Lease; keep renewing it from a thread."""
    namespace = settings.namespace
    identity = settings.pod_name or f"{socket.gethostname()}-{os.getpid()}"
    lease = LeaseHolder(Kube(settings, outage_budget=DURATION), namespace, OPERATOR_LEASE,
                        identity, duration=DURATION, labels={"app.kubernetes.io/name": "benchfarm",
                                "app.kubernetes.io/managed-by": "benchfarm"})
    probe = None
    announced = False
    metrics.LEADER.set(0)
    while True:
        try:
            if lease.try_acquire():
                break
        except API_FAILURES as exc:  # the API server may still be starting or be down
            log.warning("cannot reach the API server for the leader Lease: %s", exc)
        except Exception:           # standing by must go on: a bug is counted, tried again
            metrics.bug(log, "taking the leader Lease failed")
        if not announced:
            log.info("standing by: another replica holds the Lease %s/%s", namespace, OPERATOR_LEASE)
            announced = True
            try:
                probe = _standby_probe(liveness)
            except OSError as exc:
                log.warning("standby liveness endpoint unavailable: %s", exc)
        time.sleep(RETRY)
    if probe is not None:
        probe.shutdown()
        probe.server_close()
    log.info("leading as %s (Lease %s/%s)", identity, namespace, OPERATOR_LEASE)
    metrics.LEADER.set(1)
    threading.Thread(target=_keep, args=(lease,), name="leader-lease", daemon=True).start()
    return lease


def _keep(lease: LeaseHolder) -> None:
    while True:
        time.sleep(RENEW)
        if lease.released:          # a clean stop gave it up: nothing to renew
            return
        try:
            lease.renew()
        except LeaseLost as exc:
            if lease.released:
                return
            log.error("lost the leadership (%s); exiting so that only one operator acts", exc)
            logging.shutdown()
            os._exit(3)
        except API_FAILURES as exc:  # nobody can take over while the API server is down either
            log.warning("leader Lease renewal failed (will retry): %s", exc)
        except Exception:           # renewing must go on: a bug is counted, tried again
            metrics.bug(log, "leader Lease renewal failed (will retry)")
