"""The operator's side of health checks (operator.boards.health, called on operator.boards.inventory): a check is
launched through the launcher with a number of its own, only that check's verdict counts, and a
check whose session holds no Lease is given up (its place released) and the board stays
quarantined until the next one."""

from __future__ import annotations

import time
from types import SimpleNamespace

from benchfarm.api.devicetype import DeviceType
from benchfarm.api.labpolicy import LabPolicySpec
from benchfarm.api.outcomes import SessionKind
from benchfarm.errors import Outage, Party
from benchfarm.operator.boards import health, inventory
from benchfarm.operator.state.owner import Owner
from benchfarm.operator.state.records import BoardRecord


class FakeRuntime:
    def __init__(self, board_status: dict | None = None) -> None:
        self.owner = Owner()             # not started: its calls run on the caller's thread
        self.namespace = "benchfarm"
        self.inventory_known = True
        self.policy = LabPolicySpec(quarantineCooldownSeconds=0)
        self.device_types = {"qemu-x86": DeviceType(name="qemu-x86", console={"prompt": "# "},
                                                    boot={"timeoutSeconds": 30, "retries": 1})}
        self.launched, self.events, self.released, self.patches = [], [], [], []
        self.notified = []
        self.on_patch = lambda: None       # what a watch event does meanwhile
        self.ended = []
        self.launcher = SimpleNamespace(launch=lambda req: self.launched.append(req) or "pid 1",
                                        end=lambda req: self.ended.append(req) or "ended")
        # the launch threads, inline: a check's writes and launch, the look at its Lease
        self.launches = SimpleNamespace(submit=lambda fn, *args: fn(*args))
        self.kube = SimpleNamespace(
            patch_board_status=lambda name, st: self.patches.append((name, st)) or
            self.on_patch(),
            event=lambda obj, type_, reason, message: self.events.append((reason, message)),
            get_cluster=lambda kind, name: {"metadata": {"uid": "u-0"},
                                            "status": board_status or {}},
            # no Lease API here: listing the checks' Leases fails as in an outage (nobody is
            # judged dead); the tests below judge with the observer's own clock
            api=None, _call=self._outage)
        self.coordinator = SimpleNamespace(
            release=lambda name, holder: self.released.append((name, holder)) or True)

    @staticmethod
    def _outage(what, fn):
        raise Outage(f"no Lease API in a unit test ({what})", party=Party.api)

    def active_runs(self):
        return []

    def wake(self) -> None:
        pass

    def notify(self, event) -> None:
        self.notified.append(event)


def quarantined_inventory(rt: FakeRuntime, last_check: int = 7) -> inventory.Inventory:
    inv = inventory.Inventory(rt)
    inv.boards["vb-0"] = BoardRecord("vb-0", device_type="qemu-x86", online=True, uid="u-0",
                                     quarantined_since=time.time() - 60, failures=3,
                                     reason="BootFailed: no", health_check=last_check)
    return inv


