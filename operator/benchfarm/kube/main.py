"""`benchfarm operator`: lead (or stand by), then run the kopf operator over all namespaces."""

from __future__ import annotations

import asyncio
import logging
import os

import kopf


def run(liveness: str | None = None) -> int:
    logging.basicConfig(level=os.environ.get("BENCHFARM_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    from . import handlers  # registers the handlers; gives the leader Lease up at cleanup
    liveness = liveness or os.environ.get("BENCHFARM_LIVENESS", "http://127.0.0.1:8080/healthz")
    from . import metrics
    from .leader import lead
    metrics.serve()          # a standby's too: benchfarm_leader 0
    lease = lead(liveness)   # blocks while another replica leads
    handlers.LEASE = lease
    try:
        # all_at_once: both creation handlers (admission, the cancel field) in one cycle, so a
        # new run costs one patch of kopf's bookkeeping instead of one per handler
        asyncio.run(kopf.operator(clusterwide=True, liveness_endpoint=liveness or None,
                                  standalone=True, lifecycle=kopf.lifecycles.all_at_once))
    finally:
        lease.release()      # a clean stop hands over at once, not after the Lease expires
    return 0
