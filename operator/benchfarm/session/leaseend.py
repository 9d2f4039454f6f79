"""`benchfarm session lease-end NAMESPACE/NAME`: the end of a BoardLease, as a session.

When a lease ends (its expiry, `spec.release`, or its deletion) the board must be switched off
before the next holder gets it, and the operator never drives a board (the import contract "The
operator never drives a board"): it launches this short session as it launches a run's. The
session takes the lease's own labgrid identity (`api.places.lease_identity`), takes the lock
back if the coordinator forgot it (a restart), powers the board off through the place's power
driver (labgrid's PowerProtocol, as a run's session ends; the console is never opened), releases
the place and writes `status.leaseEnd` (`api.outcomes.LeaseEnd`). A place someone else holds now
is left alone and said so. The operator acts on `leaseEnd` (the board back in the queue's hands);
if no end comes it releases the place itself and says the board may still be on.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from benchfarm.api.leases import BoardLeaseStatus
from benchfarm.api.outcomes import LeaseEnd
from benchfarm.api.places import lease_identity
from benchfarm.core.policy import trust
from benchfarm.kubeapi.client import Kube
from benchfarm.lab.board import Board
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.lab.environment import labgrid_variables
from benchfarm.session.context import Config
from benchfarm.settings import Settings

log = logging.getLogger("benchfarm.session")


def now_iso() -> str:
    """The end's time to the millisecond: how soon the next run follows is measured from it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def power_off_and_release(coordinator: Coordinator, place: str, config: Config) -> LeaseEnd:
    """The board of `place` off and the place released, under the coordinator's identity."""
    info = coordinator.places().get(place)
    if info is None:
        return LeaseEnd(poweredOff=False, message=f"place {place} no longer exists", at=now_iso())
    if info.acquired not in (None, coordinator.identity):
        return LeaseEnd(poweredOff=False, at=now_iso(),
                        message=f"place {place} is held by {info.acquired}; not touched")
    if info.acquired is None:          # the coordinator restarted and forgot the lease's lock
        coordinator.acquire(place)
    ok, message = False, ""
    try:
        dtype = load_device_types(config.device_types)[info.tags.get("device_type", "")]
        board = Board(place, info.resources, dtype, coordinator.session(),
                      labgrid_variables=labgrid_variables(config.settings))
        try:
            board.power_off()
            ok, message = True, f"{place} powered off and released"
        finally:
            board.close()
    except Exception as exc:   # the PDU's or the exporter's fault: released anyway, said loudly
        log.warning("power off of %s failed: %s", place, exc, exc_info=True)
        message = f"power off of {place} failed ({exc}); released anyway"
    finally:
        coordinator.release(place)
    return LeaseEnd(poweredOff=ok, message=message[:500], at=now_iso())


def main(ref: str) -> int:
    from benchfarm.logs import configure
    settings = Settings.from_env()
    configure(settings.log_level)
    namespace, name = ref.split("/", 1)
    config = Config.from_settings(settings)
    kube = Kube(settings, outage_budget=120.0)
    body = kube.get_custom("boardleases", namespace, name)
    expected = settings.lease_uid
    if body is None or (expected and body["metadata"]["uid"] != expected):
        log.info("lease %s is gone (or was re-created); nothing to end", ref)
        return 0
    status = body.get("status") or {}          # as signed: the signature is over it
    seen = BoardLeaseStatus.of(status)
    place = seen.place
    if not place or seen.leaseEnd:
        log.info("lease %s holds no place, or ended already", ref)
        return 0
    if not trust.lease_trusted(trust.key_from(settings.signing_key), body["metadata"]["uid"],
                               (body.get("spec") or {}).get("user"), status):
        log.warning("lease %s: its grant is not benchfarm's (no valid signature); the board "
                    "is not touched", ref)
        return 3
    host, user = lease_identity(body["metadata"]["uid"])
    coordinator = Coordinator.from_settings(config.settings, address=config.coordinator,
                                            host=host, user=user)
    try:
        end = power_off_and_release(coordinator, place, config)
    finally:
        coordinator.close()
    kube.patch_custom("boardleases", namespace, name,
                      {"status": {"leaseEnd": end.model_dump(mode="json")}}, status=True)
    log.info("lease %s ended: %s", ref, end.message)
    return 0