def test_a_check_is_launched_as_a_session_and_only_its_own_verdict_counts():
    rt = FakeRuntime()
    inv = quarantined_inventory(rt)
    # the Board's watch event, as the check is recorded, still carries the previous verdict
    rt.on_patch = lambda: inv.health.observe_health("vb-0", {"healthCheckEnd": {"check": 7,
                                                                          "verdict": "Passed"}})
    inv.health.health_checks()
    rt.on_patch = lambda: None
    assert len(rt.launched) == 1
    req = rt.launched[0]
    assert (req.kind, req.board, req.attempt, req.uid, req.namespace) == \
        (SessionKind.health_check, "vb-0", 8, "u-0", "benchfarm")
    assert req.argv() == ["health", "vb-0", "8"]
    assert req.deadline_s == 30 * 2 + 60
    assert rt.patches[0] == ("vb-0", {"healthCheck": {"check": 8,
                                                      "startedAt": rt.patches[0][1]["healthCheck"]
                                                      ["startedAt"]}})
    inv.health.health_checks()                                  # running: not launched twice
    assert len(rt.launched) == 1
    # the previous check's verdict, still on the Board, is not this check's
    inv.health.observe_health("vb-0", {"healthCheckEnd": {"check": 7, "verdict": "Passed"}})
    rec = inv.boards["vb-0"]
    assert rec.state == "Quarantined" and "vb-0" in inv.checking and rt.events == []
    inv.health.observe_health("vb-0", {"healthCheckEnd": {"check": 8, "verdict": "Failed",
                                                   "reason": "BootFailed", "message": "panic"}})
    assert rec.state == "Quarantined" and "vb-0" not in inv.checking and rec.run is None
    # the lab's words for the kind of failure, not the message (a console line)
    assert rec.reason == "health check failed: BootFailed: a boot failed (a failure marker on " \
        "its console)"
    assert [e[0] for e in rt.events] == ["HealthCheckFailed"] and "panic" not in rt.events[0][1]
    inv.health.health_checks()                                  # the cooldown (0 s) is over: check 9
    inv.health.observe_health("vb-0", {"healthCheckEnd": {"check": 9, "verdict": "Passed"}})
    assert rec.state == "Idle" and rec.failures == 0 and rec.reason is None
    assert [r.attempt for r in rt.launched] == [8, 9]
    assert [e[0] for e in rt.events] == ["HealthCheckFailed", "HealthCheckPassed"]
    # the lab admin's Notifications hear of the board back, once (a failed check says nothing)
    assert [(e.kind, e.object.name) for e in rt.notified] == [("BoardBack", "vb-0")]
    inv.statuses.close()


def test_a_check_whose_session_holds_no_lease_is_given_up_and_its_place_released(monkeypatch):
    rt = FakeRuntime(board_status={"healthCheckEnd": {"check": 7, "verdict": "Passed"}})
    rt.policy = LabPolicySpec(quarantineCooldownSeconds=30)
    inv = quarantined_inventory(rt)
    now = [1000.0]
    inv.health.clock = lambda: now[0]
    monkeypatch.setattr(health, "list_leases", lambda kube, selector: [])
    inv.health.health_checks()
    assert inv.checking == {"vb-0": 1000.0}
    now[0] += inventory.HEALTH_STARTUP_GRACE - 1       # still in its grace period
    inv.health.health_checks()
    assert "vb-0" in inv.checking and rt.released == []
    now[0] += 2
    inv.health.health_checks()
    assert rt.released == [("vb-0", "benchfarm/health-8-vb-0")]
    assert [(r.kind, r.uid, r.attempt) for r in rt.ended] == [("health", "u-0", 8)]  # ended first
    rec = inv.boards["vb-0"]
    assert rec.state == "Quarantined" and "vb-0" not in inv.checking and rec.run is None
    assert rec.reason.startswith("health check failed: HealthCheckLost")
    assert rt.events[0][0] == "HealthCheckFailed"
    assert [r.attempt for r in rt.launched] == [8]       # the next one after the cooldown
    inv.statuses.close()


def test_a_health_checks_lock_is_ours_and_an_abandoned_one_is_an_orphan():
    from benchfarm.api.places import health_check_of, health_identity
    assert health_check_of("/".join(health_identity("vb-x86.0-a", 12))) == ("vb-x86.0-a", 12)
    assert health_check_of("benchfarm/run-1234") is None
    assert health_check_of("benchfarm/health-x-vb") is None and health_check_of(None) is None


def test_a_restarted_operator_adopts_the_check_of_this_quarantine_only():
    def board(status: dict) -> dict:
        return {"metadata": {"name": "vb-0", "uid": "u-0"}, "status": status}
    quarantine = {"state": "Quarantined", "quarantinedAt": "2026-01-01T10:00:00Z",
                  "reason": "BootFailed: no", "consecutiveInfraFailures": 2}
    cases = {
        "running": ({**quarantine, "healthCheck": {"check": 4, "startedAt": "2026-01-01T10:05:00Z"},
                     "healthCheckEnd": {"check": 3, "verdict": "Failed"}}, True, "Quarantined"),
        "passed, not acted on": ({**quarantine, "healthCheck": {
            "check": 4, "startedAt": "2026-01-01T10:05:00Z"},
            "healthCheckEnd": {"check": 4, "verdict": "Passed"}}, False, "Idle"),
        "passed, then quarantined again": ({**quarantine, "healthCheck": {
            "check": 4, "startedAt": "2026-01-01T09:00:00Z"},
            "healthCheckEnd": {"check": 4, "verdict": "Passed"}}, False, "Quarantined"),
    }
    for what, (status, checking, state) in cases.items():
        rt = FakeRuntime()
        rt.kube.list_cluster = lambda kind, status=status: [board(status)]
        inv = inventory.Inventory(rt)
        inv.load()
        rec = inv.boards["vb-0"]
        rec.device_type, rec.online = "qemu-x86", True
        assert rec.health_check == 4, what
        assert ("vb-0" in inv.checking) == checking, what
        assert rec.state == state, what
        inv.statuses.close()


