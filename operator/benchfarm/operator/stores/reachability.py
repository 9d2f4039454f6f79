"""Whether the operator reaches the lab's store and results database (`benchfarm_reachable`).

The operator meets an outage of either only when it needs them (a campaign's report, a finished
run to index), and a lab whose store went down at night would hear of it from the first run that
failed. So a thread of its own asks each, every PROBE_EVERY seconds, the cheapest question it
answers (`ArtifactStore.ping`, `Database.ping`) and sets the gauge the chart's alerting rules read
(BenchfarmStoreUnreachable, BenchfarmDatabaseUnreachable); a change is logged once, not every
probe. Nothing else waits for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from benchfarm.errors import BenchfarmError, Party
from benchfarm.operator.state import metrics

log = logging.getLogger("benchfarm.reachability")

PROBE_EVERY = 15.0      # seconds between two probes of each service


class Reachability:
    def __init__(self, probes: Mapping[Party, Callable[[], None]],
                 every: float = PROBE_EVERY) -> None:
        self.probes = dict(probes)
        self.every = every
        self.reached: dict[Party, bool] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="reachability", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """No probe after this; one under way (a store that hangs) is not waited for long."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def probe(self) -> dict[Party, bool]:
        """Ask each service once; the gauges say what each answered."""
        for party, ping in self.probes.items():
            try:
                ping()
                up, why = True, ""
            except BenchfarmError as exc:   # an outage (Outage), or a refusal (InfraError)
                up, why = False, f"{type(exc).__name__}: {exc}"
            except Exception as exc:        # a bug of the probe's: said, and the party not up
                metrics.bug(log, "probing the %s", party.value)
                up, why = False, f"{type(exc).__name__}: {exc}"
            metrics.REACHABLE.labels(party.value).set(1 if up else 0)
            if self.reached.get(party, True) != up:
                if up:
                    log.info("the %s answers again", party.value)
                else:
                    log.warning("the %s does not answer: %s", party.value, why)
            self.reached[party] = up
        return dict(self.reached)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self.probe()
            self.stopping.wait(self.every)
