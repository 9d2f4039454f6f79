"""`benchfarm operator`: lead (or stand by), then run the kopf operator over all namespaces."""

from __future__ import annotations

import asyncio

import kopf

from benchfarm.logs import configure
from benchfarm.settings import Settings


def run(liveness: str | None = None) -> int:
    settings = Settings.from_env()     # SystemExit naming the variable when one is unusable
    configure(settings.log_level)
    from benchfarm.operator import (
        handlers,  # registers the handlers; the leader Lease goes at cleanup
    )
    liveness = liveness or settings.liveness
    from benchfarm.operator.leader import lead
    from benchfarm.operator.state import metrics
    metrics.serve(settings.metrics_port, settings.metrics_addr)   # a standby's too: benchfarm_leader 0
    lease = lead(liveness, settings)   # blocks while another replica leads
    try:
        # all_at_once: both creation handlers (admission, the cancel field) in one cycle, so a
        # new run costs one patch of kopf's bookkeeping instead of one per handler; the
        # settings reach the handlers in kopf's memo
        asyncio.run(kopf.operator(clusterwide=True, liveness_endpoint=liveness or None,
                                  standalone=True, lifecycle=kopf.lifecycles.all_at_once,
                                  memo=handlers.Parts(settings=settings, lease=lease,
                                                      runtime=None, campaigns=None,
                                                      bisections=None)))
    finally:
        lease.release()      # a clean stop hands over at once, not after the Lease expires
    return 0