def test_a_quarantine_is_told_to_the_lab_admins_notifications_once():
    """Board faults up to the LabPolicy's limit quarantine the board: one BoardQuarantined
    event (for Notifications in the operator's namespace: its namespace is the lab's, "")."""
    from benchfarm.errors import InfraError
    rt = FakeRuntime()
    inv = inventory.Inventory(rt)
    inv.boards["vb-1"] = BoardRecord("vb-1", device_type="qemu-x86", online=True, uid="u-1")
    fault = InfraError("no prompt within 60 s", reason="BootTimeout")
    assert not inv.health.board_failed("vb-1", fault) and rt.notified == []
    assert inv.health.board_failed("vb-1", fault)
    assert not inv.health.board_failed("vb-1", fault)          # quarantined already: said once
    assert [(e.kind, e.object.name, e.namespace) for e in rt.notified] == [
        ("BoardQuarantined", "vb-1", "")]
    assert "quarantined after 2 board faults: BootTimeout" in rt.notified[0].summary


def test_the_owner_only_takes_the_board_and_numbers_the_check_its_writes_go_to_a_launch_thread():
    rt = FakeRuntime()
    held: list = []
    rt.launches = SimpleNamespace(submit=lambda fn, *args: held.append((fn, args)))
    inv = quarantined_inventory(rt)
    inv.health.health_checks()
    rec = inv.boards["vb-0"]
    # on the owner: the board taken, the check numbered; no round trip yet
    assert rec.run == "(health check 8)" and "vb-0" in inv.checking
    assert rt.patches == [] and rt.launched == [] and len(held) == 1
    inv.health.health_checks()              # taken: not launched twice (its Lease looked at)
    starts = [(fn, args) for fn, args in held if fn == inv.health._start_check]
    assert len(starts) == 1 and [fn for fn, _ in held][1:] == [inv.health.watch._watch]
    # the launch thread's write fails (an outage): the board waits for the next cooldown
    rt.kube.patch_board_status = lambda name, st: (_ for _ in ()).throw(
        Outage("the API server is down", party=Party.api))
    fn, args = starts[0]
    fn(*args)
    assert rec.run is None and "vb-0" not in inv.checking and rt.launched == []
    assert rec.state == "Quarantined"
    inv.statuses.close()


def test_a_boards_quarantine_reason_and_events_name_no_tenants_console_line():
    """A Board is read by every namespace: a board fault a run handed back (its message quoting
    that run's console) is counted and told in the lab's words for its kind, and a reason no
    session writes reads as a plain board fault."""
    from benchfarm.errors import InfraError
    rt = FakeRuntime()
    inv = inventory.Inventory(rt)
    inv.boards["vb-1"] = BoardRecord("vb-1", device_type="qemu-x86", online=True, uid="u-1")
    line = "Kernel panic - not syncing: team-b's secret build 4f2a"
    inv.health.board_failed("vb-1", InfraError(f"vb-1: the board went down while a command "
                                               f"ran: {line}", reason="BoardCrashed"))
    rec = inv.boards["vb-1"]
    assert rec.failures == 1 and rec.reason == (
        "BoardCrashed: the board went down at its shell (a failure marker on its console)")
    assert inv.health.board_failed("vb-1", InfraError(line, reason=line))
    assert rec.reason == "BoardFault: a board fault"
    said = [m for _, m in rt.events] + [e.summary for e in rt.notified] + [rec.reason]
    assert said and not any("secret" in m or "not syncing" in m for m in said), said
    inv.statuses.close()
