"""`operator.stores.reachability`: the operator's probes of the store and the results database, which set
`benchfarm_reachable{party}` (BenchfarmStoreUnreachable, BenchfarmDatabaseUnreachable). The
real store and database clients against a port nobody listens on; the lab's running operator
shows them reachable (tests/stack/test_history.py)."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from benchfarm.errors import Outage, Party
from benchfarm.history.db import Database
from benchfarm.operator.state import metrics
from benchfarm.operator.stores.reachability import Reachability
from benchfarm.store.artifacts import ArtifactStore, StoreConfig


def reachable(party: Party) -> float | None:
    return metrics.REGISTRY.get_sample_value("benchfarm_reachable", {"party": party.value})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_real_clients_report_a_service_that_does_not_answer() -> None:
    port = closed_port()
    store = ArtifactStore(StoreConfig(f"127.0.0.1:{port}", "k", "s", "bucket"), attempts=1)
    db = Database(f"postgresql://u:p@127.0.0.1:{port}/results", connect_timeout=1)
    with pytest.raises(Outage) as e:
        store.ping()
    assert e.value.party == Party.store
    with pytest.raises(Outage) as e:
        db.ping()
    assert e.value.party == Party.database
    probes = Reachability({Party.store: store.ping, Party.database: db.ping})
    assert probes.probe() == {Party.store: False, Party.database: False}
    assert reachable(Party.store) == 0 and reachable(Party.database) == 0
    db.close()


def test_a_change_is_logged_once_and_the_gauge_follows_every_probe(caplog) -> None:
    answers = [False, False, True, True, False]

    def ping() -> None:
        if not answers.pop(0):
            raise Outage("no answer", party=Party.store)
    probes = Reachability({Party.store: ping})
    with caplog.at_level(logging.INFO, logger="benchfarm.reachability"):
        seen = []
        for _ in range(5):
            probes.probe()
            seen.append(reachable(Party.store))
    assert seen == [0, 0, 1, 1, 0]
    assert [r.getMessage() for r in caplog.records] == [
        "the store does not answer: Outage: no answer", "the store answers again",
        "the store does not answer: Outage: no answer"]


def test_the_thread_probes_until_stopped() -> None:
    calls: list[float] = []
    probes = Reachability({Party.database: lambda: calls.append(time.monotonic())}, every=0.05)
    probes.start()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    probes.stop()
    assert len(calls) >= 3 and reachable(Party.database) == 1
    assert not probes.thread.is_alive()
    after = len(calls)
    time.sleep(0.15)
    assert len(calls) == after
